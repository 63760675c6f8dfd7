//! Bounds on what Ballast accepts, in one place: every input has a size, a depth or a count it may not pass,
//! so a mistaken or hostile input is refused at once with a message naming the limit, before any work in
//! proportion to it is done (parsing, generating groups, tagging AWS resources). docs/spec.md lists them.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::LazyLock;

use regex::Regex;

/// A spec file an operator gives (`create -f`, `replace -f`, an edited object): a real cluster's spec is a
/// few KiB, so 1 MiB leaves room for hundreds of instance groups and still parses in milliseconds.
pub const MAX_SPEC_FILE_BYTES: usize = 1024 * 1024;
/// Any YAML text Ballast parses, the completed specs it stored itself included: completion writes every
/// default out, so a stored spec may be several times the size of the file it came from.
pub const MAX_PARSED_BYTES: usize = 16 * MAX_SPEC_FILE_BYTES;
/// Nesting levels of YAML, by indentation or by brackets. The spec's deepest field is 5 levels down; the
/// YAML parser's cost grows with the square of bracket nesting (100,000 brackets took minutes), so deeper
/// texts are refused by a linear scan before the parser sees them.
pub const MAX_NESTING_DEPTH: usize = 64;

/// The largest control-plane count (`--control-plane-count`): etcd needs 1, 3 or 5 members.
pub const MAX_CONTROL_PLANE_COUNT: u32 = 5;
/// The most instances one group may run (`--node-count`, an instance group's `maxSize`).
pub const MAX_GROUP_SIZE: u32 = 1000;

/// Sizes in GiB an etcd member's volume may have: room for etcd's default 2 GiB quota with its WAL and
/// snapshots at the low end, EBS's largest gp2/gp3 volume at the high end.
pub const ETCD_VOLUME_SIZE_GIB: std::ops::RangeInclusive<u32> = 3..=16_384;
/// EBS types an etcd member's volume may have: general purpose SSDs (io1/io2 need an IOPS figure the spec
/// does not carry; HDD types are too slow for etcd's fsyncs).
pub const ETCD_VOLUME_TYPES: [&str; 2] = ["gp3", "gp2"];

/// AWS allows 50 tags on a resource ("Tag restrictions" in the EC2 user guide), the ones Ballast adds
/// included.
pub const AWS_MAX_TAGS_PER_RESOURCE: usize = 50;
/// Tags Ballast puts on an instance besides the cloud labels: `kubernetes.io/cluster/NAME`,
/// `ballast.dev/cluster`, `ballast.dev/role`, `ballast.dev/instance-group`, `ballast.dev/node-spec-hash` and
/// `Name`. No resource gets more of them than an instance does.
pub const BALLAST_TAGS_PER_RESOURCE: usize = 6;
/// Cloud labels one resource may carry: the cluster's and its group's together.
pub const MAX_CLOUD_LABELS: usize = AWS_MAX_TAGS_PER_RESOURCE - BALLAST_TAGS_PER_RESOURCE;
/// AWS counts tag lengths in Unicode characters.
pub const MAX_TAG_KEY_CHARS: usize = 128;
pub const MAX_TAG_VALUE_CHARS: usize = 256;
/// Key prefixes AWS keeps for itself (any letter case) or Ballast sets on its own resources.
const RESERVED_TAG_PREFIXES: [&str; 3] = ["aws:", "kubernetes.io/cluster/", "ballast.dev/"];

/// The characters AWS accepts in every service's tags: letters, numbers, spaces and `_ . : / = + - @`.
static TAG_TEXT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$").expect("static regex"));

/// What is wrong with one tag (a cloud label), in words for the operator; empty when nothing is.
pub fn tag_problems(key: &str, value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let key_chars = key.chars().count();
    if key_chars == 0 || key_chars > MAX_TAG_KEY_CHARS {
        problems.push(format!(
            "tag keys must be 1 to {MAX_TAG_KEY_CHARS} characters, found {key_chars}"
        ));
    }
    if !TAG_TEXT.is_match(key) {
        problems.push(
            "the key may hold only letters, numbers, spaces and _ . : / = + - @ (AWS's tag characters)".into(),
        );
    }
    let lower = key.to_lowercase();
    if RESERVED_TAG_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        problems
            .push("is reserved for AWS or Ballast's own ownership tags: choose another key".into());
    }
    let value_chars = value.chars().count();
    if value_chars > MAX_TAG_VALUE_CHARS {
        problems.push(format!(
            "tag values must be at most {MAX_TAG_VALUE_CHARS} characters, found {value_chars}"
        ));
    }
    if !TAG_TEXT.is_match(value) {
        problems.push(
            "the value may hold only letters, numbers, spaces and _ . : / = + - @ (AWS's tag characters)"
                .into(),
        );
    }
    problems
}

/// At most this many labels of one map are reported wrong, so 2,000 bad labels make a readable message.
const MAX_LABEL_ERRORS: usize = 10;

/// Problems with the cloud labels at `path` (`spec.cloudLabels`), as (field path, message): too many of them,
/// and what is wrong with each label.
pub fn cloud_label_problems(
    path: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if labels.len() > MAX_CLOUD_LABELS {
        problems.push((path.to_string(), too_many_labels(labels.len())));
    }
    let mut wrong_labels = 0;
    for (key, value) in labels {
        let label_problems = tag_problems(key, value);
        if label_problems.is_empty() {
            continue;
        }
        wrong_labels += 1;
        if wrong_labels > MAX_LABEL_ERRORS {
            continue;
        }
        let field = path_key(path, key);
        problems.extend(label_problems.into_iter().map(|p| (field.clone(), p)));
    }
    if wrong_labels > MAX_LABEL_ERRORS {
        problems.push((
            path.to_string(),
            format!(
                "{} more labels are wrong in the same ways (the first {MAX_LABEL_ERRORS} are shown)",
                wrong_labels - MAX_LABEL_ERRORS
            ),
        ));
    }
    problems
}

/// A group's instances carry the cluster's labels and the group's together (the group's win on the same key):
/// a problem when each map is within the limit but both together are not.
pub fn merged_cloud_labels_problem(
    cluster: &BTreeMap<String, String>,
    group: &BTreeMap<String, String>,
) -> Option<String> {
    if cluster.len() > MAX_CLOUD_LABELS || group.len() > MAX_CLOUD_LABELS {
        return None; // Each is reported on its own.
    }
    let merged = cluster
        .keys()
        .chain(group.keys())
        .collect::<std::collections::BTreeSet<_>>();
    (merged.len() > MAX_CLOUD_LABELS).then(|| {
        format!(
            "together with the cluster's spec.cloudLabels makes {}",
            too_many_labels(merged.len())
        )
    })
}

fn too_many_labels(count: usize) -> String {
    format!(
        "{count} labels, more than {MAX_CLOUD_LABELS}: AWS allows {AWS_MAX_TAGS_PER_RESOURCE} tags on a \
         resource and Ballast adds up to {BALLAST_TAGS_PER_RESOURCE} of its own"
    )
}

/// Keys longer than this are cut short where a path shows them.
const MAX_KEY_SHOWN_CHARS: usize = 64;

/// The path of `key` in the mapping at `map_path`: `spec.cloudLabels.team`, or `spec.cloudLabels["a\nb"]`
/// when the key would not read as one path segment (spaces, control characters, quotes, brackets; empty).
/// Long keys are cut short, so a hostile key cannot make every error a page long.
pub fn path_key(map_path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().count() <= MAX_KEY_SHOWN_CHARS
        && !key
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "\"'[]".contains(c));
    let segment = if plain {
        key.to_string()
    } else {
        let mut shown: String = key.chars().take(MAX_KEY_SHOWN_CHARS).collect();
        if shown.len() < key.len() {
            shown.push_str("...");
        }
        format!("[{shown:?}]")
    };
    match (map_path.is_empty(), plain) {
        (true, _) | (false, false) => format!("{map_path}{segment}"),
        (false, true) => format!("{map_path}.{segment}"),
    }
}

/// Why a text is refused before it is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextLimitError {
    TooLarge { bytes: usize, limit: usize },
    TooDeep { line: usize, limit: usize },
}

impl std::fmt::Display for TextLimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // `bytes` may be only what was read before giving up, so the message says "larger", not how much.
            TextLimitError::TooLarge { limit, .. } => write!(
                f,
                "is larger than the limit of {limit} bytes: a cluster's spec is a few KiB"
            ),
            TextLimitError::TooDeep { line, limit } => write!(
                f,
                "nests deeper than {limit} levels at line {line}: a spec needs a handful, so this is not one"
            ),
        }
    }
}

/// Refuses a text longer than `limit` bytes or nested deeper than [`MAX_NESTING_DEPTH`], in one pass.
///
/// The depth is over-estimated, never under: every `[` or `{` counts, even in a quoted string or a comment,
/// and block levels are counted from indentation and leading `- ` (or `? `) markers. Reading quotes and
/// comments as YAML does would take a YAML scanner, whose mistakes here would let a deep text through; a
/// real spec is nowhere near the limit either way.
pub fn check_text(text: &str, limit: usize) -> Result<(), TextLimitError> {
    if text.len() > limit {
        return Err(TextLimitError::TooLarge {
            bytes: text.len(),
            limit,
        });
    }
    let mut brackets: usize = 0;
    // Columns where enclosing block collections start, innermost last.
    let mut indents: Vec<usize> = Vec::new();
    // YAML breaks lines at `\r` as well as `\n`; lines are numbered by `\n` as editors do.
    let lines = text
        .split('\n')
        .enumerate()
        .flat_map(|(index, line)| line.split('\r').map(move |part| (index, part)));
    for (index, line) in lines {
        let too_deep = || TextLimitError::TooDeep {
            line: index + 1,
            limit: MAX_NESTING_DEPTH,
        };
        let content = line.trim_start_matches([' ', '\t']);
        if !content.is_empty() && !content.starts_with('#') {
            let mut column = line.len() - content.len();
            while indents.last().is_some_and(|&top| top >= column) {
                indents.pop();
            }
            indents.push(column);
            // `- - - x` opens a collection per marker on one line.
            let mut rest = content;
            while let Some(after) = rest
                .strip_prefix("- ")
                .or_else(|| rest.strip_prefix("? "))
                .or_else(|| rest.strip_prefix("-\t"))
            {
                let trimmed = after.trim_start_matches([' ', '\t']);
                column += rest.len() - trimmed.len();
                indents.push(column);
                rest = trimmed;
                if indents.len() > MAX_NESTING_DEPTH {
                    return Err(too_deep());
                }
            }
            if indents.len() > MAX_NESTING_DEPTH {
                return Err(too_deep());
            }
        }
        for byte in line.bytes() {
            match byte {
                b'[' | b'{' => {
                    brackets += 1;
                    if brackets > MAX_NESTING_DEPTH {
                        return Err(too_deep());
                    }
                }
                b']' | b'}' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Reads at most `limit + 1` bytes, so a huge file (or an endless stream such as /dev/zero) costs no more
/// than the limit before [`check_text`] refuses it. Fails, as `read_to_string` does, on text that is not UTF-8.
pub fn read_bounded(reader: impl Read, limit: usize) -> std::io::Result<String> {
    let mut text = String::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_string(&mut text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_spec_is_well_within_the_depth_limit() {
        let spec = "apiVersion: v\nkind: Cluster\nspec:\n  subnets:\n  - name: a\n    cidr: 10.0.0.0/24\n  \
                    etcd:\n    members:\n    - {instanceGroup: a}\n  cloudLabels: {a: \"[x\"}\n";
        assert_eq!(check_text(spec, MAX_SPEC_FILE_BYTES), Ok(()));
    }

    #[test]
    fn deep_brackets_indentation_and_dashes_are_refused() {
        let brackets = format!("a: {}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(
            check_text(&brackets, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 1, .. })
        ));
        let mut indented = String::new();
        for level in 0..70 {
            indented.push_str(&format!("{}a:\n", " ".repeat(level)));
        }
        assert!(matches!(
            check_text(&indented, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 65, .. })
        ));
        let dashes = format!("a:\n{}x\n", "- ".repeat(70));
        assert!(matches!(
            check_text(&dashes, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 2, .. })
        ));
        // Sixty-four levels are allowed.
        let at_limit = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(check_text(&at_limit, MAX_SPEC_FILE_BYTES), Ok(()));
    }

    #[test]
    fn size_is_checked_first() {
        assert_eq!(
            check_text("abcd", 3),
            Err(TextLimitError::TooLarge { bytes: 4, limit: 3 })
        );
    }

    #[test]
    fn bounded_reads_stop_after_the_limit() {
        let endless = std::io::repeat(b'a');
        assert_eq!(read_bounded(endless, 10).expect("reads").len(), 11);
    }

    #[test]
    fn tags_follow_aws_rules() {
        assert!(tag_problems("team", "platform").is_empty());
        assert!(tag_problems("cost center", "a+b=c@d:e/f_g.h-i").is_empty());
        assert!(tag_problems("équipe", "données").is_empty());
        assert!(!tag_problems("a\nb", "").is_empty());
        assert!(!tag_problems("a", "x\ny").is_empty());
        assert!(!tag_problems("AWS:thing", "").is_empty());
        assert!(!tag_problems("", "").is_empty());
        assert!(!tag_problems(&"k".repeat(129), "").is_empty());
        assert!(tag_problems(&"é".repeat(128), &"é".repeat(256)).is_empty());
        assert!(!tag_problems("k", &"v".repeat(257)).is_empty());
    }

    #[test]
    fn path_keys_quote_keys_that_are_not_plain() {
        assert_eq!(
            path_key("spec.cloudLabels", "team"),
            "spec.cloudLabels.team"
        );
        assert_eq!(path_key("", "spec"), "spec");
        assert_eq!(
            path_key("spec.cloudLabels", "a\nb"),
            "spec.cloudLabels[\"a\\nb\"]"
        );
        assert_eq!(
            path_key("m", &"k".repeat(100)),
            format!("m[\"{}...\"]", "k".repeat(64))
        );
    }
}
