//! The spec parser under hostile and careless input: whatever the text, parsing (and validating what parses)
//! never panics and returns quickly, and the limits of `ballast_state::limits` hold with messages naming them.

use std::time::{Duration, Instant};

use ballast_state::defaults::complete;
use ballast_state::document::{config_from_objects, parse_objects, parse_spec_file};
use ballast_state::limits::{MAX_CLOUD_LABELS, MAX_NESTING_DEPTH, MAX_SPEC_FILE_BYTES};
use ballast_state::validate::validate;
use proptest::prelude::*;

/// Generous for a debug build on a busy machine; the unbounded parser took 74 s on the deep texts below.
const TIME_LIMIT: Duration = Duration::from_secs(5);

const GOOD_SPEC: &str = include_str!("data/good/ha-public.yaml");

/// Parses, and validates what parses, as `create -f` does; returns every message.
fn check(text: &str) -> Vec<String> {
    let objects = match parse_spec_file("spec.yaml", text) {
        Ok(objects) => objects,
        Err(e) => return e.errors.iter().map(ToString::to_string).collect(),
    };
    match config_from_objects("spec.yaml", objects) {
        Ok(config) => validate(&complete(&config))
            .iter()
            .map(ToString::to_string)
            .collect(),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    }
}

fn timed_check(text: &str) -> (Vec<String>, Duration) {
    let start = Instant::now();
    let messages = check(text);
    (messages, start.elapsed())
}

/// Pieces of YAML and of specs, so generated texts reach past the YAML syntax into the spec's types.
const FRAGMENTS: &[&str] = &[
    "apiVersion: ballast.dev/v1alpha1\n",
    "kind: Cluster\n",
    "kind: InstanceGroup\n",
    "metadata: {name: demo.example.com}\n",
    "metadata:\n  name: nodes\n",
    "spec:\n",
    "  role: Node\n",
    "  minSize: ",
    "  cloudLabels: ",
    "  subnets:\n",
    "  - {name: a, zone: us-west-2a}\n",
    "---\n",
    "- ",
    "  ",
    "[",
    "]",
    "{",
    "}",
    ": ",
    ", ",
    "!tag ",
    "!!str ",
    "&anchor ",
    "*anchor",
    "<<: *anchor\n",
    "? ",
    "|\n",
    ">-\n",
    "\"quoted\\n\"",
    "'single'",
    "# comment\n",
    "\u{feff}",
    "\t",
    "\r\n",
    "4294967296",
    "-1",
    "1.5e300",
    "~",
    "\n",
];

fn fragment_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(FRAGMENTS), 0..60).prop_map(|parts| parts.concat())
}

/// A good spec with bytes replaced, inserted and removed; only edits that keep it UTF-8 are kept.
fn mutated_spec() -> impl Strategy<Value = String> {
    prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..12).prop_map(
        |edits| {
            let mut bytes = GOOD_SPEC.as_bytes().to_vec();
            for (at, op, byte) in edits {
                let i = at.index(bytes.len().max(1));
                match op {
                    0 if i < bytes.len() => bytes[i] = byte,
                    1 => bytes.insert(i.min(bytes.len()), byte),
                    _ if i < bytes.len() => {
                        bytes.remove(i);
                    }
                    _ => {}
                }
            }
            String::from_utf8_lossy(&bytes).into_owned()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,400}") {
        let (_, took) = timed_check(&text);
        prop_assert!(took < TIME_LIMIT, "took {took:?}");
    }

    #[test]
    fn yaml_made_of_spec_fragments_never_panics(text in fragment_text()) {
        let (_, took) = timed_check(&text);
        prop_assert!(took < TIME_LIMIT, "took {took:?}");
    }

    #[test]
    fn a_mutated_good_spec_never_panics(text in mutated_spec()) {
        let (_, took) = timed_check(&text);
        prop_assert!(took < TIME_LIMIT, "took {took:?}");
    }

    #[test]
    fn deep_nesting_is_refused_at_once(depth in (MAX_NESTING_DEPTH + 1)..200_000, style in 0u8..3) {
        let text = nested(depth, style);
        let (messages, took) = timed_check(&text);
        prop_assert!(took < TIME_LIMIT, "took {took:?}");
        prop_assert_eq!(messages.len(), 1);
        prop_assert!(messages[0].starts_with("spec.yaml: nests deeper than 64 levels"), "{}", messages[0]);
    }
}

/// A Cluster whose spec holds a value nested `depth` deep, by brackets, indentation or `- ` markers.
fn nested(depth: usize, style: u8) -> String {
    let head =
        "apiVersion: ballast.dev/v1alpha1\nkind: Cluster\nmetadata: {name: a.example.com}\nspec:\n";
    match style {
        0 => format!("{head}  x: {}{}\n", "[".repeat(depth), "]".repeat(depth)),
        1 => {
            let mut text = head.to_string();
            // Indentation grows with the square of the depth: stay under the size limit.
            for level in 0..depth.min(1_000) {
                text.push_str(&" ".repeat(level + 2));
                text.push_str("a:\n");
            }
            text
        }
        _ => format!("{head}  x:\n  {}1\n", "- ".repeat(depth)),
    }
}

#[test]
fn a_200_kb_deeply_nested_file_is_refused_by_the_pre_scan() {
    // Took 74 s of CPU before the nesting limit.
    let text = nested(100_000, 0);
    assert!(text.len() > 200_000);
    // The exact message is the pre-scan's: the parser never ran. The time limit only guards against a hang.
    let (messages, took) = timed_check(&text);
    assert!(took < TIME_LIMIT, "took {took:?}");
    assert_eq!(
        messages,
        ["spec.yaml: nests deeper than 64 levels at line 5: a spec needs a handful, so this is not one"]
    );
}

#[test]
fn a_file_over_the_size_limit_is_refused_naming_the_limit() {
    let mut text = GOOD_SPEC.to_string();
    while text.len() <= MAX_SPEC_FILE_BYTES {
        text.push_str(
            "# padding padding padding padding padding padding padding padding padding\n",
        );
    }
    let messages = check(&text);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].starts_with("spec.yaml: is larger than the limit of 1048576 bytes"),
        "{}",
        messages[0]
    );
    // A spec the store holds may be larger (completion writes every default out), up to its own limit.
    assert!(parse_objects("stored", &text).is_ok());
}

#[test]
fn a_leading_byte_order_mark_is_not_part_of_the_spec() {
    let text = format!("\u{feff}{GOOD_SPEC}");
    assert_eq!(check(&text), Vec::<String>::new());
}

#[test]
fn a_missing_kind_names_the_document() {
    let text = format!(
        "{GOOD_SPEC}---\napiVersion: ballast.dev/v1alpha1\nmetadata: {{name: extra}}\nspec: {{role: Node}}\n"
    );
    assert_eq!(
        check(&text),
        ["document 6 (name \"extra\"): kind: is missing: set it to Cluster or InstanceGroup"]
    );
}

#[test]
fn serde_internals_never_reach_the_operator() {
    let text = GOOD_SPEC.replace("role: Node", "role: 5");
    let text = text.replace("kubernetesVersion: 1.33.4", "kubernetesVersion: !v 1.33.4");
    let messages = check(&text);
    assert_eq!(
        messages,
        [
            "Cluster/demo.example.com: spec.kubernetesVersion: has the YAML tag !v: a spec uses plain values, remove the tag",
            "InstanceGroup/nodes: spec.role: expected one of the allowed names (a string), found the number 5",
        ]
    );
    for message in &messages {
        assert!(
            !message.contains("Value::") && !message.contains('`'),
            "{message}"
        );
    }
}

#[test]
fn two_thousand_cloud_labels_with_newlines_are_refused_briefly() {
    let mut labels = String::from("  cloudLabels:\n");
    for i in 0..2_000 {
        labels.push_str(&format!("    \"key\\n{i}\": \"value\\nline\"\n"));
    }
    let text = GOOD_SPEC.replacen("  subnets:\n", &format!("{labels}  subnets:\n"), 1);
    let messages = check(&text);
    assert!(
        messages[0].contains(&format!(
            "spec.cloudLabels: 2000 labels, more than {MAX_CLOUD_LABELS}"
        )),
        "{}",
        messages[0]
    );
    assert!(messages
        .iter()
        .any(|m| m.contains("spec.cloudLabels[\"key\\n0\"]: the key may hold only")));
    // Ten labels' problems (two each), the count, and how many more: a message an operator can read.
    assert_eq!(messages.len(), 1 + 10 * 2 + 1, "{messages:#?}");
    assert!(messages[messages.len() - 1].contains("1990 more labels are wrong"));
}
