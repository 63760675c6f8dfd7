use std::collections::{BTreeMap, BTreeSet};

use super::*;

fn embedded() -> ComponentManifest {
    match ComponentManifest::embedded() {
        Ok(m) => m.clone(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_embedded_manifest_is_valid_and_pins_the_default_version() {
    let manifest = embedded();
    assert_eq!(
        manifest.minors(),
        ["1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]
    );
    // A new cluster runs 1.35 to 1.37; the older ones are kept to upgrade from.
    assert_eq!(manifest.supported_minors(), ["1.35", "1.36", "1.37"]);
    let (minor, release) = manifest
        .release_exact(crate::defaults::DEFAULT_KUBERNETES_VERSION)
        .expect("the default Kubernetes version is pinned");
    assert_eq!(minor, "1.36");
    assert_eq!(
        release.kubernetes,
        crate::defaults::DEFAULT_KUBERNETES_VERSION
    );
    for minor in manifest.minors() {
        let release = &manifest.releases[&minor];
        assert_eq!(
            component_set(release),
            COMPONENTS.into_iter().collect::<BTreeSet<_>>()
        );
    }
}

#[test]
fn no_provenance_no_pin_over_the_embedded_manifest() {
    // Every pinned value of the real manifest names where it was read, every `unpinned` one says why: held here
    // over the manifest itself, not only by the parser's rules.
    let manifest = embedded();
    let pins = manifest.pins();
    assert!(!pins.is_empty());
    for pin in &pins {
        let at = format!("{} {}", pin.minor, pin.name);
        if pin.pinned {
            let provenance = pin
                .provenance
                .unwrap_or_else(|| panic!("{at}: pinned without provenance"));
            assert_eq!(provenance.problems(&at), Vec::<String>::new());
            assert!(provenance.kind().is_some(), "{at}");
            // What the local cloud built here pins only the local cloud's own manifests.
            assert_ne!(
                provenance.pinned_by.as_deref(),
                Some(super::provenance::BUILD_GO),
                "{at}: the AMI's manifest pins what tools/build-go built"
            );
            assert_eq!(pin.reason, None, "{at}: a pin has no reason");
        } else {
            assert_eq!(pin.value, UNPINNED, "{at}");
            assert_eq!(pin.provenance, None, "{at}: unpinned with a provenance");
            let reason = pin
                .reason
                .unwrap_or_else(|| panic!("{at}: unpinned without a reason"));
            assert!(reason.contains("images/pin.sh"), "{at}: {reason}");
        }
    }
    // What is still unpinned is exactly what upstream names by tag only: the images of Calico, of the Amazon VPC
    // CNI and the Pod Identity Webhook's (docs/addons.md). A public record covers everything else.
    let unpinned: BTreeSet<String> = pins
        .iter()
        .filter(|p| !p.pinned)
        .map(|p| format!("{} {}", p.minor, p.name))
        .collect();
    let ecr = "602401143452.dkr.ecr.us-west-2.amazonaws.com";
    let mut expected = BTreeSet::new();
    assert_eq!(
        manifest.minors(),
        ["1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]
    );
    for minor in ["1.32", "1.33", "1.34"] {
        for image in ["cni", "node", "kube-controllers"] {
            expected.insert(format!("{minor} docker.io/calico/{image}:v3.30.2"));
        }
        for image in [
            "amazon-k8s-cni:v1.19.5",
            "amazon-k8s-cni-init:v1.19.5",
            "amazon/aws-network-policy-agent:v1.2.1",
        ] {
            expected.insert(format!("{minor} {ecr}/{image}"));
        }
        expected.insert(format!(
            "{minor} docker.io/amazon/amazon-eks-pod-identity-webhook:v0.5.7"
        ));
    }
    // The cluster autoscaler of 1.34: the promoter manifest read ends at v1.33.1, so v1.34.4 has no digest on
    // record (1.32's and 1.33's are pinned from it).
    expected.insert("1.34 registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.4".to_string());
    // 1.35 to 1.37: the public records stored end around August 2026, before most of their images were
    // promoted. Unpinned as well: the images upstream names by tag only (Calico's, now on quay.io, the VPC CNI's,
    // the Pod Identity Webhook's), and each release's kube-proxy, the cloud controller manager v1.36.1, the
    // EBS CSI driver's sidecars and the cluster autoscaler; and for 1.36 and 1.37 CoreDNS v1.14.2.
    for (minor, kube_proxy, autoscaler) in [
        ("1.35", "v1.35.8", "v1.35.1"),
        ("1.36", "v1.36.4", "v1.36.0"),
        ("1.37", "v1.37.1", "v1.36.0"),
    ] {
        let mut images = vec![
            format!("registry.k8s.io/kube-proxy:{kube_proxy}"),
            "registry.k8s.io/provider-aws/cloud-controller-manager:v1.36.1".to_string(),
            format!("registry.k8s.io/autoscaling/cluster-autoscaler:{autoscaler}"),
            "docker.io/amazon/amazon-eks-pod-identity-webhook:v0.5.7".to_string(),
            format!("{ecr}/amazon-k8s-cni:v1.23.0"),
            format!("{ecr}/amazon-k8s-cni-init:v1.23.0"),
            format!("{ecr}/amazon/aws-network-policy-agent:v1.4.1"),
        ];
        for sidecar in [
            "csi-provisioner:v6.2.0",
            "csi-attacher:v4.11.0",
            "csi-resizer:v2.1.0",
            "livenessprobe:v2.18.0",
            "csi-node-driver-registrar:v2.16.0",
        ] {
            images.push(format!("registry.k8s.io/sig-storage/{sidecar}"));
        }
        for image in ["cni", "node", "kube-controllers"] {
            images.push(format!("quay.io/calico/{image}:v3.31.6"));
        }
        if minor != "1.35" {
            images.push("registry.k8s.io/coredns/coredns:v1.14.2".to_string());
        }
        expected.extend(images.into_iter().map(|i| format!("{minor} {i}")));
    }
    // And 1.37's crictl, whose release artifact no stored record hashes yet.
    expected.insert("1.37 crictl 1.37.0".to_string());
    assert_eq!(unpinned, expected);
    assert_eq!(manifest.unpinned(), ["1.37/crictl"]);
    // Every pinned image names what its digest is: all of them are multi-platform images upstream.
    for release in manifest.releases.values() {
        for image in release.addons.values().flat_map(|a| a.images.values()) {
            if image.pinned_reference().is_some() {
                assert_eq!(
                    image.digest_kind,
                    Some(DigestKind::Index),
                    "{}",
                    image.reference
                );
            }
        }
    }
}

#[test]
fn a_pin_without_provenance_or_an_unpinned_without_reason_is_refused() {
    let no_provenance = SMALL.replace(PROVENANCE, "");
    let all = problems_of(&no_provenance).join("\n");
    assert!(
        all.contains("components.runc.provenance: the sha256 is pinned without a provenance"),
        "{all}"
    );
    let no_reason = SMALL.replacen(REASON, "", 1);
    let all = problems_of(&no_reason).join("\n");
    assert!(
        all.contains("components.containerd.reason: the sha256 is `unpinned` without a reason"),
        "{all}"
    );
    let short_commit = SMALL.replace(
        "commit: 268927e26409f861634e18f3632c9dd483c350cf",
        "commit: 268927e",
    );
    let all = problems_of(&short_commit).join("\n");
    assert!(
        all.contains("components.runc.provenance.commit: \"268927e\" is not a commit"),
        "{all}"
    );
    let both = SMALL.replace(
        "          commit: 268927e26409f861634e18f3632c9dd483c350cf\n",
        "          commit: 268927e26409f861634e18f3632c9dd483c350cf\n          date: 2026-12-02T13:00:00Z\n",
    );
    let all = problems_of(&both).join("\n");
    assert!(all.contains("not fields of both"), "{all}");
    let unknown = SMALL.replace(
        "          commit: 2",
        "          tag: v1\n          commit: 2",
    );
    let err = ComponentManifest::parse(&unknown, "bad.yaml").expect_err("unknown field");
    assert!(
        err.to_string()
            .contains("components.runc.provenance: unknown field `tag`"),
        "{err}"
    );
}

#[test]
fn a_pinned_image_says_what_its_digest_names() {
    let hex = "ab".repeat(32);
    let text = |kind: &str| {
        format!(
            "{SMALL}    addons:
      pause:
        version: \"3.10\"
        images:
          pause:
            reference: registry.k8s.io/pause:3.10
            digest: sha256:{hex}
{kind}            provenance:
              repository: kubernetes/k8s.io
              path: registry.k8s.io/images/k8s-staging-kubernetes/images.yaml
              commit: ecf019a88caa0923c610e8982ca44a460c0303e5
"
        )
    };
    let all = problems_of(&text("")).join("\n");
    assert!(
        all.contains("addons.pause.images.pause.digestKind: missing"),
        "{all}"
    );
    let all = problems_of(&text("            digestKind: index\n")).join("\n");
    assert!(!all.contains("digestKind"), "{all}");
    let err = ComponentManifest::parse(&text("            digestKind: list\n"), "bad.yaml")
        .expect_err("an unknown kind");
    assert!(err.to_string().contains("digestKind"), "{err}");
}

#[test]
fn lookup_is_by_minor() {
    let manifest = embedded();
    for version in ["1.33", "1.33.0", "v1.33.4", "1.33.4"] {
        let (minor, _) = manifest.release_for_minor(version).expect(version);
        assert_eq!(minor, "1.33");
    }
    let (_, release) = manifest.release_for_minor("1.32").expect("1.32");
    assert!(release.kubernetes.starts_with("1.32."));
}

#[test]
fn an_unknown_minor_lists_the_known_ones() {
    let manifest = embedded();
    let err = manifest.release_for_minor("1.29.1").expect_err("1.29");
    assert!(matches!(err, LookupError::UnknownMinor { .. }));
    let text = err.to_string();
    assert!(text.contains("Kubernetes 1.29"), "{text}");
    assert!(text.contains("1.32, 1.33, 1.34"), "{text}");
}

#[test]
fn a_version_that_is_not_one_is_named() {
    let manifest = embedded();
    for bad in ["", "1", "1.33.4.5", "one.two", "1.33-rc.1", "1..3"] {
        let err = manifest.release_for_minor(bad).expect_err(bad);
        assert!(
            matches!(err, LookupError::NotAVersion { .. }),
            "{bad}: {err}"
        );
    }
}

#[test]
fn release_exact_refuses_another_patch() {
    let manifest = embedded();
    let err = manifest.release_exact("1.33.1").expect_err("1.33.1");
    let text = err.to_string();
    assert!(matches!(err, LookupError::PatchMismatch { .. }));
    assert!(text.contains("pins 1.33.4 for 1.33"), "{text}");
    manifest
        .release_exact("1.33")
        .expect("a minor alone is fine");
}

/// Kubernetes 1.34 is pinned at 1.34.0 (what kops's cases ask for), with the kubelet and kubectl of that patch,
/// etcd 3.6 and the sandbox image Kubernetes 1.34 moved to; a later 1.34 patch or 1.35 is refused, naming what
/// is pinned.
#[test]
fn kubernetes_1_34_is_pinned_at_1_34_0() {
    let manifest = embedded();
    for version in ["1.34.0", "v1.34.0", "1.34"] {
        let (minor, release) = manifest.release_exact(version).expect(version);
        assert_eq!(minor, "1.34");
        assert_eq!(release.kubernetes, "1.34.0");
        assert_eq!(release.components["kubelet"].version, "1.34.0");
        assert_eq!(release.components["kubectl"].version, "1.34.0");
        assert!(release.components["etcd"].version.starts_with("3.6."));
        assert_eq!(
            release.addons[addons::PAUSE].images[addons::PAUSE].reference,
            "registry.k8s.io/pause:3.10.1"
        );
        assert_eq!(release.addons[addons::KUBE_PROXY].version, "1.34.0");
    }
    assert_eq!(
        manifest.sandbox_image("1.33.4"),
        Some(crate::node::PAUSE_IMAGE)
    );
    assert_eq!(manifest.sandbox_image("1.29.1"), None);
    let text = manifest
        .release_exact("1.34.3")
        .expect_err("1.34.3")
        .to_string();
    assert!(text.contains("pins 1.34.0 for 1.34"), "{text}");
    let text = manifest
        .release_for_minor("1.38.0")
        .expect_err("1.38")
        .to_string();
    assert!(
        text.contains("1.32, 1.33, 1.34, 1.35, 1.36, 1.37"),
        "{text}"
    );
}

/// The one pinned value of [`SMALL`] (runc's sha256) names where it was read; each `unpinned` one says why.
const PROVENANCE: &str = "        provenance:
          repository: kubernetes/kops
          path: pkg/assets/assetdata/runc-1.3.yaml
          commit: 268927e26409f861634e18f3632c9dd483c350cf
";
const REASON: &str = "        reason: not hashed for this test
";

const SMALL: &str = r#"apiVersion: ballast.dev/v1alpha1
kind: ComponentManifest
arch: amd64
releases:
  "1.33":
    kubernetes: 1.33.4
    components:
      containerd:
        version: 2.1.4
        url: https://example.com/containerd-2.1.4.tar.gz
        sha256: unpinned
        reason: not hashed for this test
        archive: tar.gz
        files:
          bin/containerd: /usr/local/bin/containerd
      runc:
        version: 1.3.0
        url: https://example.com/runc.amd64
        sha256: 0000000000000000000000000000000000000000000000000000000000000000
        provenance:
          repository: kubernetes/kops
          path: pkg/assets/assetdata/runc-1.3.yaml
          commit: 268927e26409f861634e18f3632c9dd483c350cf
        archive: binary
        files:
          runc.amd64: /usr/local/sbin/runc
      kubelet:
        version: 1.33.4
        url: https://example.com/kubelet
        sha256: unpinned
        reason: not hashed for this test
        archive: binary
        versionCommand: /usr/local/bin/kubelet --version
        files:
          kubelet: /usr/local/bin/kubelet
      kubectl:
        version: 1.33.4
        url: https://example.com/kubectl
        sha256: unpinned
        reason: not hashed for this test
        archive: binary
        files:
          kubectl: /usr/local/bin/kubectl
      cni-plugins:
        version: 1.7.1
        url: https://example.com/cni.tgz
        sha256: unpinned
        reason: not hashed for this test
        archive: tar.gz
        files:
          loopback: /opt/cni/bin/loopback
      crictl:
        version: 1.33.0
        url: https://example.com/crictl.tar.gz
        sha256: unpinned
        reason: not hashed for this test
        archive: tar.gz
        files:
          crictl: /usr/local/bin/crictl
      etcd:
        version: 3.5.21
        url: https://example.com/etcd.tar.gz
        sha256: unpinned
        reason: not hashed for this test
        archive: tar.gz
        files:
          etcd/etcd: /usr/local/bin/etcd
"#;

fn small() -> ComponentManifest {
    match ComponentManifest::parse(SMALL, "small.yaml") {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    }
}

fn problems_of(text: &str) -> Vec<String> {
    match ComponentManifest::parse(text, "bad.yaml") {
        Err(ManifestError::Invalid { problems, .. }) => problems,
        Err(e) => panic!("expected semantic problems, got: {e}"),
        Ok(_) => panic!("expected problems"),
    }
}

#[test]
fn sha256_is_pinned_or_explicitly_unpinned() {
    let manifest = small();
    let release = &manifest.releases["1.33"];
    assert_eq!(release.components["containerd"].sha256, Sha256::Unpinned);
    assert!(release.components["runc"].sha256.pinned().is_some());

    let bad = SMALL.replace(
        "sha256: 0000000000000000000000000000000000000000000000000000000000000000",
        "sha256: 00000",
    );
    let err = ComponentManifest::parse(&bad, "bad.yaml").expect_err("short sha");
    let text = err.to_string();
    assert!(matches!(err, ManifestError::Malformed { .. }));
    assert!(
        text.contains("releases.1.33.components.runc.sha256"),
        "{text}"
    );
    assert!(text.contains("64 lowercase hex digits"), "{text}");

    let missing = SMALL.replace(
        "        sha256: 0000000000000000000000000000000000000000000000000000000000000000\n",
        "",
    );
    let err = ComponentManifest::parse(&missing, "bad.yaml").expect_err("no sha");
    assert!(err.to_string().contains("missing field `sha256`"), "{err}");
}

#[test]
fn every_rule_is_reported_at_once() {
    let bad = SMALL
        .replace(
            "      kubectl:\n        version: 1.33.4",
            "      kubectl:\n        version: 1.33.3",
        )
        .replace(
            "          kubelet: /usr/local/bin/kubelet",
            "          kubelet: usr/local/bin/kubelet",
        )
        .replace(
            "          loopback: /opt/cni/bin/loopback",
            "          ../loopback: /usr/local/bin/crictl",
        )
        .replace(
            "https://example.com/runc.amd64",
            "http://example.com/runc.amd64",
        );
    let problems = problems_of(&bad);
    let all = problems.join("\n");
    assert!(
        all.contains(
            "components.kubectl.version: \"1.33.3\", but the release is Kubernetes 1.33.4"
        ),
        "{all}"
    );
    assert!(
        all.contains("\"usr/local/bin/kubelet\" must be an absolute path"),
        "{all}"
    );
    assert!(
        all.contains("\"../loopback\" must be a relative path"),
        "{all}"
    );
    assert!(
        all.contains("\"/usr/local/bin/crictl\" is installed by"),
        "{all}"
    );
    assert!(all.contains("components.runc.url"), "{all}");
    assert_eq!(problems.len(), 5, "{all}");
}

#[test]
fn a_missing_or_unknown_component_is_named() {
    let bad = SMALL.replace("      crictl:\n", "      crictll:\n");
    let all = problems_of(&bad).join("\n");
    assert!(all.contains("components: crictl is missing"), "{all}");
    assert!(
        all.contains("components.crictll: unknown component"),
        "{all}"
    );
}

#[test]
fn a_binary_installs_the_file_named_by_its_url() {
    let bad = SMALL.replace(
        "          kubectl: /usr/local/bin/kubectl",
        "          kctl: /usr/local/bin/kubectl",
    );
    let all = problems_of(&bad).join("\n");
    assert!(
        all.contains("keyed by the URL's file name \"kubectl\""),
        "{all}"
    );
}

#[test]
fn yaml_the_shell_cannot_read_is_refused() {
    let bad = SMALL.replace(
        "        files:\n          crictl: /usr/local/bin/crictl",
        "        files: {crictl: /usr/local/bin/crictl}",
    );
    let all = problems_of(&bad).join("\n");
    assert!(all.contains("flow style"), "{all}");
    let unquoted = SMALL.replace("  \"1.33\":", "  1.33:");
    let all = problems_of(&unquoted).join("\n");
    assert!(all.contains("line 5: quote the minor version"), "{all}");
}

#[test]
fn a_minor_key_must_match_its_kubernetes_version() {
    let bad = SMALL.replace("    kubernetes: 1.33.4", "    kubernetes: 1.32.4");
    let all = problems_of(&bad).join("\n");
    assert!(
        all.contains("releases.\"1.33\".kubernetes: \"1.32.4\" is not a 1.33.PATCH version"),
        "{all}"
    );
}

fn record_for(manifest: &ComponentManifest) -> String {
    let release = &manifest.releases["1.33"];
    let mut text = String::from(
        "apiVersion: ballast.dev/v1alpha1\nkind: ImageComponents\nkubernetesMinor: \"1.33\"\n\
             kubernetes: \"1.33.4\"\nmanifestSha256: \"abc\"\nbakedAt: \"2025-09-01T12:00:00Z\"\n\
             nodeup:\n  path: \"/usr/local/bin/nodeup\"\n  sha256: \"def\"\ncomponents:\n",
    );
    for (name, c) in &release.components {
        let sha = c.sha256.pinned().unwrap_or("1111");
        text.push_str(&format!(
            "  {name}:\n    version: \"{}\"\n    sha256: \"{sha}\"\n    files:\n",
            c.version
        ));
        for to in c.files.values() {
            text.push_str(&format!("      \"{to}\": \"2222\"\n"));
        }
    }
    text
}

#[test]
fn a_matching_image_has_no_mismatch() {
    let manifest = small();
    let record = ImageComponents::parse(&record_for(&manifest), IMAGE_RECORD_PATH).expect("record");
    assert_eq!(
        record.components["containerd"].files["/usr/local/bin/containerd"],
        "2222"
    );
    assert_eq!(record.mismatches(&manifest.releases["1.33"]), vec![]);
}

#[test]
fn every_mismatch_is_named() {
    let manifest = small();
    let text = record_for(&manifest)
        .replace("kubernetes: \"1.33.4\"", "kubernetes: \"1.32.8\"")
        .replace("    version: \"2.1.4\"", "    version: \"1.7.27\"")
        .replace(
            "0000000000000000000000000000000000000000000000000000000000000000",
            "9999",
        );
    let text = text.replace("  etcd:\n", "  etcd-old:\n");
    let record = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect("record");
    let found: Vec<String> = record
        .mismatches(&manifest.releases["1.33"])
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        vec![
            "the AMI was baked for Kubernetes 1.32.8, the node spec wants 1.33.4",
            "the AMI carries containerd 1.7.27, the node spec wants containerd 2.1.4",
            "the AMI carries no etcd, the node spec wants etcd 3.5.21",
            "the AMI's runc artifact has sha256 9999, the node spec pins \
                 0000000000000000000000000000000000000000000000000000000000000000",
        ]
    );
}

#[test]
fn a_component_built_from_source_is_judged_by_its_version_only() {
    let manifest = small();
    let built = "    sha256: \"9999\"\n    builtBy: \"tools/build-go\"\n";
    let text = record_for(&manifest).replace(
        "    sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"\n",
        built,
    );
    assert!(text.contains("builtBy"), "{text}");
    let record = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect("record");
    assert_eq!(record.mismatches(&manifest.releases["1.33"]), vec![]);
    // Another version is still another version, however it was made; and only the build tool's mark counts.
    let older = text.replace("    version: \"2.1.4\"", "    version: \"1.7.27\"");
    let record = ImageComponents::parse(&older, IMAGE_RECORD_PATH).expect("record");
    assert_eq!(record.mismatches(&manifest.releases["1.33"]).len(), 1);
    let other = text.replace("builtBy: \"tools/build-go\"", "builtBy: \"somebody\"");
    let record = ImageComponents::parse(&other, IMAGE_RECORD_PATH).expect("record");
    assert!(record.mismatches(&manifest.releases["1.33"])[0]
        .to_string()
        .contains("sha256 9999"),);
}

/// An AMI's baked images name the release's add-on images by the digests it stores; the rest keep their pins.
#[test]
fn a_release_as_baked_names_images_by_the_stored_digest() {
    let manifest = embedded();
    let (minor, release) = manifest.releases.iter().next_back().expect("a release");
    let pause = &release.addons[addons::PAUSE].images[addons::PAUSE];
    let built = "7".repeat(64);
    let baked = BTreeMap::from([(pause.reference.clone(), format!("sha256:{built}"))]);
    let as_baked = release.as_baked(&baked);
    assert_eq!(
        as_baked.addons[addons::PAUSE].images[addons::PAUSE].pinned_reference(),
        Some(format!("{}@sha256:{built}", pause.reference)),
        "{minor}"
    );
    let mut others = as_baked.clone();
    others.addons.remove(addons::PAUSE);
    let mut originals = release.clone();
    originals.addons.remove(addons::PAUSE);
    assert_eq!(others, originals);
    assert_eq!(&release.as_baked(&BTreeMap::new()), release);
}

/// The record's baked images are read with their digests, and a digest that is not one is refused by its path.
#[test]
fn a_records_images_are_read_and_a_bad_digest_is_refused() {
    let manifest = small();
    let digest = format!("sha256:{}", "a".repeat(64));
    let text = format!(
        "{}images:\n  \"registry.k8s.io/pause:3.10.1\": \"{digest}\"\n",
        record_for(&manifest)
    );
    let record = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect("record");
    assert_eq!(record.images["registry.k8s.io/pause:3.10.1"], digest);
    let bad = text.replace(&digest, "sha256:abc");
    let err = ImageComponents::parse(&bad, IMAGE_RECORD_PATH).expect_err("digest");
    assert!(
        err.to_string()
            .contains("images.registry.k8s.io/pause:3.10.1: \"sha256:abc\" is not sha256:"),
        "{err}"
    );
}

#[test]
fn a_record_of_another_kind_is_refused() {
    let manifest = small();
    let text = record_for(&manifest).replace("kind: ImageComponents", "kind: Cluster");
    let err = ImageComponents::parse(&text, IMAGE_RECORD_PATH).expect_err("kind");
    assert!(
        err.to_string()
            .contains("/etc/ballast/components.yaml: not a readable image record: kind"),
        "{err}"
    );
}

#[test]
fn the_embedded_manifest_pins_every_addon_and_invents_no_digest() {
    let manifest = embedded();
    for (minor, release) in &manifest.releases {
        let names: BTreeSet<&str> = release.addons.keys().map(String::as_str).collect();
        assert_eq!(names, addons::ADDONS.into_iter().collect(), "{minor}");
        // kube-proxy runs the release's own Kubernetes version.
        assert_eq!(
            release.addons[addons::KUBE_PROXY].version,
            release.kubernetes
        );
        for networking in [
            crate::spec::Networking::AmazonVpc,
            crate::spec::Networking::Cilium,
            crate::spec::Networking::Calico,
        ] {
            let name = addons::cni_addon(networking).expect("a CNI add-on");
            let cni = &release.addons[name];
            // Cilium is rendered by Ballast (no upstream manifest, no Helm chart), the others are installed
            // from their upstream manifests.
            assert_eq!(
                cni.manifest.is_some(),
                addons::FROM_UPSTREAM_MANIFEST.contains(&name),
                "{minor}: {networking:?}"
            );
        }
        assert_eq!(
            addons::cni_addon(crate::spec::Networking::Kubenet),
            None,
            "kubenet is no add-on"
        );
        let cilium: BTreeSet<&str> = release.addons[addons::CILIUM]
            .images
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            cilium,
            addons::CILIUM_IMAGES.into_iter().collect(),
            "{minor}"
        );
    }
    // The EBS CSI driver runs exactly its images, and the sandbox image is the one nodeup names to containerd.
    for (minor, release) in &manifest.releases {
        let ebs: BTreeSet<&str> = release.addons[addons::AWS_EBS_CSI_DRIVER]
            .images
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(ebs, addons::EBS_CSI_IMAGES.into_iter().collect(), "{minor}");
        let pause_addon = &release.addons[addons::PAUSE];
        let pause = &pause_addon.images[addons::PAUSE];
        assert_eq!(
            pause.reference,
            format!("registry.k8s.io/pause:{}", pause_addon.version),
            "{minor}"
        );
        assert_eq!(
            manifest.sandbox_image(&release.kubernetes),
            Some(pause.reference.as_str()),
            "{minor}"
        );
        assert!(pause.pinned_reference().is_some(), "{minor}");
    }
    // What upstream names by tag only stays unpinned, never invented: the images of Calico, the VPC CNI and the
    // Pod Identity Webhook.
    let unpinned = manifest.unpinned_addons();
    // Seven per release of 1.32 to 1.34, and 1.34's cluster autoscaler (no public digest for any v1.34 patch
    // yet); for 1.35 to 1.37, what no_provenance_no_pin_over_the_embedded_manifest lists (15 for 1.35, 16 for
    // 1.36 and 1.37).
    assert_eq!(unpinned.len(), 7 * 3 + 1 + 15 + 16 + 16, "{unpinned:?}");
    assert!(unpinned.contains(&"1.34/cluster-autoscaler/cluster-autoscaler".to_string()));
    for (minor, tag, prefix) in [
        ("1.33", "v1.33.1", "0d53371b"),
        ("1.32", "v1.32.2", "c627d8d1"),
    ] {
        let image = &manifest.releases[minor].addons[addons::CLUSTER_AUTOSCALER].images
            [addons::CLUSTER_AUTOSCALER];
        assert!(
            image
                .pinned_reference()
                .is_some_and(|r| r.starts_with(&format!(
                    "registry.k8s.io/autoscaling/cluster-autoscaler:{tag}@sha256:{prefix}"
                ))),
            "{minor}: {image:?}"
        );
    }
    assert!(unpinned.contains(&"1.34/calico/cni".to_string()));
    assert!(unpinned.contains(&"1.33/pod-identity-webhook/pod-identity-webhook".to_string()));
    assert!(unpinned.contains(&"1.33/calico/node".to_string()));
    assert!(unpinned.contains(&"1.32/amazon-vpc/aws-network-policy-agent".to_string()));
    let image = &manifest.releases["1.33"].addons[addons::COREDNS].images[addons::COREDNS];
    assert!(image
        .pinned_reference()
        .is_some_and(|r| r.starts_with("registry.k8s.io/coredns/coredns:v1.12.0@sha256:40384aa1")));
}

#[test]
fn an_image_digest_is_pinned_or_explicitly_unpinned() {
    let hex = "ab".repeat(32);
    let pinned = ImageDigest::try_from(format!("sha256:{hex}")).expect("pinned");
    assert_eq!(pinned.to_string(), format!("sha256:{hex}"));
    let image = PinnedImage {
        reference: "registry.k8s.io/coredns/coredns:v1.12.0".into(),
        digest: pinned,
        digest_kind: Some(DigestKind::Index),
        provenance: None,
        reason: None,
    };
    assert_eq!(
        image.pinned_reference().as_deref(),
        Some(format!("registry.k8s.io/coredns/coredns:v1.12.0@sha256:{hex}").as_str())
    );
    for bad in [hex.clone(), "sha256:abc".into(), format!("sha512:{hex}")] {
        let err = ImageDigest::try_from(bad.clone()).expect_err(&bad);
        assert!(err.contains("is not an image digest"), "{err}");
    }
}

#[test]
fn addon_rules_are_reported_at_once() {
    // The small manifest with a broken add-on section: every problem named with its path.
    let text = format!(
        "{SMALL}    addons:
      coredns:
        version: v1.12.0
        images:
          other:
            reference: coredns:latest
            digest: unpinned
      calico:
        version: 3.30.2
        images:
          node:
            reference: quay.io/calico/node:v3.30.2
            digest: unpinned
      flannel:
        version: 0.26.0
        manifest:
          url: http://example.invalid/flannel.yaml
          sha256: unpinned
          format: yaml
        images:
          flannel:
            reference: docker.io/flannel/flannel:v0.26.0@sha256:{}
            digest: unpinned
",
        "0".repeat(64)
    );
    let problems = problems_of(&text);
    let expected = [
        "releases.\"1.33\".addons: kube-proxy is missing",
        "releases.\"1.33\".addons.coredns.version: \"v1.12.0\" must be a version without a leading v",
        "releases.\"1.33\".addons.coredns.images: Ballast's objects run the image named \"coredns\", which is missing",
        "releases.\"1.33\".addons.coredns.images.other.reference: \"coredns:latest\" must be registry/repository:tag",
        "releases.\"1.33\".addons.calico.manifest: a CNI is installed from its upstream manifest",
        "releases.\"1.33\".addons.flannel: unknown add-on",
        "releases.\"1.33\".addons.flannel.images.flannel.reference:",
    ];
    for want in expected {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "missing {want:?} in {problems:#?}"
        );
    }
}

#[test]
fn cilium_is_rendered_by_ballast_from_exactly_its_images() {
    // Cilium with a Helm chart (what the manifest said before Ballast rendered it), an image no object runs and
    // no operator: each refused, naming the field.
    let text = format!(
        "{SMALL}    addons:
      cilium:
        version: 1.17.5
        manifest:
          url: https://helm.cilium.io/cilium-1.17.5.tgz
          sha256: unpinned
          format: helm-chart
        images:
          cilium:
            reference: quay.io/cilium/cilium:v1.17.5
            digest: unpinned
          hubble-relay:
            reference: quay.io/cilium/hubble-relay:v1.17.5
            digest: unpinned
"
    );
    let problems = problems_of(&text);
    for want in [
        "releases.\"1.33\".addons.cilium.manifest: Ballast writes this add-on's objects itself; remove the manifest",
        "releases.\"1.33\".addons.cilium.images: Ballast's Cilium objects run the image named \"operator\", which is missing",
        "releases.\"1.33\".addons.cilium.images.hubble-relay: no Cilium object Ballast renders runs it",
    ] {
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "missing {want:?} in {problems:#?}"
        );
    }
}

/// docs/addons.md's table of every pin: each value with where it was read, or why it is unpinned.
fn pins_table(manifest: &ComponentManifest) -> String {
    let mut table = String::from(
        "| release | what | sha256 or digest | provenance, or why it is unpinned |\n|---|---|---|---|\n",
    );
    for pin in manifest.pins() {
        let source = match (pin.provenance.and_then(Provenance::kind), pin.reason) {
            (
                Some(ProvenanceKind::Record {
                    repository,
                    path,
                    within,
                    commit,
                }),
                _,
            ) => {
                let within = within.map(|w| format!(" (`{w}`)")).unwrap_or_default();
                format!("{repository} `{path}`{within} @ `{commit}`")
            }
            (Some(ProvenanceKind::PinSh { source, date }), _) => {
                format!("images/pin.sh from `{source}` at {date}")
            }
            (None, Some(reason)) => format!("unpinned: {reason}"),
            (None, None) => "(none: the manifest does not parse)".to_string(),
        };
        table.push_str(&format!(
            "| {} | `{}` | `{}` | {source} |\n",
            pin.minor, pin.name, pin.value
        ));
    }
    table
}

#[test]
fn docs_addons_md_tabulates_every_pin() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/addons.md");
    let text = std::fs::read_to_string(&path).expect("docs/addons.md");
    let (begin, end) = ("<!-- pins:begin -->\n", "<!-- pins:end -->");
    let start = text.find(begin).expect("the pins:begin marker") + begin.len();
    let stop = start + text[start..].find(end).expect("the pins:end marker");
    let table = pins_table(&embedded());
    // A region of a document, not a whole file: ballast_testutil::check does not fit, its switch does.
    if ballast_testutil::blessing() {
        let blessed = format!("{}{table}{}", &text[..start], &text[stop..]);
        std::fs::write(&path, blessed).expect("writing docs/addons.md");
        return;
    }
    assert_eq!(
        &text[start..stop],
        table,
        "docs/addons.md's pins table is not the manifest's: BALLAST_BLESS=1 cargo test -p ballast-state --lib components"
    );
}

/// `SMALL` with a second release, `1.34` (at 1.34.1), and `1.33` marked past its end of life.
fn with_end_of_life(date: &str) -> String {
    let start = SMALL.find("  \"1.33\":").expect("the release");
    let block = &SMALL[start..];
    let newer = block
        .replace("1.33.4", "1.34.1")
        .replace("\"1.33\"", "\"1.34\"");
    let older = block.replacen(
        "    kubernetes: 1.33.4\n",
        &format!("    kubernetes: 1.33.4\n    endOfLife: \"{date}\"\n"),
        1,
    );
    format!("{}{newer}{older}", &SMALL[..start])
}

#[test]
fn a_release_past_its_end_of_life_is_only_upgraded_from() {
    let manifest = ComponentManifest::parse(&with_end_of_life("2026-10-28"), "eol.yaml")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(manifest.minors(), ["1.33", "1.34"]);
    assert_eq!(manifest.supported_minors(), ["1.34"]);
    // A cluster at 1.33 still finds its release (to be upgraded from it) ...
    assert!(manifest.release_exact("1.33.4").is_ok());
    // ... but a new one is refused, naming the date, what it may run and the default.
    let refused = manifest
        .new_cluster_problem("1.33.4", "1.34.1")
        .expect("1.33 is past its end of life");
    assert_eq!(
        refused.to_string(),
        "Kubernetes 1.33 reached its end of life on 2026-10-28: a new cluster runs one of 1.34 (the default is \
         1.34.1); images/manifest.yaml keeps 1.33 only so that a cluster at it can be upgraded from it, one minor \
         at a time"
    );
    assert!(manifest.new_cluster_problem("1.34.1", "1.34.1").is_none());
    assert!(manifest.new_cluster_problem("1.34", "1.34.1").is_none());
    // Not pinned at all is release_exact's to say, not this.
    assert!(manifest.new_cluster_problem("1.40.0", "1.34.1").is_none());

    for bad in ["2026-13-01", "26-10-28", "2026-10-28T00:00:00Z", "soon"] {
        let problems = problems_of(&with_end_of_life(bad));
        assert_eq!(
            problems,
            [format!(
                "releases.\"1.33\".endOfLife: {bad:?} is not a date (YYYY-MM-DD)"
            )],
            "{bad}"
        );
    }
}

/// The embedded manifest offers new clusters at least one release, and its default is one of them.
#[test]
fn the_default_release_is_one_a_new_cluster_may_run() {
    let manifest = embedded();
    let default = crate::defaults::DEFAULT_KUBERNETES_VERSION;
    assert!(!manifest.supported_minors().is_empty());
    assert!(
        manifest.new_cluster_problem(default, default).is_none(),
        "the default {default} is past its end of life"
    );
}
