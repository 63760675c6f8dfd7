//! The image tier's harness: the AMI recipe (`images/`) run for real in a Debian 12 root filesystem.
//!
//! - [`base_rootfs`]: `debootstrap --variant=minbase --include=systemd bookworm`, made once and cached as a
//!   tarball under `/var/cache/ballast/image-bake/` (keyed by the recipe), so warm runs take seconds;
//! - [`Rootfs`]: a fresh copy of it per test, in a temp dir;
//! - [`Rootfs::run`]: a command in that root through `chroot`, inside a private mount namespace (`unshare
//!   --mount`): every mount it needs (proc, a tmpfs on /run, the bind mounts of the inputs) lives and dies with
//!   that one process, so no mount can outlive a test, however it ends;
//! - [`test_artifacts`]: a local artifact directory in upstream's shapes: containerd, runc, the CNI plugins and
//!   etcd from Debian's packages (`apt-get download`, cached), and generated stand-ins for what cannot be fetched
//!   here (kubelet, kubectl, crictl), pinned by sha256 in a test manifest;
//! - [`nodeup_binary`]: nodeup, built from this tree (through the local cloud harness's build).
//!
//! Everything a missing tool would stop panics with what to install: these tests fail, never skip.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use sha2::{Digest, Sha256};

/// The Debian suite and what goes into the base root filesystem. Changing any of it makes a new cache key.
const SUITE: &str = "bookworm";
const VARIANT: &str = "minbase";
/// What a cloud image of Debian 12 carries that a node needs: systemd, CA certificates, `/etc/hosts` (netbase:
/// containerd copies it into every pod) and iptables (the bridge CNI plugin's masquerade).
const INCLUDE: &str = "systemd,ca-certificates,netbase,iptables";
/// Debian packages whose binaries the test artifacts are made of.
const DEBIAN_PACKAGES: [&str; 5] = [
    "containerd",
    "runc",
    "containernetworking-plugins",
    "etcd-server",
    "etcd-client",
];
/// Bumped when the way the cached things are made changes.
const CACHE_FORMAT: &str = "v1";

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// `images/` in this tree.
pub fn images_dir() -> PathBuf {
    repo_root().join("images")
}

/// Where the rootfs tarball and the Debian packages are cached (`BALLAST_IMAGE_CACHE` overrides).
pub fn cache_dir() -> PathBuf {
    let dir = std::env::var_os("BALLAST_IMAGE_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/ballast/image-bake"));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create the image cache {}: {e}", dir.display()));
    dir
}

/// Panics, saying how to get it, when a tool these tests need is missing.
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not installed, and these tests need it: `apt-get install -y {package}` \
         (tools/install-deps installs it)"
    );
}

/// Panics unless this process is root: debootstrap, chroot and mounts need it.
pub fn require_root() {
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    assert_eq!(
        uid, 0,
        "the image tests need root (debootstrap, chroot, mount namespaces); run them as root or with sudo"
    );
}

/// Runs a command, panicking with its output when it cannot start or fails.
pub fn run_ok(command: &mut Command, what: &str) -> Output {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {command:?}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The sha256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> String {
    let mut file =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        let n = file
            .read(&mut buffer)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    hex::encode(hasher.finalize())
}

fn sha256_str(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The Debian mirror debootstrap uses (`BALLAST_DEBIAN_MIRROR` overrides; part of the cache key).
fn mirror() -> String {
    std::env::var("BALLAST_DEBIAN_MIRROR").unwrap_or_else(|_| "http://deb.debian.org/debian".into())
}

/// The cached tarball of the base root filesystem, made on first use (about 45 s with a warm apt mirror).
pub fn base_rootfs() -> &'static Path {
    static TARBALL: OnceLock<PathBuf> = OnceLock::new();
    TARBALL.get_or_init(|| {
        require_root();
        let recipe = format!(
            "{CACHE_FORMAT} suite={SUITE} variant={VARIANT} include={INCLUDE} mirror={}",
            mirror()
        );
        let key = &sha256_str(&recipe)[..12];
        let tarball = cache_dir().join(format!("rootfs-{SUITE}-{VARIANT}-{key}.tar"));
        if tarball.is_file() {
            return tarball;
        }
        require_tool("debootstrap", "debootstrap");
        let started = Instant::now();
        let build = tempfile::Builder::new()
            .prefix("rootfs-build-")
            .tempdir_in(cache_dir())
            .unwrap_or_else(|e| panic!("cannot make a build dir in the image cache: {e}"));
        let root = build.path().join("root");
        eprintln!(
            "image: debootstrap {SUITE} ({VARIANT}, +{INCLUDE}) into {} (cold cache)",
            root.display()
        );
        run_ok(
            Command::new("debootstrap")
                .arg(format!("--variant={VARIANT}"))
                .arg(format!("--include={INCLUDE}"))
                .arg(SUITE)
                .arg(&root)
                .arg(mirror()),
            "debootstrap",
        );
        // Caches of the bootstrap itself are not part of any image.
        let _ = std::fs::remove_dir_all(root.join("var/cache/apt/archives"));
        std::fs::create_dir_all(root.join("var/cache/apt/archives/partial"))
            .unwrap_or_else(|e| panic!("recreating the apt archives dir: {e}"));
        let partial = build.path().join("rootfs.tar");
        run_ok(
            Command::new("tar")
                .arg("--numeric-owner")
                .arg("-C")
                .arg(&root)
                .arg("-cf")
                .arg(&partial)
                .arg("."),
            "archiving the root filesystem",
        );
        std::fs::rename(&partial, &tarball)
            .unwrap_or_else(|e| panic!("cannot move the rootfs tarball into place: {e}"));
        eprintln!(
            "image: base root filesystem cached at {} in {:.1} s",
            tarball.display(),
            started.elapsed().as_secs_f64()
        );
        tarball
    })
}

/// The base root filesystem unpacked once into a directory beside its tarball: a read-only image that machines
/// overlay (`localcloud::machine`); never written after it is complete.
pub fn base_rootfs_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tarball = base_rootfs();
        let dir = tarball.with_extension("dir");
        if dir.join(".complete").is_file() {
            return dir;
        }
        let partial = tempfile::Builder::new()
            .prefix("rootfs-dir-")
            .tempdir_in(cache_dir())
            .unwrap_or_else(|e| panic!("cannot make a dir in the image cache: {e}"));
        run_ok(
            Command::new("tar")
                .arg("--numeric-owner")
                .arg("-C")
                .arg(partial.path())
                .arg("-xf")
                .arg(tarball),
            "unpacking the base root filesystem",
        );
        std::fs::write(partial.path().join(".complete"), "")
            .unwrap_or_else(|e| panic!("marking the unpacked root complete: {e}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(partial.keep(), &dir)
            .unwrap_or_else(|e| panic!("moving the unpacked root to {}: {e}", dir.display()));
        dir
    })
}

/// How a command ended and what it wrote: for assertion messages.
pub fn output_text(output: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A fresh Debian 12 root filesystem for one test, removed on drop.
pub struct Rootfs {
    dir: tempfile::TempDir,
}

/// A host path made visible inside the chroot for one [`Rootfs::run`], read-only.
pub struct Bind<'a> {
    pub host: &'a Path,
    /// Absolute, under `/run/ballast/` (a tmpfs that exists only for that run).
    pub inside: &'a str,
}

impl Rootfs {
    /// Extracts the cached base root filesystem into a new temp dir.
    pub fn fresh() -> Rootfs {
        let tarball = base_rootfs();
        let dir = tempfile::Builder::new()
            .prefix("ballast-rootfs-")
            .tempdir_in(cache_dir())
            .unwrap_or_else(|e| panic!("cannot make a temp dir for a root filesystem: {e}"));
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
        run_ok(
            Command::new("tar")
                .arg("--numeric-owner")
                .arg("-C")
                .arg(&root)
                .arg("-xpf")
                .arg(tarball),
            "extracting the base root filesystem",
        );
        Rootfs { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `images/install.sh` inside the root (chroot): `manifest`, baking Kubernetes `version` from the directory
    /// `source`, with this tree's nodeup; `images` names a file in `source` to pass as `--images` (the local
    /// cloud's image manifest).
    pub fn install(
        &self,
        manifest: &Path,
        source: &Path,
        version: &str,
        images: Option<&str>,
    ) -> Output {
        let recipe = images_dir();
        let local_images = images.map(|file| format!("/run/ballast/artifacts/{file}"));
        let mut argv = vec![
            "/bin/sh",
            "/run/ballast/images/install.sh",
            "--manifest",
            "/run/ballast/manifest.yaml",
            "--kubernetes-version",
            version,
            "--source",
            "/run/ballast/artifacts",
            "--nodeup",
            "/run/ballast/nodeup",
        ];
        if let Some(file) = &local_images {
            argv.extend(["--images", file.as_str()]);
        }
        self.run(
            &[
                Bind {
                    host: &recipe,
                    inside: "/run/ballast/images",
                },
                Bind {
                    host: source,
                    inside: "/run/ballast/artifacts",
                },
                Bind {
                    host: manifest,
                    inside: "/run/ballast/manifest.yaml",
                },
                Bind {
                    host: nodeup_binary(),
                    inside: "/run/ballast/nodeup",
                },
            ],
            &argv,
        )
    }

    /// `images/verify.sh` inside the root (chroot), against `manifest` for Kubernetes `minor`.
    pub fn verify(&self, manifest: &Path, minor: &str) -> Output {
        let recipe = images_dir();
        self.run(
            &[
                Bind {
                    host: &recipe,
                    inside: "/run/ballast/images",
                },
                Bind {
                    host: manifest,
                    inside: "/run/ballast/manifest.yaml",
                },
            ],
            &[
                "/bin/sh",
                "/run/ballast/images/verify.sh",
                "--manifest",
                "/run/ballast/manifest.yaml",
                "--kubernetes-version",
                minor,
            ],
        )
    }

    /// Keeps the root past this value: moves it to `to` (on the same filesystem as the image cache).
    pub fn keep_at(self, to: &Path) {
        let kept = self.dir.keep();
        let _ = std::fs::remove_dir_all(to);
        std::fs::rename(kept.join("root"), to)
            .unwrap_or_else(|e| panic!("moving a root filesystem to {}: {e}", to.display()));
        let _ = std::fs::remove_dir(&kept);
    }

    /// A path inside the root: `rootfs.join("/etc/machine-id")`.
    pub fn join(&self, inside: &str) -> PathBuf {
        self.path().join(inside.trim_start_matches('/'))
    }

    /// Writes a file inside the root (creating its directory).
    pub fn write(&self, inside: &str, content: &str) {
        let path = self.join(inside);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
        }
        std::fs::write(&path, content)
            .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// Runs `argv` inside the root with `binds` mounted, in a private mount namespace; returns its output.
    pub fn run(&self, binds: &[Bind<'_>], argv: &[&str]) -> Output {
        require_tool("unshare", "util-linux");
        require_tool("chroot", "coreutils");
        // $1: the root; then "host inside" pairs up to "--"; then the command.
        let script = r#"set -eu
root=$1; shift
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
while [ "$1" != -- ]; do
  host=$1; inside=$2; shift 2
  if [ -d "$host" ]; then mkdir -p "$root$inside"; else mkdir -p "$(dirname "$root$inside")"; : > "$root$inside"; fi
  mount --bind "$host" "$root$inside"
  mount -o remount,bind,ro "$root$inside"
done
shift
exec chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"
"#;
        let mut command = Command::new("unshare");
        command
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(self.path());
        for bind in binds {
            assert!(
                bind.inside.starts_with("/run/ballast/"),
                "binds go under /run/ballast/: {}",
                bind.inside
            );
            command.arg(bind.host).arg(bind.inside);
        }
        command.arg("--").args(argv);
        command
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {argv:?} in the chroot: {e}"))
    }

    /// What is in the root: every path with its kind, mode, size and (for files and links) modification time
    /// and link target. Two snapshots are equal when nothing was installed, removed or rewritten; directory
    /// modification times are left out (a temp dir made and removed again changes its parent's).
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        let mut entries = BTreeMap::new();
        let root = self.path();
        snapshot_dir(&root, &root, &mut entries);
        entries
    }
}

fn snapshot_dir(root: &Path, dir: &Path, entries: &mut BTreeMap<String, String>) {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in read {
        let entry = entry.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path)
            .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
        let name = path
            .strip_prefix(root)
            .map(|p| format!("/{}", p.display()))
            .unwrap_or_default();
        let mode = meta.permissions().mode();
        let description = if meta.is_dir() {
            format!("dir {mode:o}")
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).unwrap_or_default();
            format!("link -> {}", target.display())
        } else {
            format!(
                "file {mode:o} {} bytes, mtime {}.{}",
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec()
            )
        };
        entries.insert(name, description);
        if meta.is_dir() {
            snapshot_dir(root, &path, entries);
        }
    }
}

/// What differs between two snapshots, for assertion messages.
pub fn snapshot_diff(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut diff = Vec::new();
    for (path, was) in before {
        match after.get(path) {
            None => diff.push(format!("removed {path} ({was})")),
            Some(now) if now != was => diff.push(format!("changed {path}: {was} -> {now}")),
            Some(_) => {}
        }
    }
    for (path, now) in after {
        if !before.contains_key(path) {
            diff.push(format!("added {path} ({now})"));
        }
    }
    diff
}

/// nodeup as built from this tree: the local cloud harness's shared build (`BALLAST_BIN_DIR` from `tools/test`,
/// else `cargo build --workspace --all-targets` into this test binary's target dir and profile, a no-op when
/// fresh), so both tiers share one build with one feature set.
pub fn nodeup_binary() -> &'static Path {
    &crate::binaries::binaries().nodeup
}

/// One artifact of the test manifest: where it came from, and its pin.
pub struct TestArtifact {
    pub name: &'static str,
    pub version: String,
    pub file: String,
    pub archive: &'static str,
    pub version_command: Option<&'static str>,
    /// (path in the artifact, install path)
    pub files: Vec<(String, &'static str)>,
    pub sha256: String,
}

/// A local artifact directory (offline source for `install.sh --source DIR`) and what it holds.
pub struct TestArtifacts {
    pub dir: PathBuf,
    pub kubernetes: &'static str,
    pub artifacts: Vec<TestArtifact>,
}

/// The Kubernetes release the test manifest pins (only the stand-ins claim it).
pub const TEST_KUBERNETES: &str = "1.33.4";
pub const TEST_MINOR: &str = "1.33";

impl TestArtifacts {
    /// The test manifest, in the same YAML subset as images/manifest.yaml. `sha256_of` may replace a
    /// component's pin (to test a mismatch), or leave it `unpinned`.
    pub fn manifest(&self, sha256_of: &dyn Fn(&TestArtifact) -> String) -> String {
        let mut text = format!(
            "# A test manifest: Debian's binaries and generated stand-ins, made by tests/src/image.rs.\n\
             apiVersion: ballast.dev/v1alpha1\nkind: ComponentManifest\narch: amd64\nreleases:\n  \
             \"{TEST_MINOR}\":\n    kubernetes: {}\n    components:\n",
            self.kubernetes
        );
        for a in &self.artifacts {
            let sha = sha256_of(a);
            text.push_str(&format!(
                "      {}:\n        version: {}\n        url: https://artifacts.invalid/ballast-test/{}\n        \
                 sha256: {sha}\n{}        archive: {}\n",
                a.name,
                a.version,
                a.file,
                test_provenance(8, &sha, &a.file),
                a.archive
            ));
            if let Some(command) = a.version_command {
                text.push_str(&format!("        versionCommand: {command}\n"));
            }
            text.push_str("        files:\n");
            for (from, to) in &a.files {
                text.push_str(&format!("          {from}: {to}\n"));
            }
        }
        text
    }

    /// The manifest with every real pin.
    pub fn pinned_manifest(&self) -> String {
        self.manifest(&|a| a.sha256.clone())
    }
}

/// Debian's `Version` of a .deb without its Debian revision: `1.6.20~ds1-1+deb12u3` -> `1.6.20~ds1`.
fn deb_upstream_version(deb: &Path) -> String {
    let out = run_ok(
        Command::new("dpkg-deb").arg("-f").arg(deb).arg("Version"),
        "reading a .deb's version",
    );
    let full = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let without_epoch = full.split_once(':').map_or(full.as_str(), |(_, v)| v);
    without_epoch
        .rsplit_once('-')
        .map_or(without_epoch, |(v, _)| v)
        .to_string()
}

/// The Debian packages, downloaded once into the cache (`apt-get download`; `apt-get update` first when apt
/// does not know them yet).
fn debian_packages() -> BTreeMap<&'static str, PathBuf> {
    require_tool("apt-get", "apt");
    require_tool("dpkg-deb", "dpkg");
    let dir = cache_dir().join(format!("debs-{CACHE_FORMAT}"));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let find = |package: &str| -> Option<PathBuf> {
        std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
            })
    };
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .into_iter()
        .filter(|p| find(p).is_none())
        .collect();
    if !missing.is_empty() {
        let download = |dir: &Path| {
            Command::new("apt-get")
                .current_dir(dir)
                .arg("download")
                .args(&missing)
                .stdin(Stdio::null())
                .output()
        };
        let first = download(&dir).unwrap_or_else(|e| panic!("cannot run apt-get download: {e}"));
        if !first.status.success() {
            run_ok(
                Command::new("apt-get").args(["update", "-qq"]),
                "apt-get update",
            );
            run_ok(
                Command::new("apt-get")
                    .current_dir(&dir)
                    .arg("download")
                    .args(&missing),
                "apt-get download",
            );
        }
    }
    DEBIAN_PACKAGES
        .into_iter()
        .map(|p| {
            let deb = find(p).unwrap_or_else(|| {
                panic!("apt-get download left no {p}_*.deb in {}", dir.display())
            });
            (p, deb)
        })
        .collect()
}

fn make_executable(path: &Path, content: &str) {
    std::fs::write(path, content).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

fn copy_executable(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)
            .unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    }
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", from.display(), to.display()));
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", to.display()));
}

fn tar_gz(dir: &Path, archive: &Path, entries: &[&str]) {
    run_ok(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
            .arg(dir)
            .arg("-czf")
            .arg(archive)
            .args(entries),
        "making a test artifact",
    );
}

/// What the test manifest says beside a value at `indent`: a pin's provenance (pinned the way images/pin.sh
/// pins, from `source`), or an `unpinned` value's reason.
pub fn test_provenance(indent: usize, value: &str, source: &str) -> String {
    let pad = " ".repeat(indent);
    if value == "unpinned" {
        format!("{pad}reason: not pinned by this test\n")
    } else {
        format!(
            "{pad}provenance:\n{pad}  pinnedBy: images/pin.sh\n{pad}  source: {source}\n{pad}  date: 2026-12-02T00:00:00Z\n"
        )
    }
}

/// The test artifacts: made once and cached (keyed by the Debian packages' file names), their sha256s computed
/// here, in Rust, independently of the shell scripts under test.
pub fn test_artifacts() -> &'static TestArtifacts {
    static ARTIFACTS: OnceLock<TestArtifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let debs = debian_packages();
        let versions: BTreeMap<&str, String> =
            debs.iter().map(|(p, deb)| (*p, deb_upstream_version(deb))).collect();
        let names: Vec<String> = debs
            .values()
            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let key = &sha256_str(&format!("{CACHE_FORMAT} {TEST_KUBERNETES} {}", names.join(" ")))[..12];
        let dir = cache_dir().join(format!("artifacts-{key}"));
        let containerd_v = &versions["containerd"];
        let runc_v = &versions["runc"];
        let cni_v = &versions["containernetworking-plugins"];
        let etcd_v = &versions["etcd-server"];
        let containerd_file = format!("containerd-{containerd_v}-linux-amd64.tar.gz");
        let cni_file = format!("cni-plugins-linux-amd64-v{cni_v}.tgz");
        let etcd_dir = format!("etcd-v{etcd_v}-linux-amd64");
        let etcd_file = format!("{etcd_dir}.tar.gz");
        let crictl_version = "1.33.0";
        let crictl_file = format!("crictl-v{crictl_version}-linux-amd64.tar.gz");
        let cni_plugins = ["bandwidth", "bridge", "host-local", "loopback", "portmap", "ptp"];

        if !dir.join(".complete").is_file() {
            let started = Instant::now();
            let build = tempfile::Builder::new()
                .prefix("artifacts-build-")
                .tempdir_in(cache_dir())
                .unwrap_or_else(|e| panic!("cannot make a build dir: {e}"));
            let out = build.path().join("out");
            let work = build.path().join("work");
            std::fs::create_dir_all(&out).unwrap_or_else(|e| panic!("mkdir: {e}"));
            for (package, deb) in &debs {
                let into = work.join(package);
                std::fs::create_dir_all(&into).unwrap_or_else(|e| panic!("mkdir: {e}"));
                run_ok(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&into), "dpkg-deb -x");
            }
            // containerd, shaped like upstream's release tarball (bin/...).
            let stage = work.join("containerd-stage");
            for bin in ["containerd", "containerd-shim-runc-v2", "ctr"] {
                copy_executable(&work.join("containerd/usr/bin").join(bin), &stage.join("bin").join(bin));
            }
            tar_gz(&stage, &out.join(&containerd_file), &["bin"]);
            // runc: a bare binary, like upstream's runc.amd64.
            copy_executable(&work.join("runc/usr/sbin/runc"), &out.join("runc.amd64"));
            // CNI plugins: flat, like upstream's tgz.
            let stage = work.join("cni-stage");
            for plugin in cni_plugins {
                copy_executable(
                    &work.join("containernetworking-plugins/usr/lib/cni").join(plugin),
                    &stage.join(plugin),
                );
            }
            let entries: Vec<String> = cni_plugins.iter().map(|p| format!("./{p}")).collect();
            let entries: Vec<&str> = entries.iter().map(String::as_str).collect();
            tar_gz(&stage, &out.join(&cni_file), &entries);
            // etcd: etcd-vX-linux-amd64/{etcd,etcdctl}; Debian's 3.4 has no etcdutl.
            let stage = work.join("etcd-stage");
            copy_executable(&work.join("etcd-server/usr/bin/etcd"), &stage.join(&etcd_dir).join("etcd"));
            copy_executable(&work.join("etcd-client/usr/bin/etcdctl"), &stage.join(&etcd_dir).join("etcdctl"));
            tar_gz(&stage, &out.join(&etcd_file), &[etcd_dir.as_str()]);
            // Stand-ins for what cannot be downloaded here.
            make_executable(
                &out.join("kubelet"),
                &format!(
                    "#!/bin/sh\n# A stand-in for the kubelet, made by Ballast's image tests: the real one cannot be \
                     downloaded there.\necho \"Kubernetes v{TEST_KUBERNETES}\"\n"
                ),
            );
            make_executable(
                &out.join("kubectl"),
                &format!(
                    "#!/bin/sh\n# A stand-in for kubectl, made by Ballast's image tests.\necho \"Client Version: \
                     v{TEST_KUBERNETES}\"\n"
                ),
            );
            let stage = work.join("crictl-stage");
            std::fs::create_dir_all(&stage).unwrap_or_else(|e| panic!("mkdir: {e}"));
            make_executable(
                &stage.join("crictl"),
                &format!(
                    "#!/bin/sh\n# A stand-in for crictl, made by Ballast's image tests.\necho \"crictl version \
                     v{crictl_version}\"\n"
                ),
            );
            tar_gz(&stage, &out.join(&crictl_file), &["crictl"]);
            std::fs::write(out.join(".complete"), "")
                .unwrap_or_else(|e| panic!("writing the artifacts' completion mark: {e}"));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::rename(&out, &dir)
                .unwrap_or_else(|e| panic!("moving the test artifacts to {}: {e}", dir.display()));
            eprintln!(
                "image: test artifacts made in {:.1} s at {}",
                started.elapsed().as_secs_f64(),
                dir.display()
            );
        }

        let pin = |file: &str| sha256_file(&dir.join(file));
        let artifacts = vec![
            TestArtifact {
                name: "containerd",
                version: containerd_v.clone(),
                sha256: pin(&containerd_file),
                file: containerd_file.clone(),
                archive: "tar.gz",
                version_command: Some("/usr/local/bin/containerd --version"),
                files: vec![
                    ("bin/containerd".into(), "/usr/local/bin/containerd"),
                    ("bin/containerd-shim-runc-v2".into(), "/usr/local/bin/containerd-shim-runc-v2"),
                    ("bin/ctr".into(), "/usr/local/bin/ctr"),
                ],
            },
            TestArtifact {
                name: "runc",
                version: runc_v.clone(),
                sha256: pin("runc.amd64"),
                file: "runc.amd64".into(),
                archive: "binary",
                version_command: Some("/usr/local/sbin/runc --version"),
                files: vec![("runc.amd64".into(), "/usr/local/sbin/runc")],
            },
            TestArtifact {
                name: "kubelet",
                version: TEST_KUBERNETES.into(),
                sha256: pin("kubelet"),
                file: "kubelet".into(),
                archive: "binary",
                version_command: Some("/usr/local/bin/kubelet --version"),
                files: vec![("kubelet".into(), "/usr/local/bin/kubelet")],
            },
            TestArtifact {
                name: "kubectl",
                version: TEST_KUBERNETES.into(),
                sha256: pin("kubectl"),
                file: "kubectl".into(),
                archive: "binary",
                version_command: Some("/usr/local/bin/kubectl version --client"),
                files: vec![("kubectl".into(), "/usr/local/bin/kubectl")],
            },
            TestArtifact {
                name: "cni-plugins",
                version: cni_v.clone(),
                sha256: pin(&cni_file),
                file: cni_file.clone(),
                archive: "tar.gz",
                version_command: None,
                files: vec![
                    ("bandwidth".into(), "/opt/cni/bin/bandwidth"),
                    ("bridge".into(), "/opt/cni/bin/bridge"),
                    ("host-local".into(), "/opt/cni/bin/host-local"),
                    ("loopback".into(), "/opt/cni/bin/loopback"),
                    ("portmap".into(), "/opt/cni/bin/portmap"),
                    ("ptp".into(), "/opt/cni/bin/ptp"),
                ],
            },
            TestArtifact {
                name: "crictl",
                version: crictl_version.into(),
                sha256: pin(&crictl_file),
                file: crictl_file.clone(),
                archive: "tar.gz",
                version_command: Some("/usr/local/bin/crictl --version"),
                files: vec![("crictl".into(), "/usr/local/bin/crictl")],
            },
            TestArtifact {
                name: "etcd",
                version: etcd_v.clone(),
                sha256: pin(&etcd_file),
                file: etcd_file.clone(),
                archive: "tar.gz",
                version_command: Some("/usr/local/bin/etcd --version"),
                files: vec![
                    (format!("{etcd_dir}/etcd"), "/usr/local/bin/etcd"),
                    (format!("{etcd_dir}/etcdctl"), "/usr/local/bin/etcdctl"),
                ],
            },
        ];
        TestArtifacts {
            dir,
            kubernetes: TEST_KUBERNETES,
            artifacts,
        }
    })
}

/// One add-on image the tests bake: a tiny but valid OCI image (one gzipped layer, a config, a manifest and, for
/// most, an image index above it, as registries serve multi-platform images), written by [`TestAddons::build`]
/// as an OCI image layout tar under install.sh's file name for it.
pub struct TestImage {
    pub addon: String,
    /// Its key under the add-on's `images:`.
    pub name: String,
    /// Whether its digest names an index (`digestKind: index`) or a single manifest.
    pub indexed: bool,
    /// Why the real manifest leaves it unpinned, if it does (Calico's and the VPC CNI's images).
    pub unpinned_reason: Option<String>,
    /// `registry/repository:tag`.
    pub reference: String,
    /// What the pin names: the index's digest, or the manifest's for a single-manifest image (64 hex).
    pub digest: String,
    /// The bytes that digest names (the index or the manifest), to compare with what containerd holds.
    pub target: Vec<u8>,
    /// The archive's file name in the source directory (images/lib.sh `ballast_image_archive`).
    pub file: String,
}

impl TestImage {
    /// `registry/repository@sha256:...`: the name the kubelet asks containerd for.
    pub fn by_digest(&self) -> String {
        let repository = self
            .reference
            .rsplit_once(':')
            .map_or(self.reference.as_str(), |(r, _)| r);
        format!("{repository}@sha256:{}", self.digest)
    }
}

/// A source directory for `install.sh --source DIR` holding the test artifacts (hard links into the cache),
/// one OCI archive per add-on image, and a tiny manifest per CNI; removed on drop.
pub struct TestAddons {
    dir: tempfile::TempDir,
    pub images: Vec<TestImage>,
    /// (add-on, file name, sha256) of each CNI manifest.
    pub manifests: Vec<(String, String, String)>,
    /// The add-ons of the real manifest's release (name, version), in manifest order.
    addons: Vec<(String, String)>,
}

/// The add-ons of the test manifest: those of the real manifest's release [`TEST_MINOR`] (images/manifest.yaml, as
/// this build embeds it), with the same add-ons, image keys and references, so install.sh bakes (and refuses)
/// what a real bake would. kube-proxy's stand-in is a single manifest (`digestKind: manifest`), the others sit
/// under an index as registries serve multi-platform images.
fn real_release() -> ballast_state::components::Release {
    let manifest = ballast_state::components::ComponentManifest::embedded()
        .unwrap_or_else(|e| panic!("the embedded manifest: {e}"));
    manifest.releases[TEST_MINOR].clone()
}

fn sha256_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A blob of an OCI layout: written under `blobs/sha256/`, described for its parent.
fn oci_blob(layout: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let digest = sha256_bytes(bytes);
    let path = layout.join("blobs/sha256").join(&digest);
    std::fs::create_dir_all(layout.join("blobs/sha256"))
        .unwrap_or_else(|e| panic!("mkdir blobs: {e}"));
    std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    serde_json::json!({ "mediaType": media_type, "digest": format!("sha256:{digest}"), "size": bytes.len() })
}

/// Writes one test image as an OCI image layout tar at `archive`; returns (its digest, the bytes it names).
fn oci_archive(work: &Path, archive: &Path, reference: &str, indexed: bool) -> (String, Vec<u8>) {
    let name = sha256_bytes(reference.as_bytes());
    let stage = work.join(&name[..12]);
    let files = stage.join("files");
    let layout = stage.join("layout");
    std::fs::create_dir_all(&files).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::create_dir_all(&layout).unwrap_or_else(|e| panic!("mkdir: {e}"));
    std::fs::write(
        files.join("image.txt"),
        format!("a Ballast test image: {reference}\n"),
    )
    .unwrap_or_else(|e| panic!("writing a layer's file: {e}"));
    let layer_tar = stage.join("layer.tar");
    run_ok(
        Command::new("tar")
            .args([
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "-C",
            ])
            .arg(&files)
            .arg("-cf")
            .arg(&layer_tar)
            .arg("image.txt"),
        "making a test image's layer",
    );
    let uncompressed =
        std::fs::read(&layer_tar).unwrap_or_else(|e| panic!("reading the layer: {e}"));
    let gzipped = run_ok(
        Command::new("gzip").args(["-n", "-c"]).arg(&layer_tar),
        "gzip",
    )
    .stdout;
    let layer = oci_blob(
        &layout,
        "application/vnd.oci.image.layer.v1.tar+gzip",
        &gzipped,
    );
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": ["/image.txt"] },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{}", sha256_bytes(&uncompressed))] },
    });
    let config = oci_blob(
        &layout,
        "application/vnd.oci.image.config.v1+json",
        &serde_json::to_vec(&config).expect("config"),
    );
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    }))
    .expect("manifest");
    let mut manifest_desc = oci_blob(
        &layout,
        "application/vnd.oci.image.manifest.v1+json",
        &manifest,
    );
    let (mut top, target) = if indexed {
        manifest_desc["platform"] = serde_json::json!({ "architecture": "amd64", "os": "linux" });
        // As a registry's index lists every platform while an export for one holds only its blobs: an arm64
        // entry whose content is not in the archive.
        let arm64 = serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{}", sha256_bytes(format!("arm64 {reference}").as_bytes())),
            "size": 512,
            "platform": { "architecture": "arm64", "os": "linux" },
        });
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [manifest_desc, arm64],
        }))
        .expect("index");
        (
            oci_blob(&layout, "application/vnd.oci.image.index.v1+json", &index),
            index,
        )
    } else {
        (manifest_desc, manifest)
    };
    let tag = reference.rsplit_once(':').map_or("latest", |(_, t)| t);
    top["annotations"] = serde_json::json!({ "org.opencontainers.image.ref.name": tag });
    let digest = top["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("sha256:"))
        .expect("a digest")
        .to_string();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap_or_else(|e| panic!("writing oci-layout: {e}"));
    let index_json = serde_json::json!({ "schemaVersion": 2, "manifests": [top] });
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index_json).expect("index.json"),
    )
    .unwrap_or_else(|e| panic!("writing index.json: {e}"));
    run_ok(
        Command::new("tar")
            .args([
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "-C",
            ])
            .arg(&layout)
            .arg("-cf")
            .arg(archive)
            .args(["oci-layout", "index.json", "blobs"]),
        "making a test image's OCI archive",
    );
    (digest, target)
}

impl TestAddons {
    /// The test artifacts, every add-on image's archive and every CNI manifest, in one new directory.
    pub fn build(artifacts: &TestArtifacts) -> TestAddons {
        require_tool("tar", "tar");
        require_tool("gzip", "gzip");
        let dir = tempfile::Builder::new()
            .prefix("ballast-source-")
            .tempdir_in(cache_dir())
            .unwrap_or_else(|e| panic!("cannot make a source dir: {e}"));
        for a in &artifacts.artifacts {
            let from = artifacts.dir.join(&a.file);
            let to = dir.path().join(&a.file);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).unwrap_or_else(|e| {
                    panic!("copying {} to {}: {e}", from.display(), to.display())
                });
            }
        }
        let work = tempfile::tempdir().expect("tempdir");
        let release = real_release();
        let mut images = Vec::new();
        let mut manifests = Vec::new();
        let mut addons = Vec::new();
        for (addon, pins) in &release.addons {
            addons.push((addon.clone(), pins.version.clone()));
            for (name, image) in &pins.images {
                let indexed = addon != "kube-proxy";
                let reference = image.reference.clone();
                let file = format!("{}.oci.tar", reference.replace(['/', ':'], "_"));
                let (digest, target) =
                    oci_archive(work.path(), &dir.path().join(&file), &reference, indexed);
                images.push(TestImage {
                    addon: addon.clone(),
                    name: name.clone(),
                    indexed,
                    unpinned_reason: image.reason.clone(),
                    reference,
                    digest,
                    target,
                    file,
                });
            }
            if pins.manifest.is_some() {
                let file = format!("{addon}.yaml");
                let text =
                    format!("# A stand-in for {addon}'s manifest, made by tests/src/image.rs.\n");
                std::fs::write(dir.path().join(&file), &text)
                    .unwrap_or_else(|e| panic!("writing {file}: {e}"));
                manifests.push((addon.clone(), file, sha256_str(&text)));
            }
        }
        TestAddons {
            dir,
            images,
            manifests,
            addons,
        }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The test manifest with every component pinned and the real release's add-ons; `digest_of` gives each
    /// image's pin (`sha256:...`, to test a wrong one, or `unpinned`) and `kind_of` its `digestKind`.
    pub fn manifest_with(
        &self,
        artifacts: &TestArtifacts,
        digest_of: &dyn Fn(&TestImage) -> String,
        kind_of: &dyn Fn(&TestImage) -> &'static str,
    ) -> String {
        let mut text = artifacts.pinned_manifest();
        text.push_str("    addons:\n");
        for (addon, version) in &self.addons {
            text.push_str(&format!("      {addon}:\n        version: \"{version}\"\n"));
            if let Some((_, file, sha)) = self.manifests.iter().find(|(cni, _, _)| cni == addon) {
                text.push_str(&format!(
                    "        manifest:\n          url: https://artifacts.invalid/ballast-test/{file}\n          \
                     sha256: {sha}\n{}          format: yaml\n",
                    test_provenance(10, sha, file)
                ));
            }
            text.push_str("        images:\n");
            for image in self.images.iter().filter(|i| &i.addon == addon) {
                let digest = digest_of(image);
                text.push_str(&format!(
                    "          {}:\n            reference: {}\n            digest: {digest}\n",
                    image.name, image.reference,
                ));
                if digest != "unpinned" {
                    text.push_str(&format!("            digestKind: {}\n", kind_of(image)));
                }
                text.push_str(&test_provenance(12, &digest, &image.file));
            }
        }
        text
    }

    /// The test manifest with `digest_of`'s pins, each with its true kind.
    pub fn manifest(
        &self,
        artifacts: &TestArtifacts,
        digest_of: &dyn Fn(&TestImage) -> String,
    ) -> String {
        self.manifest_with(artifacts, digest_of, &|i| {
            if i.indexed {
                "index"
            } else {
                "manifest"
            }
        })
    }

    /// The manifest with every image pinned by its stand-in's digest, also those the real manifest leaves
    /// unpinned: what a bake looks like once images/pin.sh has pinned them.
    pub fn pinned_manifest(&self, artifacts: &TestArtifacts) -> String {
        self.manifest(artifacts, &|i| format!("sha256:{}", i.digest))
    }

    /// The manifest as the real one pins it: what the real manifest leaves unpinned stays `unpinned`, every
    /// other image is pinned by its stand-in's digest (the stand-ins standing in for the real images, which
    /// cannot be fetched here).
    pub fn real_pins_manifest(&self, artifacts: &TestArtifacts) -> String {
        self.manifest(artifacts, &|i| match i.unpinned_reason {
            Some(_) => "unpinned".to_string(),
            None => format!("sha256:{}", i.digest),
        })
    }
}

/// A containerd the test starts itself (the host's, Debian's package) on a root of its choosing, with its own
/// state and socket in a temp dir; stopped by its PID on drop. The independent reader of what install.sh baked.
pub struct Containerd {
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// The `ctr` that talks to it.
    ctr: PathBuf,
}

impl Containerd {
    pub fn start(root: &Path) -> Containerd {
        require_tool("containerd", "containerd");
        require_tool("ctr", "containerd");
        Containerd::start_from(root, Path::new("containerd"), PathBuf::from("ctr"), None)
    }

    /// A containerd of the programs in `bin` (`containerd`, `ctr`): the one built here (`tools/build-go`).
    pub fn start_built(root: &Path, bin: &Path) -> Containerd {
        for program in ["containerd", "ctr"] {
            assert!(
                bin.join(program).is_file(),
                "{} is missing: run tools/install-deps (or tools/build-go)",
                bin.join(program).display()
            );
        }
        Containerd::start_from(root, &bin.join("containerd"), bin.join("ctr"), None)
    }

    /// A built containerd that can run containers: its shim (beside it in `bin`) and the runc in `runc_bin` first
    /// on its PATH, as a node's are.
    pub fn start_built_with_runc(root: &Path, bin: &Path, runc_bin: &Path) -> Containerd {
        for program in [
            bin.join("containerd"),
            bin.join("ctr"),
            bin.join("containerd-shim-runc-v2"),
            runc_bin.join("runc"),
        ] {
            assert!(
                program.is_file(),
                "{} is missing: run tools/install-deps (or tools/build-go)",
                program.display()
            );
        }
        let path = std::env::join_paths(
            [bin.to_path_buf(), runc_bin.to_path_buf()]
                .into_iter()
                .chain(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                )),
        )
        .expect("a PATH");
        Containerd::start_from(root, &bin.join("containerd"), bin.join("ctr"), Some(path))
    }

    fn start_from(
        root: &Path,
        containerd: &Path,
        ctr: PathBuf,
        path: Option<std::ffi::OsString>,
    ) -> Containerd {
        let dir = tempfile::Builder::new()
            .prefix("ballast-ctrd-")
            .tempdir_in("/tmp")
            .expect("tempdir");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            "version = 2\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\", \"io.containerd.internal.v1.opt\"]\n",
        )
        .expect("containerd config");
        let log = std::fs::File::create(dir.path().join("containerd.log")).expect("log");
        let mut command = Command::new(containerd);
        if let Some(path) = path {
            command.env("PATH", path);
        }
        let child = command
            .arg("--config")
            .arg(&config)
            .arg("--root")
            .arg(root)
            .arg("--state")
            .arg(dir.path().join("state"))
            .arg("--address")
            .arg(dir.path().join("containerd.sock"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start containerd: {e}"));
        let containerd = Containerd { child, dir, ctr };
        let started = Instant::now();
        while !containerd.ctr(&["version"]).status.success() {
            assert!(
                started.elapsed().as_secs() < 30,
                "containerd did not come up in 30 s: {}",
                std::fs::read_to_string(containerd.dir.path().join("containerd.log"))
                    .unwrap_or_default()
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        containerd
    }

    /// `ctr --address ... -n k8s.io ARGS`.
    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new(&self.ctr)
            .arg("--address")
            .arg(self.dir.path().join("containerd.sock"))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run ctr: {e}"))
    }

    /// The images in namespace k8s.io: name -> target digest (`sha256:...`).
    pub fn images(&self) -> BTreeMap<String, String> {
        let out = run_ok(
            Command::new(&self.ctr)
                .arg("--address")
                .arg(self.dir.path().join("containerd.sock"))
                .args(["--namespace", "k8s.io", "images", "ls"]),
            "ctr images ls",
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let name = fields.next()?;
                let digest = fields.nth(1)?;
                Some((name.to_string(), digest.to_string()))
            })
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // SIGTERM, so it closes its database; then reap it.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}
