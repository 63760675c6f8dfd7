//! A machine's runtime spec (runc's config.json), held by a golden file: what namespaces, mounts, capabilities
//! and cgroup a local-cloud machine gets. `BALLAST_BLESS=1` rewrites it.

use std::path::{Path, PathBuf};

use localcloud::machine::spec::{capabilities_of, runtime_spec};
use localcloud::machine::{MachineBind, MachineSpec};

#[test]
fn a_machines_runtime_spec_matches_its_golden_file() {
    let capabilities = capabilities_of("000001fffeffffff").expect("a mask");
    let binds = [MachineBind {
        host: PathBuf::from("/var/lib/ballast-localcloud/volumes/vol-0123456789abcdef0"),
        inside: "/dev/ballast-volume".into(),
        read_only: false,
    }];
    let spec = MachineSpec {
        hostname: "ip-10-0-1-10",
        network: Some(Path::new("/run/netns/ballast-lc1-i-0123456789abcdef0")),
        cgroup: "/ballast/lc1/i-0123456789abcdef0",
        binds: &binds,
    };
    let rendered =
        serde_json::to_string_pretty(&runtime_spec(&spec, &capabilities)).expect("json") + "\n";
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/machine-config.json");
    ballast_testutil::assert_golden(&golden, rendered);
}
