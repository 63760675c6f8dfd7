use super::*;

fn gathered() -> Gathered {
    let mut g = Gathered::default();
    g.found(
        Kind::Spec,
        serde_json::json!({"cluster": [{"spec": {"token": "abcd1234"}}]}),
    );
    g.found(
        Kind::Logs,
        serde_json::json!({"tails": [{"instanceId": "i-0abc", "nodeup": ["booting", "fetch failed"]}]}),
    );
    g.missing("cloud", "AWS did not answer: connection refused");
    g.notes
        .push("workers publish a tail only when their boot fails".into());
    g
}

#[test]
fn files_by_kind_and_an_index_that_names_what_is_missing() {
    let rendered = assemble(
        "demo.example.com",
        "2026-12-02T16:00:00Z",
        gathered(),
        Format::Yaml,
    )
    .expect("renders");
    let names: Vec<&str> = rendered.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["spec.yaml", "logs.yaml", "index.yaml"]);
    assert!(rendered.index.partial);
    assert_eq!(rendered.index.missing[0].what, "cloud");
    let index = &rendered.files[2].1;
    assert!(index.contains("AWS did not answer"), "{index}");
    assert!(index.contains("file: logs.yaml"), "{index}");
    // The secret-named value is gone from the file and from the one document.
    for text in [&rendered.files[0].1, &rendered.document] {
        assert!(!text.contains("abcd1234"), "{text}");
    }
    assert!(rendered.document.contains("fetch failed"));
    let whole: Value = yaml_serde::from_str(&rendered.document).expect("one YAML document");
    assert_eq!(whole["index"]["partial"], true);
    assert_eq!(whole["logs"]["tails"][0]["instanceId"], "i-0abc");
}

#[test]
fn nothing_missing_is_not_partial_and_json_renders_too() {
    let mut g = gathered();
    g.missing.clear();
    let rendered = assemble("c", "t", g, Format::Json).expect("renders");
    assert!(!rendered.index.partial);
    let whole: Value = serde_json::from_str(&rendered.document).expect("JSON");
    assert_eq!(whole["index"]["parts"][1]["file"], "logs.json");
}

#[test]
fn an_oversized_part_loses_items_from_its_longest_list_and_says_so() {
    let mut value = serde_json::json!({
        "instances": (0..1000).map(|i| format!("instance {i:04}")).collect::<Vec<_>>(),
        "groups": ["a", "b"],
    });
    let cut = bound(&mut value, 4096).expect("cut");
    assert!(serde_json::to_vec(&value).expect("json").len() <= 4096);
    assert_eq!(value["groups"], serde_json::json!(["a", "b"]));
    assert_eq!(value["instances"][0], "instance 0000");
    assert!(cut.contains("dropped"), "{cut}");
    let mut small = serde_json::json!({"a": [1, 2]});
    assert_eq!(bound(&mut small, 4096), None);
    let mut flat = Value::String("x".repeat(100));
    assert!(bound(&mut flat, 10).is_some());
    assert!(flat.as_str().is_some_and(|s| s.starts_with("[cut")));
}
