use std::collections::BTreeSet;

use super::*;

fn embedded() -> ComponentManifest {
    match ComponentManifest::embedded() {
        Ok(m) => m,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_embedded_manifest_is_valid_and_pins_the_default_version() {
    let manifest = embedded();
    assert!(manifest.minors().contains(&"1.32".to_string()));
    assert!(manifest.minors().contains(&"1.33".to_string()));
    let (minor, release) = manifest
        .release_exact(crate::defaults::DEFAULT_KUBERNETES_VERSION)
        .expect("the default Kubernetes version is pinned");
    assert_eq!(minor, "1.33");
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
fn the_embedded_manifest_says_honestly_that_it_is_unpinned() {
    // Nothing could be downloaded where this manifest was written: every hash is `unpinned`, never invented.
    // When a maintainer runs images/pin.sh, this test changes with the manifest.
    let manifest = embedded();
    let all = manifest
        .releases
        .values()
        .map(|r| r.components.len())
        .sum::<usize>();
    assert_eq!(manifest.unpinned().len(), all);
    assert!(manifest.unpinned().contains(&"1.33/kubelet".to_string()));
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
    assert!(text.contains("1.32, 1.33"), "{text}");
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
        archive: tar.gz
        files:
          bin/containerd: /usr/local/bin/containerd
      runc:
        version: 1.3.0
        url: https://example.com/runc.amd64
        sha256: 0000000000000000000000000000000000000000000000000000000000000000
        archive: binary
        files:
          runc.amd64: /usr/local/sbin/runc
      kubelet:
        version: 1.33.4
        url: https://example.com/kubelet
        sha256: unpinned
        archive: binary
        versionCommand: /usr/local/bin/kubelet --version
        files:
          kubelet: /usr/local/bin/kubelet
      kubectl:
        version: 1.33.4
        url: https://example.com/kubectl
        sha256: unpinned
        archive: binary
        files:
          kubectl: /usr/local/bin/kubectl
      cni-plugins:
        version: 1.7.1
        url: https://example.com/cni.tgz
        sha256: unpinned
        archive: tar.gz
        files:
          loopback: /opt/cni/bin/loopback
      crictl:
        version: 1.33.0
        url: https://example.com/crictl.tar.gz
        sha256: unpinned
        archive: tar.gz
        files:
          crictl: /usr/local/bin/crictl
      etcd:
        version: 3.5.21
        url: https://example.com/etcd.tar.gz
        sha256: unpinned
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
            let cni = &release.addons[addons::cni_addon(networking)];
            assert!(cni.manifest.is_some(), "{minor}: {networking:?}");
        }
    }
    // Nothing could be downloaded where the manifest was written: no digest and no manifest hash is pinned.
    let every_pin = manifest
        .releases
        .values()
        .flat_map(|r| r.addons.values())
        .map(|a| a.images.len() + usize::from(a.manifest.is_some()))
        .sum::<usize>();
    assert_eq!(manifest.unpinned_addons().len(), every_pin);
    assert!(manifest
        .unpinned_addons()
        .contains(&"1.33/calico/manifest".to_string()));
    let image = &manifest.releases["1.33"].addons[addons::COREDNS].images[addons::COREDNS];
    assert_eq!(image.pinned_reference(), None);
}

#[test]
fn an_image_digest_is_pinned_or_explicitly_unpinned() {
    let hex = "ab".repeat(32);
    let pinned = ImageDigest::try_from(format!("sha256:{hex}")).expect("pinned");
    assert_eq!(pinned.to_string(), format!("sha256:{hex}"));
    let image = PinnedImage {
        reference: "registry.k8s.io/coredns/coredns:v1.12.0".into(),
        digest: pinned,
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
