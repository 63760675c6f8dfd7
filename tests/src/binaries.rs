//! The binaries under test (`localcloud`, `nodeup`, `ballast`) and the one shared build that makes them. A leaf
//! of the harness: every module that runs a binary finds it here.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The binaries under test.
#[derive(Debug)]
pub struct Binaries {
    pub localcloud: PathBuf,
    pub nodeup: PathBuf,
    pub ballast: PathBuf,
}

/// The cargo arguments of the one build every tier shares: `tools/test` runs exactly this before the tests, and
/// the harness runs it when no prebuilt binaries are given. One package set and one target set mean one feature
/// set: building `-p localcloud -p nodeup` here and `-p ballast` there unified features differently, so each set
/// compiled the AWS SDK crates again (about 5 minutes each on 2 cores).
pub const SHARED_BUILD_ARGS: [&str; 3] = ["build", "--workspace", "--all-targets"];

/// `localcloud`, `nodeup` and `ballast`, found once per test process.
///
/// `BALLAST_BIN_DIR` names a directory holding all three (`tools/test` builds the workspace once and sets it;
/// prebuilt release binaries work too). Without it, the harness runs the shared build ([`SHARED_BUILD_ARGS`]) into
/// the target directory and profile this test binary was built in: a no-op when fresh, which keeps tests from
/// running stale binaries. Its output shows in the test output, e.g. "Blocking waiting for file lock".
pub fn binaries() -> &'static Binaries {
    static BINS: OnceLock<Binaries> = OnceLock::new();
    BINS.get_or_init(|| {
        let dir = match std::env::var_os("BALLAST_BIN_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => build_binaries(),
        };
        let bins = Binaries {
            localcloud: dir.join("localcloud"),
            nodeup: dir.join("nodeup"),
            ballast: dir.join("ballast"),
        };
        for bin in [&bins.localcloud, &bins.nodeup, &bins.ballast] {
            assert!(
                bin.is_file(),
                "{} does not exist (BALLAST_BIN_DIR must hold localcloud, nodeup and ballast)",
                bin.display()
            );
        }
        bins
    })
}

fn build_binaries() -> PathBuf {
    // A test executable is TARGET/PROFILE/deps/NAME-HASH; a benchmark binary is TARGET/PROFILE/NAME.
    let exe = std::env::current_exe().expect("the test executable's path");
    let parent = exe.parent().expect("the executable's directory");
    let profile_dir = if parent.file_name().is_some_and(|name| name == "deps") {
        parent.parent().expect("TARGET/PROFILE").to_owned()
    } else {
        parent.to_owned()
    };
    shared_build(&profile_dir);
    profile_dir
}

/// The shared build into `profile_dir` (`TARGET/PROFILE`), with that profile.
fn shared_build(profile_dir: &Path) {
    let target_dir = profile_dir.parent().expect("TARGET/PROFILE has a parent");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a UTF-8 profile directory name");
    let profile = if profile == "debug" { "dev" } else { profile };
    let mut command = Command::new(env!("CARGO"));
    // What cargo sets for this test process only (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...): left in, they reach
    // build scripts that watch them (ring's `rerun-if-env-changed=CARGO_PKG_NAME`), and this build and the
    // operator's `cargo build` would each rebuild the whole dependency tree after the other.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key.as_ref(),
                "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "OUT_DIR"
            )
        {
            command.env_remove(key.as_ref());
        }
    }
    let status = command
        .args(SHARED_BUILD_ARGS)
        .args(["--profile", profile, "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .expect("running cargo build");
    assert!(
        status.success(),
        "cargo {} failed: {status}",
        SHARED_BUILD_ARGS.join(" ")
    );
}

/// For benchmark binaries: the binaries of this profile (the shared build next to the running benchmark unless
/// `BALLAST_BIN_DIR` is set), with `BALLAST_BIN_DIR` pointing at them; returns the path of `ballast`.
pub fn bench_binaries() -> PathBuf {
    let bins = binaries();
    let dir = bins.ballast.parent().expect("the binaries' directory");
    std::env::set_var("BALLAST_BIN_DIR", dir);
    bins.ballast.clone()
}
