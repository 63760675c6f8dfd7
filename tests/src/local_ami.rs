//! The local cloud's AMI source: what `images/install.sh` bakes into the local cloud's image, all of it built on
//! this machine (`tools/build-go`): the node's components in upstream's artifact shapes (containerd's tarball,
//! `runc.amd64`, the kubelet, kubectl, the CNI plugins', crictl's and etcd's tarballs), a component manifest pinning
//! each by the sha256 of what was built (`pinnedBy: tools/build-go`), and the local cloud's image manifest
//! (`images.yaml`: the static pods', kube-proxy's, the cloud controller manager's, CoreDNS's and pause's images)
//! with their archives, for `install.sh --source DIR --images FILE`.
//!
//! The manifest keeps the embedded manifest's URLs, archive shapes, install paths and version commands for the
//! release: only the bytes differ (built here, not downloaded), and its sha256s say so. It pins no add-on: the
//! images come through `--images`, the local cloud's image manifest, never mixed with the AMI's upstream pins.

use std::path::{Path, PathBuf};
use std::process::Command;

use ballast_state::components::{Archive, ComponentManifest};

use crate::go_builds::{built, local_images};
use crate::image::{cache_dir, images_dir, nodeup_binary, run_ok, sha256_file, Rootfs};

/// A source directory for one release's local bake; removed on drop.
pub struct LocalAmiSource {
    dir: tempfile::TempDir,
    /// The component manifest (`<dir>/manifest.yaml`).
    pub manifest: PathBuf,
    /// The local cloud's image manifest for this release (`<dir>/images.yaml`).
    pub images: PathBuf,
    /// The release's Kubernetes version (`1.36.4`).
    pub kubernetes: String,
    /// The images `images` lists: reference -> digest (`sha256:...`).
    pub image_digests: std::collections::BTreeMap<String, String>,
}

/// The Go module (`tools/build-go --dir` name) whose programs make up `component` of release `minor`.
fn module_of(component: &str, minor: &str) -> String {
    match component {
        "kubelet" | "kubectl" => minor.to_string(),
        "crictl" => format!("crictl/{minor}"),
        other => other.to_string(),
    }
}

/// `to` made `from`'s file (a program's name may be a link to the multi-call program: the file it names).
fn link_or_copy(from: &Path, to: &Path) {
    let from = &from
        .canonicalize()
        .unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
    }
}

impl LocalAmiSource {
    /// Makes the source of release `minor` (`1.36`) from the programs and images `tools/build-go` built; panics,
    /// naming the command, when they are missing.
    pub fn make(minor: &str) -> LocalAmiSource {
        let manifest = ComponentManifest::embedded().expect("the embedded manifest");
        let release = manifest
            .releases
            .get(minor)
            .unwrap_or_else(|| panic!("images/manifest.yaml has no release {minor}"));
        let dir = tempfile::Builder::new()
            .prefix("ballast-local-ami-")
            .tempdir_in(cache_dir())
            .unwrap_or_else(|e| panic!("cannot make a source dir: {e}"));
        let stage_root = tempfile::tempdir().expect("a staging dir");
        let date = ballast_state::timestamp::now_rfc3339();
        let mut text = format!(
            "# The local cloud's component manifest for {minor}: every component built on this machine by\n\
             # tools/build-go, in upstream's shapes (made by tests/src/local_ami.rs).\n\
             apiVersion: ballast.dev/v1alpha1\nkind: ComponentManifest\narch: amd64\nreleases:\n  \
             \"{minor}\":\n    kubernetes: {}\n    components:\n",
            release.kubernetes
        );
        for (name, component) in &release.components {
            let module = module_of(name, minor);
            let programs = built(&module);
            let file = component.file_name().to_string();
            let program_of = |install: &str| -> PathBuf {
                let program = programs.join(install.rsplit('/').next().unwrap_or(install));
                assert!(
                    program.is_file(),
                    "{name}: {} is not built: run tools/install-deps (or tools/build-go)",
                    program.display()
                );
                program
            };
            match component.archive {
                Archive::Binary => {
                    let install = component.files.values().next().unwrap_or_else(|| {
                        panic!("{minor} {name}: a binary artifact installs no file")
                    });
                    link_or_copy(&program_of(install), &dir.path().join(&file));
                }
                Archive::TarGz => {
                    let stage = stage_root.path().join(name);
                    let mut entries = std::collections::BTreeSet::new();
                    for (inside, install) in &component.files {
                        let to = stage.join(inside);
                        if let Some(parent) = to.parent() {
                            std::fs::create_dir_all(parent)
                                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
                        }
                        std::fs::copy(program_of(install), &to)
                            .unwrap_or_else(|e| panic!("staging {}: {e}", to.display()));
                        entries.insert(inside.split('/').next().unwrap_or(inside).to_string());
                    }
                    // Reproducible, so the bake's key is the same for the same programs: entries sorted, dated
                    // 1970 (the staged copies are dated now), gzip without a name or time.
                    run_ok(
                        Command::new("tar")
                            .args([
                                "--sort=name",
                                "--mtime=@0",
                                "--use-compress-program=gzip -n",
                            ])
                            .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
                            .arg(&stage)
                            .arg("-cf")
                            .arg(dir.path().join(&file))
                            .args(&entries),
                        &format!("packing {file}"),
                    );
                }
            }
            let sha256 = sha256_file(&dir.path().join(&file));
            text.push_str(&format!(
                "      {name}:\n        version: {}\n        url: {}\n        sha256: {sha256}\n        \
                 provenance:\n          pinnedBy: tools/build-go\n          source: go/{module}\n          \
                 date: {date}\n        archive: {}\n",
                component.version,
                component.url,
                match component.archive {
                    Archive::Binary => "binary",
                    Archive::TarGz => "tar.gz",
                }
            ));
            if let Some(command) = &component.version_command {
                text.push_str(&format!("        versionCommand: {command}\n"));
            }
            text.push_str("        files:\n");
            for (inside, install) in &component.files {
                text.push_str(&format!("          {inside}: {install}\n"));
            }
        }
        let manifest_path = dir.path().join("manifest.yaml");
        ComponentManifest::parse(&text, "the local cloud's manifest")
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        std::fs::write(&manifest_path, &text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", manifest_path.display()));

        // This release's images: its own Kubernetes images, and every other (one build each for all releases).
        let (images_dir, listed) = local_images();
        let ours = format!(":v{}", release.kubernetes);
        let mut image_digests = std::collections::BTreeMap::new();
        let mut images_text = String::from(
            "# The local cloud's images for this release, from tools/build-go's images.yaml.\nimages:\n",
        );
        for (reference, image) in &listed.images {
            let kubernetes_image = reference.starts_with("registry.k8s.io/kube-");
            if kubernetes_image && !reference.ends_with(&ours) {
                continue;
            }
            link_or_copy(
                &images_dir.join(&image.archive),
                &dir.path().join(&image.archive),
            );
            images_text.push_str(&format!(
                "  {reference}:\n    digest: {}\n    archive: {}\n",
                image.digest, image.archive
            ));
            image_digests.insert(reference.clone(), image.digest.clone());
        }
        let images = dir.path().join("images.yaml");
        std::fs::write(&images, images_text)
            .unwrap_or_else(|e| panic!("writing {}: {e}", images.display()));
        LocalAmiSource {
            dir,
            manifest: manifest_path,
            images,
            kubernetes: release.kubernetes.clone(),
            image_digests,
        }
    }

    /// `install.sh` of this source into `rootfs`: the components, nodeup, and the local images (`--images`).
    pub fn install_into(&self, rootfs: &Rootfs) -> std::process::Output {
        rootfs.install(
            &self.manifest,
            self.dir(),
            &self.kubernetes,
            Some("images.yaml"),
        )
    }

    /// The source directory (`install.sh --source`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// What decides a baked image's bytes: each component's and image's pin, nodeup, and the recipe (`images/`).
fn bake_key(source: &LocalAmiSource) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    let manifest = std::fs::read_to_string(&source.manifest).unwrap_or_default();
    // The provenance's date changes with each source; the pins do not.
    for line in manifest
        .lines()
        .filter(|l| !l.trim_start().starts_with("date:"))
    {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    for (reference, digest) in &source.image_digests {
        hasher.update(format!("{reference} {digest}\n").as_bytes());
    }
    hasher.update(sha256_file(nodeup_binary()).as_bytes());
    let recipe = run_ok(
        Command::new("tar")
            .args(["--sort=name", "--mtime=@0", "--owner=0", "--group=0", "-C"])
            .arg(images_dir())
            .args(["-cf", "-", "."]),
        "reading the image recipe",
    );
    hasher.update(&recipe.stdout);
    hex::encode(hasher.finalize())[..16].to_string()
}

/// The local cloud's image of release `minor`, baked by `images/install.sh` from the components and images built
/// here ([`LocalAmiSource`]) into a Debian 12 root, once per recipe, nodeup and pins: a read-only directory the
/// machines overlay (`localcloud::machine`), cached under the image cache.
pub fn baked(minor: &str) -> PathBuf {
    let source = LocalAmiSource::make(minor);
    let name = format!("local-ami-{minor}-{}", bake_key(&source));
    let dir = cache_dir().join(&name);
    if !dir.join("etc/ballast/components.yaml").is_file() {
        let rootfs = Rootfs::fresh();
        let install = source.install_into(&rootfs);
        assert!(
            install.status.success(),
            "baking the local cloud's image: {}",
            String::from_utf8_lossy(&install.stderr)
        );
        rootfs.keep_at(&dir);
    }
    // Every nodeup build is a new key (855 MB each): images no run has used for a while go.
    std::fs::write(used_stamp(&name), b"").expect("stamping the local image as used");
    prune_unused_images(&name);
    dir
}

/// How long a local image no run asked for is kept: longer than any test run, so that an image a concurrent run
/// of another tree (its own nodeup, its own key) boots machines from is never removed under it.
const UNUSED_IMAGE_KEPT: std::time::Duration = std::time::Duration::from_secs(6 * 3600);
/// How many of a release's images, the most recently asked for, [`UNUSED_IMAGE_KEPT`] protects: every nodeup build
/// is a new image of 855 MB, and a day of work makes dozens.
const RECENT_IMAGES_KEPT: usize = 3;
/// How long an image beyond the [`RECENT_IMAGES_KEPT`] most recent is kept: longer than one test's use of it.
const OLDER_IMAGE_KEPT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The stamp beside image `name` whose modification time says when a run last asked for it.
fn used_stamp(name: &str) -> PathBuf {
    cache_dir().join(format!("{name}.used"))
}

/// Removes the local images (and their stamps) not asked for within [`UNUSED_IMAGE_KEPT`], or, beyond the
/// [`RECENT_IMAGES_KEPT`] most recently asked for of their release, within [`OLDER_IMAGE_KEPT`]; never `keep`.
fn prune_unused_images(keep: &str) {
    let Ok(entries) = std::fs::read_dir(cache_dir()) else {
        return;
    };
    // (release, idle time, image name) for every image but `keep`.
    let mut images: Vec<(String, std::time::Duration, String)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("local-ami-") || name.ends_with(".used") || name == keep {
            continue;
        }
        let idle = std::fs::metadata(used_stamp(&name))
            .or_else(|_| entry.metadata())
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .unwrap_or_default();
        let release = name
            .trim_start_matches("local-ami-")
            .split('-')
            .next()
            .unwrap_or_default()
            .to_string();
        images.push((release, idle, name));
    }
    images.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let keep_release = keep.trim_start_matches("local-ami-").split('-').next();
    let mut seen: std::collections::BTreeMap<String, usize> = Default::default();
    for (release, idle, name) in images {
        // `keep` is the newest of its release.
        let newer = seen
            .entry(release.clone())
            .or_insert_with(|| usize::from(keep_release == Some(release.as_str())));
        let recent = *newer < RECENT_IMAGES_KEPT;
        *newer += 1;
        let kept_for = if recent {
            UNUSED_IMAGE_KEPT
        } else {
            OLDER_IMAGE_KEPT
        };
        if idle > kept_for {
            let _ = std::fs::remove_dir_all(cache_dir().join(&name));
            let _ = std::fs::remove_file(used_stamp(&name));
        }
    }
}
