//! Defence in depth against a secret in what Ballast publishes for diagnosis (a node's log tail, `ballast
//! toolbox dump`): nothing should log key material in the first place, but anything that looks like a PEM
//! private key, a credential or a token is replaced before it leaves the process. Pure text in, text out; the
//! one place redaction rules live (`ctl/src/toolbox/redact.rs` walks a dump's values and applies these).
//!
//! The patterns are taken from maintained secret scanners, written here as Rust:
//! - gitleaks v8.30.0 (github.com/gitleaks/gitleaks, `config/gitleaks.toml` at b58d3f10), by rule id:
//!   `private-key`, `aws-access-token`, `slack-bot-token`, `slack-legacy-bot-token`, `slack-user-token`,
//!   `slack-legacy-token`, `slack-legacy-workspace-token`, `slack-app-token`, `slack-webhook-url`,
//!   `github-pat`, `github-oauth`, `github-app-token`, `github-refresh-token`, `github-fine-grained-pat`,
//!   `gitlab-pat`, `stripe-access-token`, `npm-access-token`, `jwt`, `sendgrid-api-token`,
//!   `vault-service-token`, `anthropic-api-key`, `openai-api-key` (its `sk-proj-`/`sk-svcacct-`/`sk-admin-`
//!   prefixes), `curl-auth-header` (the `Authorization: Basic|Bearer|Token` shapes), and `generic-api-key`'s
//!   keywords (access, auth, api, credential, creds, key, passwd, password, secret, token) for names whose
//!   value goes. gitleaks' `aws-access-token` allowlists ids ending in `EXAMPLE`; a dump does not: redacting
//!   AWS's documentation example costs nothing.
//! - detect-secrets (github.com/Yelp/detect-secrets): `plugins/keyword.py`'s DENYLIST (`api_key`, `auth_key`,
//!   `client_key`, `db_pass`, `pwd`, `passwd`, `private_key`, ...) for names, and `plugins/basic_auth.py`
//!   (`://user:password@`) for credentials in URLs, here also without a scheme (`user:password@host`).
//!
//! Neither scanner's entropy thresholds are used: a dump redacts on a name or a shape alone, since a false
//! positive costs a diagnosis one value and a false negative leaks a credential. What must stay readable (ids,
//! digests, ARNs, paths, device names, UUIDs, image references pinned by digest) is held by the tests below.

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::{Captures, Regex};

/// What a redacted private key becomes.
pub const REDACTED_KEY: &str = "[redacted: private key]";
/// What a redacted token or secret value becomes.
pub const REDACTED: &str = "[redacted]";

/// Words that make a name secret (its value goes), as regex alternatives matched without case: gitleaks'
/// `generic-api-key` keywords and detect-secrets' DENYLIST, narrowed where a bare word would name ordinary
/// things (`key` alone names `kmsKeyId` and object keys; `pwd` alone is the shell's working directory).
const SECRET_WORDS: &str = r"token|secret|password|passwd|passphrase|[a-z0-9][_.-]pwd|[a-z0-9][_.-]pass\b|private[_.-]?key|priv[_.-]?key|api[_.-]?key|access[_.-]?key|auth[_.-]?key|client[_.-]?key|account[_.-]?key|service[_.-]?key|app[_.-]?key|db[_.-]?key|key[_.-]?pass|credential|creds|cookie|key[_.-]?pem";

fn pem_private_key() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // A whole block, or an unterminated one (a line cut at the tail's line limit) to the end of the text.
    RE.get_or_init(|| {
        Regex::new(
            r"(?s)-----BEGIN [A-Z0-9 _-]*PRIVATE KEY(?: BLOCK)?-----.*?(-----END [A-Z0-9 _-]*PRIVATE KEY(?: BLOCK)?-----|\z)",
        )
        .expect("the PEM private key pattern compiles")
    })
}

/// Tokens whose shape alone says what they are (gitleaks' vendor rules, named in the module's doc).
fn token_shapes() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let shapes = [
            // aws-access-token
            r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}\b",
            // slack-bot-token, slack-legacy-bot-token, slack-user-token, slack-legacy-token,
            // slack-legacy-workspace-token, slack-app-token
            r"xoxb-[0-9]{10,13}-[0-9]{10,13}[a-zA-Z0-9-]*",
            r"xoxb-[0-9]{8,14}-[a-zA-Z0-9]{18,26}",
            r"xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,34}",
            r"xox[os]-[0-9]+-[0-9]+-[0-9]+-[a-fA-F[0-9]]+",
            r"xox[ar]-(?:[0-9]-)?[0-9a-zA-Z]{8,48}",
            r"(?i:xapp-[0-9]-[A-Z0-9]+-[0-9]+-[a-z0-9]+)",
            // slack-webhook-url
            r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}",
            // github-pat, github-oauth, github-app-token, github-refresh-token, github-fine-grained-pat
            r"\b(?:ghp|gho|ghu|ghs|ghr)_[0-9a-zA-Z]{36}",
            r"\bgithub_pat_[A-Za-z0-9_]{82}",
            // gitlab-pat
            r"\bglpat-[A-Za-z0-9_-]{20}",
            // stripe-access-token
            r"\b(?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,99}",
            // npm-access-token
            r"(?i:\bnpm_[a-z0-9]{36})",
            // jwt
            r"\bey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9/\\_-]{17,}\.(?:[a-zA-Z0-9/\\_-]{10,}={0,2})?",
            // sendgrid-api-token
            r"\bSG\.[a-zA-Z0-9=_.-]{66}",
            // vault-service-token
            r"\bhvs\.[A-Za-z0-9_-]{90,120}",
            // anthropic-api-key, openai-api-key (project, service account and admin keys)
            r"\bsk-ant-(?:api03|admin01)-[a-zA-Z0-9_-]{93}AA",
            r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}",
            // A Kubernetes bootstrap token (`[a-z0-9]{6}.[a-z0-9]{16}`, the format kubeadm and Ballast write).
            r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b",
        ];
        // ASCII classes: Unicode's `\w` repeated 82 or 120 times would compile past the regex crate's size limit.
        Regex::new(&format!("(?-u:{})", shapes.join("|"))).expect("the token shapes compile")
    })
}

/// `Authorization: Basic ...`, `Bearer ...`, `Token ...` (gitleaks' `curl-auth-header`, outside curl too):
/// the header's name and scheme stay, the credential goes.
fn authorization() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(
            r#"(?i)((?:\b(?:proxy-)?authorization["']?\s*[:=]\s*["']?(?:(?:basic|bearer|token|digest|negotiate)\s+)?)|\bbearer\s+)([A-Za-z0-9+/=._~-]{4,})"#,
        )
        .expect("the authorization pattern compiles")
    })
}

/// Credentials before an `@`: `scheme://user:password@host` (detect-secrets' basic-auth rule) and
/// `user:password@host` without a scheme. The user and host stay, the password goes.
fn userinfo() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#"(^|[\s"'=,;(\[{<]|://)([\w.%+~-]+):([^\s@/"'<>]+)@([\w.-]*)(:?)"#)
            .expect("the userinfo pattern compiles")
    })
}

fn named_secret() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // `token=...`, `"secret": "..."`, `mysql_pwd=...`, `apiKey: ...`: the name is kept, the value goes. The
    // value is what follows the separator up to a quote, space, comma, semicolon or closing bracket.
    RE.get_or_init(|| {
        Regex::new(&format!(
            r#"(?i)([a-z0-9_.-]*(?:{SECRET_WORDS})s?)(["']?\s*(?:[:=]|=>|\s)\s*["']?)([^"'\s,;}}\]]{{4,}})"#
        ))
        .expect("the named secret pattern compiles")
    })
}

fn secret_name() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(&format!(r"(?i)(?:{SECRET_WORDS})")).expect("the secret name pattern compiles")
    })
}

/// Names that contain a secret word but name no secret: what a secret is called or where it lives (gitleaks'
/// `generic-api-key` allowlist: `secret[_.-]?name`, `(key|token)[_.-]?file`, `credentials?[_.-]?id`, ...), and
/// IMDS's `httpTokens` setting. Compared folded (lower case, no `-`, `_`, `.`).
fn names_no_secret(folded: &str) -> bool {
    const SUFFIXES: [&str; 7] = ["name", "file", "path", "id", "ref", "arn", "ttl"];
    folded == "httptokens" || SUFFIXES.iter().any(|s| folded.ends_with(s))
}

/// Whether a field named `name` holds a secret, whatever its value looks like: the same words as in text
/// (`token`, `secret`, `password`, `apiKey`, `mysql_pwd`, `authorization`, ...), except names of where or what a
/// secret is (`secretName`, `tokenFile`, `credentialsId`).
pub fn is_secret_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | '.'))
        .flat_map(char::to_lowercase)
        .collect();
    // The words with their separators, on the name as written; the exceptions on the folded name.
    (secret_name().is_match(name)
        || secret_name().is_match(&folded)
        || folded.contains("authorization"))
        && !names_no_secret(&folded)
}

fn long_opaque() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"[A-Za-z0-9+/_-]{32,}={0,2}").expect("the opaque pattern compiles")
    })
}

/// A piece of a path or name between separators that reads as a word: `dev`, `Amazon`, `EBS`, `2026`,
/// `vol0123456789abcdef0` (a word and a hex id), `10gb`, or lower-case hex. A random run's longest piece reads
/// as one with odds far below 1e-6 once it is 8 characters or more.
fn word_like(piece: &str) -> bool {
    let lower = |s: &str| s.chars().all(|c| c.is_ascii_lowercase());
    let upper = |s: &str| s.chars().all(|c| c.is_ascii_uppercase());
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    let hex = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    };
    let head = piece.trim_end_matches(|c: char| c.is_ascii_digit() || ('a'..='f').contains(&c));
    let capitalised =
        piece.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && lower(&piece[1..]);
    lower(piece)
        || upper(piece)
        || digits(piece)
        || hex(piece)
        || capitalised
        || lower(head)
        || lower(piece.trim_start_matches(|c: char| c.is_ascii_digit()))
}

/// A run that looks like key material or a token: 32 or more base64 characters mixing at least two of upper
/// case, lower case and digits (random key material of that length misses two of them with odds below 1e-9),
/// and not a hex digest (a sha256 of a spec, an ETag: lower-case hex stays), nor a path, a device or a name made
/// of words (`/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0abc`, a UUID), whose every piece between
/// `/`, `-`, `_` and `+` reads as a word.
fn looks_opaque(run: &str) -> bool {
    let body = run.trim_end_matches('=');
    if body
        .chars()
        .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return false;
    }
    let separated = body.contains(['/', '-', '_', '+']);
    if separated && body.split(['/', '-', '_', '+']).all(word_like) {
        return false;
    }
    let upper = body.chars().any(|c| c.is_ascii_uppercase());
    let lower = body.chars().any(|c| c.is_ascii_lowercase());
    let digit = body.chars().any(|c| c.is_ascii_digit());
    [upper, lower, digit].iter().filter(|b| **b).count() >= 2
}

fn already_redacted(value: &str) -> bool {
    value.starts_with("[redacted")
}

/// `text` with every PEM private key block, every token of a known shape, every credential in an
/// `Authorization` header or before an `@`, every value named like a token, secret, password, key or
/// credential, and every long opaque base64 run replaced.
pub fn redact(text: &str) -> Cow<'_, str> {
    let keys = pem_private_key().replace_all(text, REDACTED_KEY);
    let shapes = token_shapes().replace_all(&keys, REDACTED);
    let headers = authorization().replace_all(&shapes, |c: &Captures| {
        if already_redacted(&c[2]) {
            c[0].to_string()
        } else {
            format!("{}{REDACTED}", &c[1])
        }
    });
    let users = userinfo().replace_all(&headers, |c: &Captures| {
        let digest = matches!(&c[4], "sha256" | "sha384" | "sha512") && !c[5].is_empty();
        if digest || already_redacted(&c[3]) {
            c[0].to_string()
        } else {
            format!("{}{}:{REDACTED}@{}{}", &c[1], &c[2], &c[4], &c[5])
        }
    });
    let named = named_secret().replace_all(&users, |c: &Captures| {
        // `httpTokens: required`, `secretName: x`: the name says where or what, not a secret.
        if already_redacted(&c[3]) || !is_secret_name(&c[1]) {
            c[0].to_string()
        } else {
            format!("{}{}{REDACTED}", &c[1], &c[2])
        }
    });
    let opaque = long_opaque()
        .replace_all(&named, |c: &Captures| {
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
#[path = "redact_tests.rs"]
mod tests;
