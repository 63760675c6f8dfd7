//! Where `tools/build-go` put the programs built from the project's Go modules (`go/`): the tests use them as
//! they are and build nothing; `tools/install-deps` builds them.

use std::path::PathBuf;
use std::process::Command;

/// The directory of `name`'s programs: a Kubernetes minor of `go/kube` (`1.36`), a component of `go/` (`etcd`), or
/// `images` (the local cloud's image archives and `images.yaml`). It may not exist yet: the caller says what is
/// missing.
pub fn built(name: &str) -> PathBuf {
    let out = Command::new(crate::image::repo_root().join("tools/build-go"))
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

/// `images.yaml` of `tools/build-go`: the local cloud's image manifest, reference -> the image's digest and
/// archive (a file beside it).
#[derive(serde::Deserialize)]
pub struct LocalImages {
    pub images: std::collections::BTreeMap<String, LocalImage>,
}

#[derive(serde::Deserialize)]
pub struct LocalImage {
    /// `sha256:...` of the image's OCI manifest.
    pub digest: String,
    /// The archive's file name in the images' directory.
    pub archive: String,
}

/// The local cloud's images: their directory and its `images.yaml`, read; panics, naming the command, when they
/// are not made.
pub fn local_images() -> (PathBuf, LocalImages) {
    let dir = built("images");
    let listing = dir.join("images.yaml");
    let text = std::fs::read_to_string(&listing).unwrap_or_else(|e| {
        panic!(
            "the local cloud's images are not made ({}: {e}): run tools/install-deps (or tools/build-go)",
            listing.display()
        )
    });
    let images =
        yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", listing.display()));
    (dir, images)
}
