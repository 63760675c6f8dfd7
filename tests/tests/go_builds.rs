//! The programs built here from their Go modules (`tools/build-go`): Kubernetes' (`go/kube/<minor>`) and the node's
//! components (`go/<component>`: etcd, containerd, runc, the CNI plugins, the AWS cloud controller manager,
//! CoreDNS, the pause program, which is C, and crictl, a module per release: `go/crictl/<minor>`). Each answers with
//! the version `images/manifest.yaml` pins for every release the local cloud runs, run by its own name; agnhost,
//! the tests' workload, answers with the version its Kubernetes source names.
//!
//! `tools/install-deps` builds them (`tools/test` runs it first); this test builds nothing and fails, naming the
//! command, when they are missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use ballast_e2e::go_builds::{built, local_images};
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

/// What `program args` writes (stdout, then stderr), with `env` added to its environment; it must succeed.
fn answer(program: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
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
            let text = answer(&dir.join(program), &["--version"], &[]);
            assert_eq!(text.trim(), format!("Kubernetes {want}"), "{program}");
        }
        let text = answer(&dir.join("kubectl"), &["version", "--client"], &[]);
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

/// Where the manifest pins a component's version in a release.
#[derive(Clone, Copy)]
enum Pin {
    /// `components.<name>.version`: installed on the AMI.
    Component(&'static str),
    /// `addons.<name>.version`: an add-on's image.
    Addon(&'static str),
    /// No release pins it: a workload of the local cloud's tests, whose version is a file of the Kubernetes
    /// source its module builds from (`test/images/agnhost/VERSION`).
    Source(&'static str),
}

/// The text of `path` in the `k8s.io/kubernetes` module that `go/<module>` requires, from Go's module cache.
fn kubernetes_source_file(module: &str, path: &str) -> String {
    let dir = repository().join("go").join(module);
    let out = Command::new("go")
        .args(["mod", "download", "-json", "k8s.io/kubernetes"])
        .env("GOFLAGS", "-mod=readonly")
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("running go in {}: {e}", dir.display()));
    assert!(
        out.status.success(),
        "go mod download in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("go's JSON");
    let source = Path::new(info["Dir"].as_str().expect("the module's Dir")).join(path);
    std::fs::read_to_string(&source)
        .unwrap_or_else(|e| panic!("{}: {e}", source.display()))
        .trim()
        .to_string()
}

/// A program of a component module: its arguments, and the line it answers with `{}` for the version (`v` prefixed
/// where the program writes one).
struct Program {
    name: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    answer: &'static str,
}

const fn program(
    name: &'static str,
    args: &'static [&'static str],
    answer: &'static str,
) -> Program {
    Program {
        name,
        args,
        env: &[],
        answer,
    }
}

/// Every component module, the manifest entry whose version it must build, and what each program answers.
fn components() -> Vec<(&'static str, Pin, Vec<Program>)> {
    // A CNI plugin run without CNI_COMMAND says what it is, on stderr, and succeeds.
    let cni = |name: &'static str, answer: &'static str| Program {
        name,
        args: &[],
        env: &[("CNI_COMMAND", "")],
        answer,
    };
    vec![
        (
            "etcd",
            Pin::Component("etcd"),
            vec![
                program("etcd", &["--version"], "etcd Version: {}"),
                program("etcdctl", &["version"], "etcdctl version: {}"),
                program("etcdutl", &["version"], "etcdutl version: {}"),
            ],
        ),
        (
            "containerd",
            Pin::Component("containerd"),
            vec![
                program(
                    "containerd",
                    &["--version"],
                    "containerd github.com/containerd/containerd/v2 v{} ",
                ),
                program(
                    "ctr",
                    &["--version"],
                    "ctr github.com/containerd/containerd/v2 v{}",
                ),
                program("containerd-shim-runc-v2", &["-v"], "  Version:  v{}"),
            ],
        ),
        (
            "runc",
            Pin::Component("runc"),
            vec![program("runc", &["--version"], "runc version {}")],
        ),
        (
            "cni-plugins",
            Pin::Component("cni-plugins"),
            vec![
                cni("bridge", "CNI bridge plugin v{}"),
                cni("host-local", "CNI host-local plugin v{}"),
                cni("loopback", "CNI loopback plugin v{}"),
                cni("portmap", "CNI portmap plugin v{}"),
                cni("bandwidth", "CNI bandwidth plugin v{}"),
                cni("ptp", "CNI ptp plugin v{}"),
            ],
        ),
        (
            "cloud-provider-aws",
            Pin::Addon("aws-cloud-controller-manager"),
            vec![program(
                "aws-cloud-controller-manager",
                &["--version"],
                "Kubernetes v{}",
            )],
        ),
        (
            "coredns",
            Pin::Addon("coredns"),
            vec![program("coredns", &["-version"], "CoreDNS-{}")],
        ),
        (
            "pause",
            Pin::Addon("pause"),
            vec![program("pause", &["-v"], "pause.c v{}")],
        ),
        (
            "agnhost",
            Pin::Source("test/images/agnhost/VERSION"),
            vec![program("agnhost", &["--version"], "app version {}")],
        ),
        (
            "crictl/1.36",
            Pin::Component("crictl"),
            vec![program("crictl", &["--version"], "crictl version v{}")],
        ),
        (
            "crictl/1.37",
            Pin::Component("crictl"),
            vec![program("crictl", &["--version"], "crictl version v{}")],
        ),
    ]
}

/// Every component module under go/: `go/<component>` and, for a component whose version differs by release,
/// `go/<component>/<minor>` (each holding a build.txt).
fn component_modules() -> Vec<String> {
    let go = repository().join("go");
    let mut modules = Vec::new();
    for entry in std::fs::read_dir(&go).expect("go/").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.path().join("build.txt").is_file() {
            modules.push(name.clone());
        }
        if let Ok(inner) = std::fs::read_dir(entry.path()) {
            for minor in inner.flatten() {
                if minor.path().join("build.txt").is_file() {
                    modules.push(format!("{name}/{}", minor.file_name().to_string_lossy()));
                }
            }
        }
    }
    modules.sort();
    modules
}

#[test]
fn every_component_answers_the_version_every_local_cloud_release_pins() {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let minors = minors();
    let modules = component_modules();
    let components = components();
    // Every module is checked here, and every component checked has a module.
    let mut named: Vec<&str> = components.iter().map(|(module, _, _)| *module).collect();
    let mut found: Vec<&str> = modules.iter().map(String::as_str).collect();
    named.sort_unstable();
    found.sort_unstable();
    assert_eq!(
        named, found,
        "go/*/build.txt and this test's components differ"
    );

    for (module, pin, programs) in components {
        // The version every release the local cloud runs pins (or the one release a go/<component>/<minor>
        // module is for): one, which is what the module builds.
        let for_minor = module.split_once('/').map(|(_, minor)| minor);
        if let Some(minor) = for_minor {
            assert!(
                minors.iter().any(|m| m == minor),
                "go/{module} is for release {minor}, which has no go/kube/{minor}"
            );
        }
        if let Pin::Source(path) = pin {
            let want = kubernetes_source_file(module, path);
            let dir = built(module);
            for program in programs {
                let text = answer(&dir.join(program.name), program.args, program.env);
                let line = program.answer.replace("{}", &want);
                assert_eq!(text.trim(), line, "{} {:?}", program.name, program.args);
            }
            continue;
        }
        let mut versions: Vec<(String, String)> = minors
            .iter()
            .filter(|minor| for_minor.is_none_or(|m| m == minor.as_str()))
            .map(|minor| {
                let release = &manifest.releases[minor];
                let version = match pin {
                    Pin::Component(name) => release.components.get(name).map(|c| c.version.clone()),
                    Pin::Addon(name) => release.addons.get(name).map(|a| a.version.clone()),
                    Pin::Source(_) => unreachable!("handled above"),
                };
                let version = version.unwrap_or_else(|| panic!("release {minor} pins no {module}"));
                (minor.clone(), version)
            })
            .collect();
        versions.dedup_by(|a, b| a.1 == b.1);
        assert_eq!(
            versions.len(),
            1,
            "go/{module} builds one version, but the local cloud's releases pin {versions:?}"
        );
        let want = &versions[0].1;
        let dir = built(module);
        assert!(
            dir.join(".built").is_file(),
            "{module} is not built ({} is missing): run tools/install-deps (or tools/build-go)",
            dir.display()
        );
        for program in programs {
            let text = answer(&dir.join(program.name), program.args, program.env);
            let line = program.answer.replace("{}", want);
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&line) || l == line.trim_end()),
                "{} {:?} does not answer {line:?}:\n{text}",
                program.name,
                program.args
            );
        }
    }
}

/// The images the local cloud's nodes run as containers, named as the manifest names them (the AMI's pins by tag),
/// for every release it runs: the static pods and kube-proxy of each, the cloud controller manager, CoreDNS, pause.
fn wanted_images(manifest: &ComponentManifest) -> std::collections::BTreeSet<String> {
    let mut wanted = std::collections::BTreeSet::new();
    for minor in minors() {
        let release = &manifest.releases[&minor];
        for program in [
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
        ] {
            wanted.insert(format!("registry.k8s.io/{program}:v{}", release.kubernetes));
        }
        for (addon, image) in [
            ("kube-proxy", "kube-proxy"),
            (
                "aws-cloud-controller-manager",
                "aws-cloud-controller-manager",
            ),
            ("coredns", "coredns"),
            ("pause", "pause"),
        ] {
            let reference = &release.addons[addon].images[image].reference;
            wanted.insert(reference.clone());
        }
    }
    // The tests' workload, named as upstream's end-to-end tests name it.
    wanted.insert(format!(
        "registry.k8s.io/e2e-test-images/agnhost:{}",
        kubernetes_source_file("agnhost", "test/images/agnhost/VERSION")
    ));
    wanted
}

#[test]
fn every_image_imports_into_the_built_containerd_with_the_digest_its_manifest_names() {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (dir, images) = local_images();
    let made: std::collections::BTreeSet<String> = images.images.keys().cloned().collect();
    assert_eq!(
        made,
        wanted_images(manifest),
        "images.yaml names other images"
    );

    let root = tempfile::tempdir().expect("a containerd root");
    let containerd = ballast_e2e::image::Containerd::start_built(root.path(), &built("containerd"));
    for image in images.images.values() {
        let archive = dir.join(&image.archive);
        let out = containerd.ctr(&[
            "images",
            "import",
            "--no-unpack",
            &archive.display().to_string(),
        ]);
        assert!(
            out.status.success(),
            "importing {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let held = containerd.images();
    for (reference, image) in &images.images {
        assert_eq!(
            held.get(reference),
            Some(&image.digest),
            "{reference}: containerd holds {held:?}"
        );
    }
    // containerd checked every blob against its digest on import; all of each image's content is there.
    let out = containerd.ctr(&["images", "check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for reference in images.images.keys() {
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().next() == Some(reference.as_str())
                    && l.contains("complete")),
            "{reference} is not complete in containerd: {text}"
        );
    }
}

/// kube-proxy's image runs in the built containerd and runc, and holds the tools kube-proxy runs in each of its
/// modes, working against the kernel: iptables and ip6tables (nft backend) with their save and restore, nft,
/// conntrack and ipset.
#[test]
fn kube_proxys_image_runs_and_holds_the_netfilter_tools_it_needs() {
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (dir, images) = local_images();
    let minor = minors().pop().expect("a go/kube module");
    let release = &manifest.releases[&minor];
    let reference = &release.addons["kube-proxy"].images["kube-proxy"].reference;
    let image = &images.images[reference];

    let root = tempfile::tempdir().expect("a containerd root");
    let containerd = ballast_e2e::image::Containerd::start_built_with_runc(
        root.path(),
        &built("containerd"),
        &built("runc"),
    );
    let archive = dir.join(&image.archive).display().to_string();
    // Unpacked by ctr itself (--local), for this machine's platform: this containerd runs no CRI plugin, which
    // would name the platforms to unpack for.
    let out = containerd.ctr(&[
        "images",
        "import",
        "--local",
        "--platform",
        "linux/amd64",
        "--snapshotter",
        "native",
        &archive,
    ]);
    assert!(
        out.status.success(),
        "importing {archive}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = |n: usize, argv: &[&str]| -> String {
        let id = format!("kube-proxy-tools-{n}");
        let mut args = vec![
            "run",
            "--rm",
            "--privileged",
            "--snapshotter",
            "native",
            reference.as_str(),
            id.as_str(),
        ];
        args.extend_from_slice(argv);
        let out = containerd.ctr(&args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{argv:?} in {reference}: {text}");
        text
    };
    let checks: [(&[&str], &str); 9] = [
        (
            &["kube-proxy", "--version"],
            &format!("Kubernetes v{}", release.kubernetes),
        ),
        (&["iptables", "--version"], "(nf_tables)"),
        (&["ip6tables", "--version"], "(nf_tables)"),
        // In the container's own network namespace: the nat table the kernel holds, read through nf_tables.
        (&["iptables", "-t", "nat", "-L", "-n"], "Chain POSTROUTING"),
        (&["iptables-save", "-t", "filter"], "*filter"),
        (&["ip6tables-save", "-t", "filter"], "*filter"),
        (&["nft", "--version"], "nftables v"),
        (&["conntrack", "--version"], "conntrack v"),
        (&["ipset", "--version"], "ipset v"),
    ];
    for (n, (argv, want)) in checks.iter().enumerate() {
        let text = run(n, argv);
        assert!(
            text.contains(want),
            "{argv:?} in {reference} says {text:?}, not {want:?}"
        );
    }
}
