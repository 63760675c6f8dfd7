//! What no dump may carry: a value under a name that says secret, token, password, credential or private key,
//! and anything in any string that looks like key material (`ballast_state::redact`). Applied to every part,
//! whatever its source, so a part that should hold no secret (a boot report, the cloud's view) is covered too.

use serde_json::Value;

pub use ballast_state::redact::REDACTED;

/// Field names whose values are never shown, compared without case, `-` and `_`.
const SECRET_NAMES: [&str; 6] = [
    "secret",
    "token",
    "password",
    "credential",
    "privatekey",
    "keypem",
];

fn is_secret_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_NAMES.iter().any(|s| folded.contains(s))
}

/// Redacts `value` in place: a secret-named field's whole value (whatever its type) becomes `[redacted]`, and
/// every other string goes through `ballast_state::redact::redact`.
pub fn redact_value(value: &mut Value) {
    match value {
        Value::String(text) => {
            if let std::borrow::Cow::Owned(redacted) = ballast_state::redact::redact(text) {
                *text = redacted;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        Value::Object(map) => {
            for (name, child) in map.iter_mut() {
                if is_secret_name(name) && !child.is_null() {
                    *child = Value::String(REDACTED.to_string());
                } else {
                    redact_value(child);
                }
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
                "unparsed": ballast_state::redact::redact(document),
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
