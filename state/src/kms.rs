//! KMS key references as AWS writes them, the one rule wherever a spec or a flag names a KMS key: a key id (a
//! UUID, or `mrk-` and 32 hex digits for a multi-Region key), a key ARN, an alias name (`alias/` then letters,
//! digits, `/`, `_` and `-`) or an alias ARN. Nothing else is passed on to AWS: a value that only looks like a key
//! (`alias/${file(...)}`, a space, a quote) is refused by its field before it reaches a launch template, a policy
//! or a Terraform file.

use std::sync::LazyLock;

use regex::Regex;

/// AWS's bound on an alias name, `alias/` included.
pub const MAX_ALIAS_NAME: usize = 256;

/// A key id: a UUID, or a multi-Region key's `mrk-` id.
const KEY_ID: &str =
    r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|mrk-[0-9a-f]{32})";
/// An alias name.
const ALIAS: &str = r"(alias/[a-zA-Z0-9/_-]+)";
/// The start of a KMS ARN: partition, region, account.
const ARN: &str = r"arn:aws[a-z-]*:kms:[a-z]{2}(-[a-z]+)+-[0-9]+:[0-9]{12}:";

static KMS_KEY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!("^({KEY_ID}|{ALIAS}|{ARN}(key/{KEY_ID}|{ALIAS}))$")).expect("static regex")
});
static KMS_KEY_ARN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("^{ARN}key/{KEY_ID}$")).expect("static regex"));

/// The forms [`is_key`] takes, for an error message.
pub const KEY_FORMS: &str = "a key id (1234abcd-12ab-34cd-56ef-1234567890ab, or mrk- and 32 hex digits), a key ARN \
                             (arn:aws:kms:REGION:ACCOUNT:key/ID), an alias (alias/NAME: letters, digits, `/`, `_`, \
                             `-`) or an alias ARN (arn:aws:kms:REGION:ACCOUNT:alias/NAME)";

/// The form [`is_key_arn`] takes, for an error message.
pub const KEY_ARN_FORM: &str = "a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)";

/// Whether `text` names a KMS key in one of AWS's forms (for an EBS volume: any of them).
pub fn is_key(text: &str) -> bool {
    KMS_KEY.is_match(text) && alias_within_bound(text)
}

/// Whether `text` is a key ARN: what an IAM policy grants on (an alias or a bare id names nothing a policy holds).
pub fn is_key_arn(text: &str) -> bool {
    KMS_KEY_ARN.is_match(text)
}

/// `text` to put in a command an error suggests: the key itself when it is in one of AWS's forms (which hold no
/// character a shell acts on), `KEY` otherwise, so an error never hands the operator a hostile command line.
pub fn for_command(text: &str) -> &str {
    if is_key(text) {
        text
    } else {
        "KEY"
    }
}

fn alias_within_bound(text: &str) -> bool {
    match text.find("alias/") {
        Some(at) => text.len() - at <= MAX_ALIAS_NAME,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "1234abcd-12ab-34cd-56ef-1234567890ab";

    #[test]
    fn aws_forms_are_keys() {
        for key in [
            UUID.to_string(),
            format!("mrk-{}", "0123456789abcdef".repeat(2)),
            format!("arn:aws:kms:us-west-2:123456789012:key/{UUID}"),
            format!("arn:aws-us-gov:kms:us-gov-west-1:123456789012:key/{UUID}"),
            "alias/ballast-state".into(),
            "alias/aws/ebs".into(),
            "alias/team_a/etcd-2".into(),
            "arn:aws:kms:eu-central-1:123456789012:alias/etcd".into(),
            format!("alias/{}", "a".repeat(MAX_ALIAS_NAME - 6)),
        ] {
            assert!(is_key(&key), "{key}");
        }
    }

    #[test]
    fn anything_else_is_not_a_key() {
        for key in [
            "alias/${file(\"/etc/passwd\")}".to_string(),
            "alias/".into(),
            "alias/a b".into(),
            "alias/a\"".into(),
            "alias/a\u{1b}[2J".into(),
            format!("alias/{}", "a".repeat(MAX_ALIAS_NAME - 5)),
            "arn:aws:kms:us-west-2:123456789012:key/${var.key}".into(),
            "arn:aws:kms:us-west-2:123456789012:key/abcd".into(),
            "arn:aws:kms:us-west-2:123456789012:alias/".into(),
            "arn:aws:kms:us-west-2:12345:key/1234abcd-12ab-34cd-56ef-1234567890ab".into(),
            format!("{UUID}x"),
            "mrk-123".into(),
            String::new(),
        ] {
            assert!(!is_key(&key), "{key}");
        }
    }

    #[test]
    fn only_a_key_arn_is_a_key_arn() {
        assert!(is_key_arn(&format!(
            "arn:aws:kms:us-west-2:123456789012:key/{UUID}"
        )));
        for key in [
            UUID.to_string(),
            "alias/ballast-state".into(),
            "arn:aws:kms:us-west-2:123456789012:alias/etcd".into(),
            "arn:aws:kms:us-west-2:123456789012:key/abcd".into(),
            "arn:aws:kms:us-west-2:123456789012:key/${file(\"x\")}".into(),
        ] {
            assert!(!is_key_arn(&key), "{key}");
        }
    }
}
