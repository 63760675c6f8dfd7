//! What no dump may carry: a value under a name that says secret, token, password, key or credential, and
//! anything in any string or map key that looks like a credential (`ballast_state::redact`, where the rules and
//! their sources live; this walks a part's values and applies them). Applied to every part, whatever its
//! source, so a part that should hold no secret (a boot report, the cloud's view) is covered too.

use std::borrow::Cow;

use ballast_state::redact::{is_secret_name, redact};
use serde_json::Value;

pub use ballast_state::redact::REDACTED;

/// Redacts `value` in place: a secret-named field's whole value (whatever its type) becomes `[redacted]`, so
/// does the `value` beside a `name` that is secret-named (an environment variable, `{name: MYSQL_PWD, value:
/// ...}`), every map key goes through `ballast_state::redact::redact` as every string does (a key can be a
/// credential too: a label, an annotation, a map of URLs), and every other string goes through it.
pub fn redact_value(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let Cow::Owned(redacted) = redact(text) {
                *text = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => {
            let named_secret = map
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(is_secret_name);
            let entries = std::mem::take(map);
            for (name, mut child) in entries {
                let secret = is_secret_name(&name) || (named_secret && name == "value");
                if secret && !child.is_null() {
                    child = Value::String(REDACTED.to_string());
                } else {
                    redact_value(&mut child);
                }
                let mut key = redact(&name).into_owned();
                // Two keys redacted alike stay two entries.
                let mut n = 1;
                while map.contains_key(&key) {
                    n += 1;
                    key = format!("{} ({n})", redact(&name));
                }
                map.insert(key, child);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The YAML documents of a stored spec object as values (to be redacted with the rest); a document that does
/// not parse is kept as its redacted text, since the dump is for diagnosing, a damaged spec included.
pub fn yaml_documents(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for document in text.split("\n---") {
        if document.trim().is_empty() || document.trim() == "---" {
            continue;
        }
        match yaml_serde::from_str::<Value>(document) {
            Ok(value) => out.push(value),
            Err(e) => out.push(serde_json::json!({
                "unparsed": redact(document),
                "error": e.to_string(),
            })),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_named_fields_and_key_material_go_and_the_rest_stays() {
        let key = ballast_state::pki::generate_ca("x", "X")
            .expect("ca")
            .key_pem;
        let mut value = serde_json::json!({
            "metadata": {"name": "demo.example.com"},
            "spec": {
                "kmsKeyId": "arn:aws:kms:us-west-2:123456789012:key/abcd",
                "bootstrapToken": "07401b.f395accd246ae52d",
                "nested": [{"client_secret": {"value": 1}}, {"note": format!("oops {key}")}],
                "api": {"password": null},
            }
        });
        redact_value(&mut value);
        let text = value.to_string();
        assert_eq!(value["metadata"]["name"], "demo.example.com");
        assert_eq!(
            value["spec"]["kmsKeyId"],
            "arn:aws:kms:us-west-2:123456789012:key/abcd"
        );
        assert_eq!(value["spec"]["bootstrapToken"], REDACTED);
        assert_eq!(value["spec"]["nested"][0]["client_secret"], REDACTED);
        assert!(!text.contains("PRIVATE KEY-----\\n"), "{text}");
        assert!(text.contains(ballast_state::redact::REDACTED_KEY), "{text}");
        // Null says "not set", which is no secret.
        assert!(value["spec"]["api"]["password"].is_null());
    }

    /// Issue 44's credentials, as a spec or a node would hold them: in values, in map keys, and as the value
    /// of a secret-named environment variable; and what must stay.
    #[test]
    fn credentials_in_values_and_keys_go_and_ordinary_fields_stay() {
        let spec = r#"
metadata:
  name: demo.example.com
  labels:
    "postgres://user:pass@db.internal/app": db
    AKIAIOSFODNN7EXAMPLE: owner
    team: platform
spec:
  kmsKeyId: alias/ballast
  hooks:
    - env:
        - name: MYSQL_PWD
          value: hunter22
        - name: LOG_LEVEL
          value: debug
      headers:
        - "Authorization: Basic dXNlcjpwYXNzd29yZA=="
        - "Authorization: Bearer abcdef0123456789"
      notify: "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
      proxy: "http://user:pass@proxy.corp:3128"
  apiKey: sk-live-4f9a8b7c6d5e
  mounts:
    - device: /dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0
      path: /var/lib/etcd
  image: registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a
"#;
        let mut value = yaml_documents(spec).remove(0);
        redact_value(&mut value);
        let text = value.to_string();
        for secret in [
            "pass@",
            "AKIAIOSFODNN7EXAMPLE",
            "hunter22",
            "dXNlcjpwYXNzd29yZA",
            "abcdef0123456789",
            "xoxb-",
            "sk-live",
        ] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let labels = value["metadata"]["labels"].as_object().expect("labels");
        assert!(
            labels.contains_key("postgres://user:[redacted]@db.internal/app"),
            "{text}"
        );
        assert!(labels.contains_key("[redacted]"), "{text}");
        assert_eq!(labels["team"], "platform");
        assert_eq!(value["spec"]["apiKey"], REDACTED);
        let hook = &value["spec"]["hooks"][0];
        assert_eq!(hook["env"][0]["value"], REDACTED);
        assert_eq!(hook["env"][1]["value"], "debug");
        assert_eq!(hook["headers"][0], "Authorization: Basic [redacted]");
        assert_eq!(hook["proxy"], "http://user:[redacted]@proxy.corp:3128");
        assert_eq!(value["spec"]["kmsKeyId"], "alias/ballast");
        assert_eq!(
            value["spec"]["mounts"][0]["device"],
            "/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"
        );
        assert!(value["spec"]["image"]
            .as_str()
            .is_some_and(|i| i.ends_with("8199917a")));
    }

    #[test]
    fn two_keys_redacted_alike_stay_two_entries() {
        let mut value = serde_json::json!({
            "AKIAIOSFODNN7EXAMPLE": 1,
            "ASIAY34FZKBOKMUTVV7A": 2,
        });
        redact_value(&mut value);
        let map = value.as_object().expect("map");
        assert_eq!(map.len(), 2, "{value}");
        assert!(map.keys().all(|k| k.starts_with(REDACTED)), "{value}");
    }

    #[test]
    fn spec_documents_parse_and_a_damaged_one_is_kept_as_text() {
        let docs = yaml_documents("a: 1\n---\nb: [2\n---\n");
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["a"], 1);
        assert!(docs[1]["unparsed"]
            .as_str()
            .is_some_and(|t| t.contains("b: [2")));
    }
}
