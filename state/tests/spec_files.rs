//! Golden tests of the spec: every file in `data/good` completes to its `.completed.yaml`, and every file in
//! `data/bad` fails with exactly the errors in its `.errors`. `BALLAST_BLESS=1 cargo test` rewrites them.

use std::path::{Path, PathBuf};

use ballast_state::defaults::complete;
use ballast_state::document::{config_from_objects, parse_objects, to_yaml_documents, SpecObject};
use ballast_state::validate::validate;
use ballast_testutil::check;

fn data_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(kind)
}

fn inputs(kind: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir(kind))
        .expect("test data folder")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml")
                && !p.to_string_lossy().ends_with(".completed.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {kind}");
    files
}

/// All the errors of a file, one per line, as an operator sees them.
fn errors_of(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("read input");
    let name = path
        .file_name()
        .expect("file name")
        .to_string_lossy()
        .to_string();
    let objects = match parse_objects(&name, &text) {
        Ok(objects) => objects,
        Err(e) => return e.errors.iter().map(ToString::to_string).collect(),
    };
    let config = match config_from_objects(&name, objects) {
        Ok(config) => config,
        Err(e) => return e.errors.iter().map(ToString::to_string).collect(),
    };
    validate(&complete(&config))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn bad_specs_fail_with_every_error_named() {
    let mut failures = Vec::new();
    for input in inputs("bad") {
        let errors = errors_of(&input);
        if errors.is_empty() {
            failures.push(format!("{} was accepted", input.display()));
            continue;
        }
        let rendered = errors.join("\n") + "\n";
        if let Err(e) = check(&input.with_extension("errors"), &rendered) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn good_specs_complete_to_their_golden_files() {
    let mut failures = Vec::new();
    for input in inputs("good") {
        let errors = errors_of(&input);
        if !errors.is_empty() {
            failures.push(format!(
                "{} is rejected:\n{}",
                input.display(),
                errors.join("\n")
            ));
            continue;
        }
        let text = std::fs::read_to_string(&input).expect("read input");
        let objects = parse_objects("input", &text).expect("parses");
        let config = config_from_objects("input", objects).expect("one cluster");
        let completed = complete(&config);
        let mut objects = vec![SpecObject::Cluster(completed.cluster.clone())];
        objects.extend(
            completed
                .instance_groups
                .iter()
                .cloned()
                .map(SpecObject::InstanceGroup),
        );
        let rendered = to_yaml_documents(&objects).expect("render");
        let golden_path = input.with_extension("completed.yaml");
        if let Err(e) = check(&golden_path, &rendered) {
            failures.push(e.to_string());
        }
        // Completion is idempotent, and the completed spec reads back as itself.
        let again = parse_objects("completed", &rendered).expect("completed spec parses");
        let again = config_from_objects("completed", again).expect("one cluster");
        assert_eq!(
            complete(&again),
            completed,
            "{}: completing twice changed it",
            input.display()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
