//! The spec parser under hostile and careless input: whatever the text, parsing (and validating what parses)
//! never panics and returns quickly, and the limits of `ballast_state::limits` hold with messages naming them.

use std::time::{Duration, Instant};

use ballast_state::defaults::complete;
use ballast_state::document::{
    check_unique_groups, config_from_objects, parse_objects, parse_spec_file,
};
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

/// "Billion laughs" in a spec: nine levels of ten aliases each stand for 10^9 values in under 1 KiB. Refused
/// by the alias budget before anything is built, naming the file and the budget (the unbounded parser took
/// 7.7 s and 850 MB on a 10 KB text of this kind).
#[test]
fn aliases_that_multiply_are_refused_by_the_alias_budget() {
    let mut labels = String::from(
        "  cloudLabels:\n    a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n",
    );
    for level in 1..=9 {
        let items = vec![format!("*a{}", level - 1); 10].join(", ");
        labels.push_str(&format!("    a{level}: &a{level} [{items}]\n"));
    }
    let text = GOOD_SPEC.replacen("  subnets:\n", &format!("{labels}  subnets:\n"), 1);
    let budget = ballast_state::limits::yaml_node_budget(text.len());
    let expected = format!(
        "spec.yaml: expands through its YAML aliases (*name) to more than {budget} values, the alias budget"
    );
    let messages = check(&text);
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(messages[0].starts_with(&expected), "{}", messages[0]);
    // The budget holds for what the store holds too.
    let stored = parse_objects("stored", &text).expect_err("refused");
    assert!(stored.to_string().contains("alias budget"), "{stored}");
}

/// A spec with a few anchors, as an operator might share a list of subnets or labels, still parses, and each
/// alias reads as the value it repeats.
#[test]
fn a_spec_with_a_few_anchors_still_parses() {
    let text = GOOD_SPEC.replace(
        "spec:\n  role: Node\n",
        "spec:\n  role: Node\n  subnets: &zones [us-west-2a, us-west-2b, us-west-2c]\n  \
         cloudLabels: &labels {team: platform, cost: shared}\n  nodeLabels: *labels\n",
    );
    assert!(text.contains("*labels"), "the spec was not changed: {text}");
    assert_eq!(check(&text), Vec::<String>::new());
    let objects = parse_spec_file("spec.yaml", &text).expect("parses");
    let config = config_from_objects("spec.yaml", objects).expect("one cluster");
    let nodes = config
        .instance_groups
        .iter()
        .find(|g| g.metadata.name == "nodes")
        .expect("the nodes group");
    assert_eq!(nodes.spec.node_labels, nodes.spec.cloud_labels);
    assert_eq!(nodes.spec.node_labels.len(), 2);
    assert_eq!(nodes.spec.subnets.len(), 3);
}

/// Two InstanceGroups of one name in one file: where a file's groups change a stored cluster one by one
/// (`replace -f`, `create -f` of groups alone) one would silently replace the other. Refused, naming both.
#[test]
fn an_instance_group_given_twice_in_one_file_is_refused_naming_both() {
    let group = "apiVersion: ballast.dev/v1alpha1\nkind: InstanceGroup\nmetadata: {name: extra}\n\
                 spec: {role: Node, subnets: [us-west-2a]}\n";
    let bigger = group.replace("{role: Node,", "{role: Node, maxSize: 9,");
    let text = format!("{GOOD_SPEC}---\n{group}---\n{bigger}");
    let objects = parse_spec_file("spec.yaml", &text).expect("parses");
    let config = config_from_objects("spec.yaml", objects).expect("one cluster");
    let errors = check_unique_groups("spec.yaml", &config.instance_groups).expect_err("refused");
    assert_eq!(
        errors.to_string(),
        "spec.yaml: 1 error in the spec\n  InstanceGroup/extra: metadata.name: is given twice, as the file's \
         instance groups 5 and 6 (in the file's order): one would silently replace the other; keep one, or \
         rename it"
    );
    assert_eq!(
        check_unique_groups("spec.yaml", &config.instance_groups[..5]),
        Ok(())
    );
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
