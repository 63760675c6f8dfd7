//! Bakes (once per recipe, nodeup and pins; later runs reuse it) the local cloud's image of a Kubernetes release
//! with `images/install.sh`, from the components and images built here (`tools/build-go`), and prints its root:
//! what `localcloud up --instances machines --machine-image NAME=DIR` boots. `tools/demo` runs it.
//!
//! Run as root: `local-ami MINOR` (e.g. `1.36`). Exits 2 on a usage error; a failed bake panics with
//! install.sh's output.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [minor] = args.as_slice() else {
        eprintln!("usage: local-ami MINOR (a release the local cloud runs, e.g. 1.36)");
        return ExitCode::from(2);
    };
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("local-ami: baking an image mounts and chroots: run it as root");
        return ExitCode::from(2);
    }
    println!("{}", ballast_e2e::local_ami::baked(minor).display());
    ExitCode::SUCCESS
}
