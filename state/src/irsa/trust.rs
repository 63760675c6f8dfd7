//! The trust policy of a service account's role and the policy documents put on it, as JSON values (pure; the
//! goldens in `ctl/tests/data/irsa/` hold them rendered).

use serde_json::{json, Value};

use super::AWS_AUDIENCE;

/// The issuer without its scheme: what IAM names the provider by and prefixes its condition keys with
/// (`oidc-demo.s3.eu-west-1.amazonaws.com/clusters/demo:sub`).
pub fn issuer_host_path(issuer: &str) -> &str {
    issuer
        .strip_prefix("https://")
        .or_else(|| issuer.strip_prefix("http://"))
        .unwrap_or(issuer)
}

/// The ARN IAM gives the OIDC provider of `issuer` in an account.
pub fn provider_arn(partition: &str, account: &str, issuer: &str) -> String {
    format!(
        "arn:{partition}:iam::{account}:oidc-provider/{}",
        issuer_host_path(issuer)
    )
}

/// The `sub` claim of a service account's tokens.
pub fn subject(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// A role only `namespace/name`'s tokens from this cluster's issuer can assume: `sts:AssumeRoleWithWebIdentity`
/// only, federated to the cluster's provider only, with `sub` and `aud` both matched exactly (`StringEquals`,
/// never `StringLike`), so another service account's token, or one minted for another audience, is refused.
pub fn service_account_trust_policy(
    provider_arn: &str,
    issuer: &str,
    namespace: &str,
    name: &str,
) -> Value {
    let host_path = issuer_host_path(issuer);
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {
                    format!("{host_path}:sub"): subject(namespace, name),
                    format!("{host_path}:aud"): AWS_AUDIENCE,
                }
            }
        }]
    })
}

/// Why an inline policy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InlinePolicyError {
    #[error("is not JSON ({0}): write the policy's statements as a JSON array")]
    NotJson(String),
    #[error("must be a JSON array of statements (or one statement object), not {0}")]
    NotStatements(&'static str),
    #[error("holds no statement")]
    Empty,
    #[error("statement {index}: {problem}")]
    Statement { index: usize, problem: &'static str },
}

/// The policy document of an inline policy as written in the spec (kops's shape: a JSON array of statements;
/// one statement object is accepted too), checked for the shape IAM needs of each statement.
pub fn inline_policy_document(statements: &str) -> Result<Value, InlinePolicyError> {
    let value: Value =
        serde_json::from_str(statements).map_err(|e| InlinePolicyError::NotJson(e.to_string()))?;
    let statements = match value {
        Value::Array(items) => items,
        object @ Value::Object(_) => vec![object],
        Value::String(_) => return Err(InlinePolicyError::NotStatements("a string")),
        Value::Number(_) => return Err(InlinePolicyError::NotStatements("a number")),
        Value::Bool(_) => return Err(InlinePolicyError::NotStatements("a boolean")),
        Value::Null => return Err(InlinePolicyError::NotStatements("null")),
    };
    if statements.is_empty() {
        return Err(InlinePolicyError::Empty);
    }
    for (index, statement) in statements.iter().enumerate() {
        let problem = |problem| InlinePolicyError::Statement { index, problem };
        let Some(fields) = statement.as_object() else {
            return Err(problem("is not an object"));
        };
        match fields.get("Effect").and_then(Value::as_str) {
            Some("Allow" | "Deny") => {}
            _ => return Err(problem("needs \"Effect\": \"Allow\" or \"Deny\"")),
        }
        if !fields.contains_key("Action") && !fields.contains_key("NotAction") {
            return Err(problem("needs \"Action\" (or \"NotAction\")"));
        }
        if !fields.contains_key("Resource") && !fields.contains_key("NotResource") {
            return Err(problem("needs \"Resource\" (or \"NotResource\")"));
        }
        if fields.contains_key("Principal") || fields.contains_key("NotPrincipal") {
            return Err(problem(
                "has a \"Principal\": an identity policy names none (who may assume the role is the trust policy's)",
            ));
        }
    }
    Ok(json!({"Version": "2012-10-17", "Statement": statements}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trust_policy_matches_one_subject_and_the_audience_exactly() {
        let issuer = "https://oidc.s3.eu-west-1.amazonaws.com/demo";
        let arn = provider_arn("aws", "123456789012", issuer);
        assert_eq!(
            arn,
            "arn:aws:iam::123456789012:oidc-provider/oidc.s3.eu-west-1.amazonaws.com/demo"
        );
        let policy = service_account_trust_policy(&arn, issuer, "team-a", "app");
        let statement = &policy["Statement"][0];
        assert_eq!(statement["Action"], "sts:AssumeRoleWithWebIdentity");
        assert_eq!(statement["Principal"]["Federated"], arn.as_str());
        let equals = &statement["Condition"]["StringEquals"];
        assert_eq!(
            equals["oidc.s3.eu-west-1.amazonaws.com/demo:sub"],
            "system:serviceaccount:team-a:app"
        );
        assert_eq!(
            equals["oidc.s3.eu-west-1.amazonaws.com/demo:aud"],
            AWS_AUDIENCE
        );
        assert_eq!(statement["Condition"].as_object().map(|c| c.len()), Some(1));
    }

    #[test]
    fn inline_policies_must_be_statements() {
        let good =
            r#"[{"Effect":"Allow","Action":["s3:GetObject"],"Resource":"arn:aws:s3:::b/*"}]"#;
        let document = inline_policy_document(good).expect("valid");
        assert_eq!(document["Statement"][0]["Action"][0], "s3:GetObject");
        let one = r#"{"Effect":"Deny","NotAction":"s3:*","NotResource":"*"}"#;
        assert!(inline_policy_document(one).is_ok());
        for (bad, expected) in [
            ("{", "is not JSON"),
            ("\"s3:*\"", "not a string"),
            ("[]", "holds no statement"),
            (
                r#"[{"Action":"s3:*","Resource":"*"}]"#,
                "statement 0: needs \"Effect\"",
            ),
            (r#"[{"Effect":"Allow","Resource":"*"}]"#, "needs \"Action\""),
            (
                r#"[{"Effect":"Allow","Action":"s3:*"}]"#,
                "needs \"Resource\"",
            ),
            (
                r#"[{"Effect":"Allow","Action":"s3:*","Resource":"*","Principal":"*"}]"#,
                "has a \"Principal\"",
            ),
        ] {
            let error = inline_policy_document(bad).expect_err(bad).to_string();
            assert!(error.contains(expected), "{bad}: {error}");
        }
    }
}
