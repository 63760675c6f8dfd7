//! The AMI recipe (`images/`), run for real: `install.sh` and `verify.sh` in a Debian 12 root filesystem made by
//! debootstrap (cached), through chroot, from a local artifact directory (Debian's containerd, runc, CNI plugins
//! and etcd; generated stand-ins for the kubelet, kubectl and crictl, which cannot be fetched here).
//!
//! Needs root, debootstrap, dpkg-deb, unshare and a reachable Debian mirror on a cold cache: without them these
//! tests fail, saying what to install; they never skip.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use ballast_e2e::image::{
    nodeup_binary, output_text as text, require_root, sha256_file, snapshot_diff, test_artifacts,
    Containerd, Rootfs, TestAddons, TEST_KUBERNETES, TEST_MINOR,
};
use ballast_state::components::{ComponentManifest, ImageComponents, ImageMismatch};

fn images() -> std::path::PathBuf {
    ballast_e2e::image::images_dir()
}

/// install.sh inside the chroot, from the test artifacts, with `manifest` as the manifest.
fn install_in(rootfs: &Rootfs, manifest: &Path) -> Output {
    install_in_from(rootfs, manifest, &test_artifacts().dir)
}

/// install.sh inside the chroot, from the source directory `source`.
fn install_in_from(rootfs: &Rootfs, manifest: &Path, source: &Path) -> Output {
    rootfs.install(manifest, source, TEST_KUBERNETES, None)
}

fn verify_in(rootfs: &Rootfs, manifest: &Path) -> Output {
    rootfs.verify(manifest, TEST_MINOR)
}

/// What a build instance leaves behind, planted so the clean-up has something to clean.
fn plant_build_leftovers(rootfs: &Rootfs) {
    rootfs.write(
        "/etc/ssh/ssh_host_ed25519_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nbuild\n",
    );
    rootfs.write(
        "/etc/ssh/ssh_host_ed25519_key.pub",
        "ssh-ed25519 AAAA build\n",
    );
    rootfs.write("/etc/machine-id", "0123456789abcdef0123456789abcdef\n");
    rootfs.write(
        "/var/lib/dbus/machine-id",
        "0123456789abcdef0123456789abcdef\n",
    );
    rootfs.write(
        "/var/lib/cloud/instances/i-0123456789abcdef0/user-data.txt",
        "#!/bin/sh\n",
    );
    rootfs.write("/var/lib/cloud/data/instance-id", "i-0123456789abcdef0\n");
    rootfs.write(
        "/var/log/cloud-init.log",
        "cloud-init ran on the build instance\n",
    );
    rootfs.write("/var/log/syslog.1.gz", "old\n");
    rootfs.write(
        "/var/log/journal/0123456789abcdef/system.journal",
        "journal\n",
    );
    rootfs.write("/root/.bash_history", "sudo cat /etc/shadow\n");
    rootfs.write("/var/lib/systemd/random-seed", "seed\n");
}

fn write_manifest(dir: &Path, text: &str) -> std::path::PathBuf {
    // Both readers must accept it: Rust's here, the shell's in install.sh.
    if let Err(e) = ComponentManifest::parse(text, "the test manifest") {
        panic!("{e}\n{text}");
    }
    let path = dir.join("manifest.yaml");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing the test manifest: {e}"));
    path
}

#[test]
fn install_then_verify_then_verify_catches_a_planted_host_key() {
    require_root();
    let started = Instant::now();
    let artifacts = test_artifacts();
    nodeup_binary();
    let rootfs = Rootfs::fresh();
    let ready = started.elapsed();
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest_text = artifacts.pinned_manifest();
    let manifest = write_manifest(tmp.path(), &manifest_text);
    plant_build_leftovers(&rootfs);

    let t = Instant::now();
    let install = install_in(&rootfs, &manifest);
    let install_time = t.elapsed();
    assert!(
        install.status.success(),
        "install.sh failed: {}",
        text(&install)
    );

    let t = Instant::now();
    let verify = verify_in(&rootfs, &manifest);
    let verify_time = t.elapsed();
    assert!(
        verify.status.success(),
        "verify.sh failed on a fresh bake: {}",
        text(&verify)
    );
    eprintln!(
        "image: rootfs + artifacts ready in {:.1} s, install.sh {:.1} s, verify.sh {:.1} s",
        ready.as_secs_f64(),
        install_time.as_secs_f64(),
        verify_time.as_secs_f64()
    );

    // What install.sh was asked to do, seen from outside the chroot.
    for unit in ["nodeup.service", "containerd.service", "kubelet.service"] {
        let link = rootfs.join(&format!(
            "/etc/systemd/system/multi-user.target.wants/{unit}"
        ));
        assert!(
            link.is_symlink(),
            "{unit} is not enabled: no {}",
            link.display()
        );
    }
    assert_eq!(
        sha256_file(&rootfs.join("/usr/local/bin/nodeup")),
        sha256_file(nodeup_binary())
    );
    for gone in [
        "/etc/ssh/ssh_host_ed25519_key",
        "/etc/ssh/ssh_host_ed25519_key.pub",
        "/var/lib/dbus/machine-id",
        "/var/lib/cloud/instances",
        "/var/lib/cloud/data",
        "/var/log/syslog.1.gz",
        "/var/log/journal/0123456789abcdef",
        "/root/.bash_history",
        "/var/lib/systemd/random-seed",
    ] {
        assert!(!rootfs.join(gone).exists(), "{gone} survived the clean-up");
    }
    let machine_id = std::fs::metadata(rootfs.join("/etc/machine-id")).expect("machine-id");
    assert_eq!(machine_id.len(), 0, "machine-id is not empty");
    let log = std::fs::metadata(rootfs.join("/var/log/cloud-init.log")).expect("log kept, emptied");
    assert_eq!(log.len(), 0);
    let leftovers: Vec<_> = std::fs::read_dir(rootfs.join("/var/tmp"))
        .expect("var/tmp")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        leftovers.is_empty(),
        "install.sh left {leftovers:?} in /var/tmp"
    );

    // The record nodeup will read: the Rust reader accepts what the shell wrote, and it matches the manifest.
    let record_text =
        std::fs::read_to_string(rootfs.join("/etc/ballast/components.yaml")).expect("the record");
    let record = ImageComponents::parse(&record_text, "/etc/ballast/components.yaml")
        .unwrap_or_else(|e| panic!("{e}\n{record_text}"));
    let test_manifest =
        ComponentManifest::parse(&manifest_text, "the test manifest").expect("test manifest");
    let (_, release) = test_manifest
        .release_exact(TEST_KUBERNETES)
        .expect("release");
    assert_eq!(record.mismatches(release), vec![], "{record_text}");
    assert_eq!(
        record.components["kubelet"].files["/usr/local/bin/kubelet"],
        artifacts
            .artifacts
            .iter()
            .find(|a| a.name == "kubelet")
            .map(|a| a.sha256.clone())
            .unwrap_or_default()
    );
    // Against Ballast's real manifest this image is wrong (Debian's containerd is not the pinned one), and
    // nodeup would say so.
    let real = ComponentManifest::embedded().expect("the embedded manifest");
    let (_, wanted) = real.release_for_minor(TEST_KUBERNETES).expect("1.33");
    let mismatches = record.mismatches(wanted);
    assert!(
        mismatches
            .iter()
            .any(|m| matches!(m, ImageMismatch::Version { name, .. } if name == "containerd")),
        "{mismatches:?}"
    );

    // Verify catches what must not be in an image, and lists every problem.
    rootfs.write(
        "/etc/ssh/ssh_host_rsa_key",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nplanted\n",
    );
    rootfs.write("/etc/machine-id", "fedcba9876543210fedcba9876543210\n");
    let kubelet = rootfs.join("/usr/local/bin/kubelet");
    let mut bytes = std::fs::read(&kubelet).expect("kubelet");
    bytes.extend_from_slice(b"# tampered\n");
    std::fs::write(&kubelet, bytes).expect("tamper");
    // A kernel setting the kubelet's protectKernelDefaults needs, changed: the kubelet would not start.
    let sysctl = rootfs.join("/etc/sysctl.d/99-ballast-kubernetes.conf");
    let settings = std::fs::read_to_string(&sysctl).expect("the sysctl file");
    assert!(settings.contains("\nkernel.panic = 10\n"), "{settings}");
    std::fs::write(
        &sysctl,
        settings.replace("\nkernel.panic = 10\n", "\nkernel.panic = 0\n"),
    )
    .expect("change a sysctl");
    let verify = verify_in(&rootfs, &manifest);
    let report = text(&verify);
    assert_eq!(verify.status.code(), Some(1), "{report}");
    assert!(
        report.contains("SSH host key /etc/ssh/ssh_host_rsa_key is in the image"),
        "{report}"
    );
    assert!(report.contains("/etc/machine-id is not empty"), "{report}");
    assert!(
        report.contains("kubelet: /usr/local/bin/kubelet has sha256"),
        "{report}"
    );
    assert!(
        report.contains(
            "sysctl kernel.panic = 10 is not set in /etc/sysctl.d/99-ballast-kubernetes.conf"
        ),
        "{report}"
    );
    assert!(report.contains("(4 problem(s))"), "{report}");
}

#[test]
fn a_wrong_sha256_stops_the_install_with_nothing_installed() {
    require_root();
    let artifacts = test_artifacts();
    nodeup_binary();
    let rootfs = Rootfs::fresh();
    let tmp = tempfile::tempdir().expect("tempdir");
    let wrong = "0".repeat(64);
    let manifest = write_manifest(
        tmp.path(),
        &artifacts.manifest(&|a| {
            if a.name == "kubelet" {
                wrong.clone()
            } else {
                a.sha256.clone()
            }
        }),
    );
    let kubelet_sha = artifacts
        .artifacts
        .iter()
        .find(|a| a.name == "kubelet")
        .map(|a| a.sha256.clone())
        .unwrap_or_default();

    let before = rootfs.snapshot();
    let install = install_in(&rootfs, &manifest);
    let report = text(&install);
    assert_eq!(install.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "kubelet {TEST_KUBERNETES}: sha256 mismatch for kubelet (from /run/ballast/artifacts/kubelet): \
             expected {wrong}, got {kubelet_sha}"
        )),
        "{report}"
    );
    assert!(report.contains("nothing was installed"), "{report}");
    let after = rootfs.snapshot();
    let diff = snapshot_diff(&before, &after);
    assert!(
        diff.is_empty(),
        "install.sh changed the image although it refused: {diff:#?}"
    );
}

fn install_sh(args: &[&str]) -> Output {
    Command::new("sh")
        .arg(images().join("install.sh"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run install.sh")
}

#[test]
fn the_real_manifest_is_refused_naming_exactly_what_is_unpinned_and_bakes_once_it_is_pinned() {
    // The real release's add-ons, every image that a public record pins standing in as a test archive under
    // its real reference, and what the real manifest leaves unpinned left unpinned: install.sh refuses, naming
    // exactly those, and writes nothing.
    require_root();
    let artifacts = test_artifacts();
    let addons = TestAddons::build(artifacts);
    let real = ComponentManifest::embedded().expect("the embedded manifest");
    let release = &real.releases[TEST_MINOR];
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &addons.real_pins_manifest(artifacts));
    let root = bare_root(tmp.path());
    let output = install_outside(&manifest, addons.dir(), &root);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    let problems: std::collections::BTreeSet<String> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("  - "))
        .map(str::to_string)
        .collect();
    let mut expected = std::collections::BTreeSet::new();
    for (name, addon) in &release.addons {
        for image in addon.images.values() {
            if image.pinned_reference().is_none() {
                expected.insert(format!(
                    "add-on {name}: image {} digest is unpinned: refusing an unpinned image (no public record \
                     pins it, the manifest's reason says why; images/pin.sh pins it on a machine with internet)",
                    image.reference
                ));
            }
        }
        if addon
            .manifest
            .as_ref()
            .is_some_and(|m| m.sha256.pinned().is_none())
        {
            panic!(
                "{name}'s manifest is unpinned in the real manifest: this test expects images only"
            );
        }
    }
    for (name, component) in &release.components {
        assert!(component.sha256.pinned().is_some(), "{name} is unpinned");
    }
    // Exactly the real manifest's unpinned images (Calico's and the VPC CNI's three each, the Pod Identity
    // Webhook's one), nothing else.
    assert_eq!(expected.len(), 7, "{expected:#?}");
    assert_eq!(problems, expected, "{report}");
    assert!(report.contains("nothing was installed"), "{report}");
    assert!(
        written(&root).is_empty(),
        "install.sh wrote into the root: {:?}",
        written(&root)
    );

    // The same with test archives standing in for those as well (what images/pin.sh makes of them): the bake
    // completes, and verify.sh passes.
    let manifest = write_manifest(tmp.path(), &addons.pinned_manifest(artifacts));
    let rootfs = Rootfs::fresh();
    let install = install_in_from(&rootfs, &manifest, addons.dir());
    assert!(
        install.status.success(),
        "install.sh failed: {}",
        text(&install)
    );
    let verify = verify_in(&rootfs, &manifest);
    assert!(
        verify.status.success(),
        "verify.sh failed: {}",
        text(&verify)
    );
}

#[test]
fn an_index_pinned_as_a_manifest_or_the_reverse_is_refused() {
    // kube-proxy's stand-in is a single manifest: pinned with digestKind index (what a manifest list's digest
    // would say), it is refused, as is coredns's index pinned as a manifest, naming the kinds.
    require_root();
    let artifacts = test_artifacts();
    let addons = TestAddons::build(artifacts);
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(
        tmp.path(),
        &addons.manifest_with(artifacts, &|i| format!("sha256:{}", i.digest), &|i| match (
            i.addon.as_str(),
            i.indexed,
        ) {
            ("kube-proxy", _) => "index",
            ("coredns", _) => "manifest",
            (_, true) => "index",
            (_, false) => "manifest",
        }),
    );
    let root = bare_root(tmp.path());
    let output = install_outside(&manifest, addons.dir(), &root);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    for (addon, pinned, actual) in [
        (
            "kube-proxy",
            "index",
            "application/vnd.oci.image.manifest.v1+json",
        ),
        (
            "coredns",
            "manifest",
            "application/vnd.oci.image.index.v1+json",
        ),
    ] {
        let image = addons
            .images
            .iter()
            .find(|i| i.addon == addon)
            .expect(addon);
        assert!(
            report.contains(&format!(
                "add-on {addon}: image {}: the manifest pins sha256:{} as an image {pinned} (digestKind), but it \
                 names {actual}: refusing it",
                image.reference, image.digest
            )),
            "{report}"
        );
    }
    assert_eq!(report.matches("  - ").count(), 2, "{report}");
    assert!(written(&root).is_empty(), "install.sh wrote into the root");
}

/// install.sh's plan (its awk reader) and Rust's reading of the same manifest, in one format.
fn rust_plan(manifest: &ComponentManifest, minor: &str) -> Vec<String> {
    let release = &manifest.releases[minor];
    let mut lines = vec![format!("kubernetes|{minor}|{}", release.kubernetes)];
    for (name, c) in &release.components {
        lines.push(format!(
            "{name}|{}|{}|{}|{}|{}",
            c.version,
            c.url,
            c.sha256,
            match c.archive {
                ballast_state::components::Archive::Binary => "binary",
                ballast_state::components::Archive::TarGz => "tar.gz",
            },
            c.version_command.as_deref().unwrap_or("")
        ));
        for (from, to) in &c.files {
            lines.push(format!("file|{name}|{from}|{to}"));
        }
    }
    for (name, addon) in &release.addons {
        for (image, pinned) in &addon.images {
            lines.push(format!(
                "addon-image|{name}|{image}|{}|{}|{}",
                pinned.reference,
                pinned.digest,
                pinned.digest_kind.map_or("", |k| k.as_str())
            ));
        }
        if let Some(m) = &addon.manifest {
            let format = match m.format {
                ballast_state::components::ManifestFormat::Yaml => "yaml",
                ballast_state::components::ManifestFormat::HelmChart => "helm-chart",
            };
            lines.push(format!(
                "addon-manifest|{name}|{}|{}|{format}",
                m.url, m.sha256
            ));
        }
    }
    lines.sort();
    lines
}

fn shell_plan(manifest: &Path, minor: &str) -> Vec<String> {
    let output = install_sh(&[
        "--manifest",
        &manifest.display().to_string(),
        "--kubernetes-version",
        minor,
        "--print-plan",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
fn install_sh_reads_the_manifest_as_rust_does() {
    let real = ComponentManifest::embedded().expect("the embedded manifest");
    for minor in real.minors() {
        assert_eq!(
            shell_plan(&images().join("manifest.yaml"), &minor),
            rust_plan(real, &minor),
            "install.sh and state/src/components.rs disagree about images/manifest.yaml {minor}"
        );
    }
    // A manifest with quoted values, comments and a pinned hash reads the same too.
    let tmp = tempfile::tempdir().expect("tempdir");
    let quoted = ballast_state::components::MANIFEST_YAML
        .replacen(
            "    kubernetes: 1.33.4",
            "    kubernetes: \"1.33.4\"   # quoted, commented",
            1,
        )
        .replacen(
            "        sha256: 316d510a0428276d931023f72c09fdff1a6ba81d6cc36f31805fea6a3c88f515",
            "        sha256: '316d510a0428276d931023f72c09fdff1a6ba81d6cc36f31805fea6a3c88f515'",
            1,
        );
    let manifest = write_manifest(tmp.path(), &quoted);
    let parsed = ComponentManifest::parse(&quoted, "test").expect("parse");
    assert_eq!(shell_plan(&manifest, "1.33"), rust_plan(&parsed, "1.33"));
}

#[test]
fn an_unknown_kubernetes_version_lists_the_known_ones() {
    let output = install_sh(&["--kubernetes-version", "1.29.3", "--print-plan"]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains("no components are pinned for Kubernetes 1.29"),
        "{report}"
    );
    // Every release the manifest pins, oldest first (1.32 1.33 1.34 today).
    let known = ComponentManifest::embedded()
        .expect("the embedded manifest")
        .minors()
        .join(" ");
    assert!(report.contains(&format!("it pins: {known}")), "{report}");

    let output = install_sh(&["--kubernetes-version", "1.33.1", "--print-plan"]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(report.contains("pins 1.33.4 for 1.33"), "{report}");
}

#[test]
fn the_shell_reader_refuses_yaml_it_cannot_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("manifest.yaml");
    let flow = ballast_state::components::MANIFEST_YAML.replacen(
        "        files:\n          kubelet: /usr/local/bin/kubelet",
        "        files: {kubelet: /usr/local/bin/kubelet}",
        1,
    );
    std::fs::write(&path, &flow).expect("write");
    let output = install_sh(&[
        "--manifest",
        &path.display().to_string(),
        "--kubernetes-version",
        "1.33",
        "--print-plan",
    ]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains("flow style, anchors, tags and block scalars are not supported"),
        "{report}"
    );
}

#[test]
fn install_and_verify_work_against_a_root_prefix_from_outside() {
    // The DESTDIR mode: the scripts run on the host against a root filesystem (systemctl --root,
    // systemd-analyze --root, version commands through chroot).
    require_root();
    ballast_e2e::image::require_tool("systemd-analyze", "systemd");
    let artifacts = test_artifacts();
    // With add-on images: containerd and ctr run from the image's files on the host, not in a chroot.
    let addons = TestAddons::build(artifacts);
    let rootfs = Rootfs::fresh();
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &addons.pinned_manifest(artifacts));
    let root = rootfs.path().display().to_string();
    let manifest = manifest.display().to_string();
    let output = install_sh(&[
        "--manifest",
        &manifest,
        "--kubernetes-version",
        TEST_MINOR,
        "--source",
        &addons.dir().display().to_string(),
        "--nodeup",
        &nodeup_binary().display().to_string(),
        "--root",
        &root,
    ]);
    assert!(
        output.status.success(),
        "install.sh --root: {}",
        text(&output)
    );
    let output = Command::new("sh")
        .arg(images().join("verify.sh"))
        .args([
            "--manifest",
            &manifest,
            "--kubernetes-version",
            TEST_KUBERNETES,
            "--root",
            &root,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run verify.sh");
    assert!(
        output.status.success(),
        "verify.sh --root: {}",
        text(&output)
    );
}

#[test]
fn add_on_images_are_baked_into_containerd_by_digest_and_verified() {
    require_root();
    let artifacts = test_artifacts();
    nodeup_binary();
    let addons = TestAddons::build(artifacts);
    let rootfs = Rootfs::fresh();
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &addons.pinned_manifest(artifacts));

    let t = Instant::now();
    let install = install_in_from(&rootfs, &manifest, addons.dir());
    let install_time = t.elapsed();
    let report = text(&install);
    assert!(install.status.success(), "install.sh failed: {report}");
    for image in &addons.images {
        assert!(
            report.contains(&format!(
                "add-on {}: {} and {} in /var/lib/containerd (namespace k8s.io)",
                image.addon,
                image.by_digest(),
                image.reference
            )),
            "{report}"
        );
    }
    let store = rootfs.join("/var/lib/containerd");
    let uuid = store.join("io.containerd.grpc.v1.introspection/uuid");
    assert!(
        !uuid.exists(),
        "the bake left containerd's instance id in the image"
    );
    for (cni, _, sha) in &addons.manifests {
        assert_eq!(
            &sha256_file(&rootfs.join(&format!("/etc/ballast/addons/{cni}.yaml"))),
            sha
        );
    }

    // verify.sh passes, and reads the store without changing anything in the image.
    let before = rootfs.snapshot();
    let t = Instant::now();
    let verify = verify_in(&rootfs, &manifest);
    let verify_time = t.elapsed();
    assert!(
        verify.status.success(),
        "verify.sh failed: {}",
        text(&verify)
    );
    let diff = snapshot_diff(&before, &rootfs.snapshot());
    assert!(diff.is_empty(), "verify.sh changed the image: {diff:#?}");
    eprintln!(
        "image: install.sh with {} add-on images {:.1} s, verify.sh {:.1} s",
        addons.images.len(),
        install_time.as_secs_f64(),
        verify_time.as_secs_f64()
    );

    // What a node's containerd will find, read by another containerd (the host's) on the image's store.
    let calico = addons
        .images
        .iter()
        .find(|i| i.addon == "calico")
        .expect("calico's image");
    {
        let containerd = Containerd::start(&store);
        let names = containerd.images();
        let mut expected = std::collections::BTreeMap::new();
        for image in &addons.images {
            expected.insert(image.by_digest(), format!("sha256:{}", image.digest));
            expected.insert(image.reference.clone(), format!("sha256:{}", image.digest));
            // The pinned digest names exactly the bytes the test wrote (the index, or the manifest).
            let content = containerd.ctr(&["content", "get", &format!("sha256:{}", image.digest)]);
            assert!(content.status.success(), "{}", text(&content));
            assert!(
                content.stdout == image.target,
                "containerd's sha256:{} is not the image's index or manifest",
                image.digest
            );
        }
        // Exactly the pinned names: no name of the import is left behind.
        assert_eq!(names, expected);
        let check = containerd.ctr(&["images", "check", "--snapshotter", "native"]);
        let check_text = String::from_utf8_lossy(&check.stdout).into_owned();
        assert!(check.status.success(), "{}", text(&check));
        assert_eq!(
            check_text
                .lines()
                .skip(1)
                .filter(|l| l.contains(" complete ("))
                .count(),
            expected.len(),
            "{check_text}"
        );
        let labels = containerd.ctr(&["images", "ls"]);
        let listing = String::from_utf8_lossy(&labels.stdout).into_owned();
        assert_eq!(
            listing.matches("io.cri-containerd.pinned=pinned").count(),
            expected.len(),
            "{listing}"
        );
        // Take one name away, as a store a node would have to pull from.
        let removed = containerd.ctr(&["images", "rm", &calico.reference]);
        assert!(removed.status.success(), "{}", text(&removed));
    }
    // That containerd made an instance id, as any started on the store does: verify names it too.
    assert!(uuid.exists());
    let verify = verify_in(&rootfs, &manifest);
    let report = text(&verify);
    assert_eq!(verify.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "add-on calico: image {} is not in the image's containerd store (/var/lib/containerd, namespace \
             k8s.io): a node would pull it",
            calico.reference
        )),
        "{report}"
    );
    assert!(
        report.contains(
            "/var/lib/containerd/io.containerd.grpc.v1.introspection/uuid is in the image"
        ),
        "{report}"
    );
    assert!(report.contains("(2 problem(s))"), "{report}");
}

/// install.sh from outside against an empty root: an image refusal happens before anything is written.
fn install_outside(manifest: &Path, source: &Path, root: &Path) -> Output {
    install_sh(&[
        "--manifest",
        &manifest.display().to_string(),
        "--kubernetes-version",
        TEST_MINOR,
        "--source",
        &source.display().to_string(),
        "--nodeup",
        &nodeup_binary().display().to_string(),
        "--root",
        &root.display().to_string(),
    ])
}

/// Where a Debian base keeps its CA certificates, which install.sh requires of a root.
const TRUST_STORE: &str = "etc/ssl/certs/ca-certificates.crt";

/// A root holding nothing but a base image's CA trust store (install.sh refuses a root without one).
fn bare_root(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("root");
    for (file, text) in [
        (
            TRUST_STORE,
            "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n",
        ),
        (HOSTS, "127.0.0.1 localhost\n"),
        (IPTABLES, "#!/bin/sh\n"),
    ] {
        let path = root.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("the base's directory");
        std::fs::write(&path, text).expect("a file of the base");
    }
    root
}

/// A base's `/etc/hosts` and iptables (install.sh refuses a root without them).
const HOSTS: &str = "etc/hosts";
const IPTABLES: &str = "usr/sbin/iptables";

/// Every file under `root` but the trust store [`bare_root`] put there: what install.sh wrote.
fn written(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)
            .expect("a directory of the root")
            .flatten()
        {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if ![TRUST_STORE, HOSTS, IPTABLES]
                .iter()
                .any(|f| path == root.join(f))
            {
                out.push(path);
            }
        }
    }
    out
}

/// install.sh's report on a base root missing `files`, after checking it refused and wrote nothing.
fn refusal_of_a_base_without(files: &[&str]) -> String {
    require_root();
    let artifacts = test_artifacts();
    let addons = TestAddons::build(artifacts);
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &addons.pinned_manifest(artifacts));
    let root = bare_root(tmp.path());
    for file in files {
        std::fs::remove_file(root.join(file)).expect("remove a file of the base");
    }
    let output = install_outside(&manifest, addons.dir(), &root);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert_eq!(report.matches("  - ").count(), files.len(), "{report}");
    assert!(
        written(&root).is_empty(),
        "install.sh wrote {:?}",
        written(&root)
    );
    report
}

#[test]
fn a_root_without_ca_certificates_is_refused_before_anything_is_written() {
    let report = refusal_of_a_base_without(&[TRUST_STORE]);
    assert!(
        report.contains("CA certificates: ") && report.contains("install ca-certificates"),
        "{report}"
    );
}

/// A root without `/etc/hosts` or iptables is refused naming both, and nothing is written.
#[test]
fn a_root_without_hosts_or_iptables_is_refused_before_anything_is_written() {
    let report = refusal_of_a_base_without(&[HOSTS, IPTABLES]);
    assert!(
        report.contains("/etc/hosts: ") && report.contains("install netbase"),
        "{report}"
    );
    assert!(
        report.contains("iptables: ") && report.contains("install iptables"),
        "{report}"
    );
}

#[test]
fn an_image_archive_with_another_digest_is_refused_naming_both() {
    require_root();
    let artifacts = test_artifacts();
    let addons = TestAddons::build(artifacts);
    let find = |addon: &str| {
        addons
            .images
            .iter()
            .find(|i| i.addon == addon)
            .unwrap_or_else(|| panic!("{addon}'s image"))
    };
    let coredns = find("coredns");
    let kube_proxy = find("kube-proxy");
    // coredns pinned to kube-proxy's digest: a real image's digest, just not the one its archive holds.
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(
        tmp.path(),
        &addons.manifest(artifacts, &|i| {
            let digest = if i.addon == "coredns" {
                &kube_proxy.digest
            } else {
                &i.digest
            };
            format!("sha256:{digest}")
        }),
    );
    let root = bare_root(tmp.path());
    let output = install_outside(&manifest, addons.dir(), &root);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "add-on coredns: image {}: {} (from {}/{}) holds sha256:{}, the manifest pins sha256:{}: refusing it",
            coredns.reference,
            coredns.file,
            addons.dir().display(),
            coredns.file,
            coredns.digest,
            kube_proxy.digest
        )),
        "{report}"
    );
    assert!(report.contains("nothing was installed"), "{report}");
    // The other images were fine: the refusal names only coredns.
    assert_eq!(report.matches("  - ").count(), 1, "{report}");
    assert!(
        written(&root).is_empty(),
        "install.sh wrote into the root: {:?}",
        written(&root)
    );
}

#[test]
fn a_missing_image_archive_is_refused_naming_the_file() {
    require_root();
    let artifacts = test_artifacts();
    let addons = TestAddons::build(artifacts);
    let cilium = addons
        .images
        .iter()
        .find(|i| i.addon == "cilium")
        .expect("cilium's image");
    std::fs::remove_file(addons.dir().join(&cilium.file)).expect("remove the archive");
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &addons.pinned_manifest(artifacts));
    let root = bare_root(tmp.path());
    let output = install_outside(&manifest, addons.dir(), &root);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "add-on cilium: image {}: its archive {} is not in {} (an OCI image layout tar of {}",
            cilium.reference,
            cilium.file,
            addons.dir().display(),
            cilium.by_digest()
        )),
        "{report}"
    );
    assert_eq!(report.matches("  - ").count(), 1, "{report}");
    assert!(
        written(&root).is_empty(),
        "install.sh wrote into the root: {:?}",
        written(&root)
    );
}
