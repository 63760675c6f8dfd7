//! Where `tools/build-go` put the programs built from the project's Go modules (`go/`): the tests use them as
//! they are and build nothing; `tools/install-deps` builds them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory of `name`'s programs: a Kubernetes minor of `go/kube` (`1.36`), a component of `go/` (`etcd`), or
/// `images` (the local cloud's image archives and `images.yaml`). It may not exist yet: the caller says what is
/// missing.
pub fn built(name: &str) -> PathBuf {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let out = Command::new(repository.join("tools/build-go"))
        .args(["--dir", name])
        .output()
        .expect("running tools/build-go");
    assert!(
        out.status.success(),
        "tools/build-go --dir {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
