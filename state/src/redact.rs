//! Defence in depth against a secret in what Ballast publishes for diagnosis (a node's log tail, `ballast
//! toolbox dump`): nothing should log key material in the first place, but anything that looks like a PEM
//! private key or a token is replaced before it leaves the process. Pure text in, text out.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

/// What a redacted private key becomes.
pub const REDACTED_KEY: &str = "[redacted: private key]";
/// What a redacted token or secret value becomes.
pub const REDACTED: &str = "[redacted]";

fn pem_private_key() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // A whole block, or an unterminated one (a line cut at the tail's line limit) to the end of the text.
    RE.get_or_init(|| {
        Regex::new(
            r"(?s)-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\z)",
        )
        .expect("the PEM private key pattern compiles")
    })
}

fn named_secret() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // `token=...`, `"secret": "..."`, `Authorization: Bearer ...`, `X-Amz-Security-Token: ...`: the name is kept,
    // the value goes. The value is what follows the separator up to a quote, space, comma or brace.
    RE.get_or_init(|| {
        Regex::new(
            r#"(?i)((?:bearer|[a-z0-9_.-]*(?:token|secret|password|passwd|private[_-]?key|secret[_-]?access[_-]?key|credential)s?)["']?\s*(?:[:=]|\s)\s*["']?)([^"'\s,}\]]{4,})"#,
        )
        .expect("the named secret pattern compiles")
    })
}

fn long_opaque() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"[A-Za-z0-9+/_-]{32,}={0,2}").expect("the opaque pattern compiles")
    })
}

/// A run that looks like key material or a token: 32 or more base64 characters mixing at least two of upper
/// case, lower case and digits (random key material of that length misses two of them with odds below 1e-9),
/// and not a hex digest (a sha256 of a spec, an ETag: lower-case hex stays), nor a path or a name, which carry
/// separators the run stops at.
fn looks_opaque(run: &str) -> bool {
    let body = run.trim_end_matches('=');
    if body
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return false;
    }
    let upper = body.chars().any(|c| c.is_ascii_uppercase());
    let lower = body.chars().any(|c| c.is_ascii_lowercase());
    let digit = body.chars().any(|c| c.is_ascii_digit());
    [upper, lower, digit].iter().filter(|b| **b).count() >= 2
}

/// `text` with every PEM private key block, every value named like a token, secret, password or credential,
/// and every long opaque base64 run replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    let keys = pem_private_key().replace_all(text, REDACTED_KEY);
    let named = named_secret()
        .replace_all(&keys, format!("${{1}}{REDACTED}"))
        .into_owned();
    let opaque = long_opaque()
        .replace_all(&named, |c: &regex::Captures| {
            if looks_opaque(&c[0]) {
                REDACTED.to_string()
            } else {
                c[0].to_string()
            }
        })
        .into_owned();
    if opaque == text {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(opaque)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pem_private_key_goes_whole_and_its_neighbours_stay() {
        let key = crate::pki::generate_ca("kubernetes-ca", "Kubernetes CA")
            .expect("ca")
            .key_pem;
        let text = format!("before\n{key}after");
        let out = redact(&text);
        assert_eq!(out, format!("before\n{REDACTED_KEY}\nafter"));
        // Cut at a line limit: the start of a block goes with everything after it.
        let cut = &key[..key.len() / 2];
        assert_eq!(redact(&format!("x {cut}")), format!("x {REDACTED_KEY}"));
    }

    #[test]
    fn named_values_go_and_their_names_stay() {
        for (text, want) in [
            ("token=abcd1234", "token=[redacted]"),
            (
                r#"{"bootstrapToken": "07401b.f395accd246ae52d"}"#,
                r#"{"bootstrapToken": "[redacted]"}"#,
            ),
            (
                "Authorization: Bearer eyJhbGciOi",
                "Authorization: Bearer [redacted]",
            ),
            (
                "aws_secret_access_key = wJalrXUtnFEMI",
                "aws_secret_access_key = [redacted]",
            ),
            ("password: hunter22", "password: [redacted]"),
        ] {
            assert_eq!(redact(text), want, "{text}");
        }
    }

    #[test]
    fn opaque_runs_go_and_digests_ids_and_paths_stay() {
        let secret = "c2VjcmV0LWtleS1tYXRlcmlhbC0zMi1ieXRlcy1sb25nIQ==";
        assert_eq!(redact(&format!("key {secret} end")), "key [redacted] end");
        let kept = "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 \
                    instance i-0123456789abcdef0 key clusters/demo.example.com/nodes/nodes/spec.yaml \
                    AROAEXAMPLEROLEID:i-0abc";
        assert_eq!(redact(kept), kept);
        assert!(matches!(redact(kept), Cow::Borrowed(_)));
    }

    #[test]
    fn every_encryption_key_generated_is_redacted() {
        for _ in 0..16 {
            let secrets =
                crate::pki::ClusterSecrets::generate("demo.example.com").expect("secrets");
            let key = &secrets.encryption_keys.keys[0].secret;
            let text = format!("material {key} and {}", secrets.service_account_key_pem);
            let out = redact(&text);
            assert!(!out.contains(key.as_str()), "{out}");
            assert!(!out.contains("PRIVATE KEY-----\n"), "{out}");
        }
    }
}
