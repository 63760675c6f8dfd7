//! The local cloud's image, baked by the AMI recipe from what was built on this machine: `images/install.sh` in a
//! Debian 12 root (as the image tier bakes), from the components `tools/build-go` built (containerd, runc, the
//! kubelet and kubectl, the CNI plugins, crictl, etcd) and the local cloud's images (`--images`), which it imports
//! into the image's containerd store by digest and by tag, as the real bake does the add-ons' images.
//!
//! Needs root, debootstrap, unshare and the Go builds (`tools/install-deps`): without them it fails, saying what
//! is missing; it never skips.

use ballast_e2e::go_builds::built;
use ballast_e2e::image::{output_text as text, require_root, Containerd, Rootfs};
use ballast_e2e::local_ami::LocalAmiSource;
use ballast_state::components::ImageComponents;
use ballast_state::defaults::DEFAULT_KUBERNETES_VERSION;

#[test]
fn the_local_clouds_image_bakes_the_components_and_images_built_here() {
    require_root();
    let minor = DEFAULT_KUBERNETES_VERSION
        .rsplit_once('.')
        .map(|(minor, _)| minor)
        .expect("a minor");
    let source = LocalAmiSource::make(minor);
    let rootfs = Rootfs::fresh();
    let install = source.install_into(&rootfs);
    let report = text(&install);
    assert!(install.status.success(), "install.sh failed: {report}");
    // The static pods' images of this release, kube-proxy's, the cloud controller manager's, CoreDNS's, pause's,
    // and agnhost's, the tests' workload.
    for program in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ] {
        let reference = format!("registry.k8s.io/{program}:v{}", source.kubernetes);
        assert!(
            source.image_digests.contains_key(&reference),
            "{reference} is not among the local cloud's images: {:?}",
            source.image_digests
        );
    }
    assert!(
        source
            .image_digests
            .keys()
            .any(|r| r.starts_with("registry.k8s.io/e2e-test-images/agnhost:")),
        "agnhost is not among the local cloud's images: {:?}",
        source.image_digests
    );
    assert_eq!(source.image_digests.len(), 8, "{:?}", source.image_digests);
    for (reference, digest) in &source.image_digests {
        let repository = reference
            .rsplit_once(':')
            .map_or(reference.as_str(), |(r, _)| r);
        assert!(
            report.contains(&format!(
                "add-on local-cloud: {repository}@{digest} and {reference} in /var/lib/containerd (namespace k8s.io)"
            )),
            "{reference}: {report}"
        );
    }

    // verify.sh: every component installed at its pinned sha256, and its version command prints its version
    // (the built kubelet, containerd, runc, crictl and etcd, run in the image).
    let verify = rootfs.verify(&source.manifest, minor);
    assert!(
        verify.status.success(),
        "verify.sh failed: {}",
        text(&verify)
    );
    let kubelet = rootfs.run(&[], &["/usr/local/bin/kubelet", "--version"]);
    assert!(
        String::from_utf8_lossy(&kubelet.stdout)
            .contains(&format!("Kubernetes v{}", source.kubernetes)),
        "{}",
        text(&kubelet)
    );

    // What a node's containerd finds: every image by its digest and by its tag, complete, read by the built
    // containerd on the image's store.
    let store = rootfs.join("/var/lib/containerd");
    let containerd = Containerd::start_built(&store, &built("containerd"));
    let held = containerd.images();
    for (reference, digest) in &source.image_digests {
        let repository = reference
            .rsplit_once(':')
            .map_or(reference.as_str(), |(r, _)| r);
        assert_eq!(held.get(reference), Some(digest), "{reference}: {held:?}");
        assert_eq!(
            held.get(&format!("{repository}@{digest}")),
            Some(digest),
            "{reference} by digest: {held:?}"
        );
    }
    assert_eq!(held.len(), 2 * source.image_digests.len(), "{held:?}");
    let check = containerd.ctr(&["images", "check", "--snapshotter", "native"]);
    let listing = String::from_utf8_lossy(&check.stdout);
    assert_eq!(
        listing
            .lines()
            .filter(|l| l.contains(" complete ("))
            .count(),
        held.len(),
        "{listing}"
    );

    // The image's record lists each image under the digest the store holds it by: nodeup names the sandbox
    // image by it (its upstream pin's digest is not what was built here).
    let path = rootfs.join("/etc/ballast/components.yaml");
    let record = ImageComponents::parse(
        &std::fs::read_to_string(&path).expect("the image record"),
        &path.display().to_string(),
    )
    .expect("a readable record");
    assert_eq!(record.images, source.image_digests);
}
