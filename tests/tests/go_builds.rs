//! The Kubernetes programs built here from their Go modules (`go/kube/<minor>`, `tools/build-go`): each answers
//! with the version `images/manifest.yaml` pins for its release, run by its own name.
//!
//! `tools/install-deps` builds them (`tools/test` runs it first); this test builds nothing and fails, naming the
//! command, when they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use ballast_state::components::ComponentManifest;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Every Kubernetes minor the project has a Go module for (`go/kube/<minor>/go.mod`).
fn minors() -> Vec<String> {
    let dir = repository().join("go/kube");
    let mut minors: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry
                .path()
                .join("go.mod")
                .is_file()
                .then(|| entry.file_name().to_string_lossy().into_owned())
        })
        .collect();
    minors.sort();
    minors
}

/// Where `tools/build-go` puts the kube of `minor`.
fn built(minor: &str) -> PathBuf {
    let out = Command::new(repository().join("tools/build-go"))
        .args(["--dir", minor])
        .output()
        .expect("running tools/build-go");
    assert!(
        out.status.success(),
        "tools/build-go --dir {minor}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn answer(program: &Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {args:?} failed: {text}",
        program.display()
    );
    text
}

#[test]
fn every_program_answers_the_version_the_manifest_pins() {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let minors = minors();
    assert!(!minors.is_empty(), "no Go module under go/kube/");
    for minor in minors {
        let (_, release) = manifest.release_for_minor(&minor).unwrap_or_else(|e| {
            panic!("go/kube/{minor} builds a release the manifest does not pin: {e}")
        });
        let want = format!("v{}", release.kubernetes);
        let dir = built(&minor);
        assert!(
            dir.join("kube").is_file(),
            "Kubernetes {minor}'s programs are not built ({} is missing): run tools/install-deps (or tools/build-go)",
            dir.join("kube").display()
        );
        for program in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubelet",
            "kube-proxy",
        ] {
            let text = answer(&dir.join(program), &["--version"]);
            assert_eq!(text.trim(), format!("Kubernetes {want}"), "{program}");
        }
        let text = answer(&dir.join("kubectl"), &["version", "--client"]);
        assert!(
            text.lines().any(|l| l == format!("Client Version: {want}")),
            "kubectl: {text}"
        );
        // Named by none of its programs, it says which it has.
        let out = Command::new(dir.join("kube"))
            .arg("kube-nothing")
            .output()
            .expect("running kube");
        assert_eq!(out.status.code(), Some(2));
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(
            text.contains("\"kube-nothing\" is not one of its programs")
                && text.contains("kube-apiserver"),
            "{text}"
        );
    }
}
