//! Unit tests of the kops mapping (the cases of kops's own corpus are in `ctl/tests/kops_import.rs`).

use ballast_state::rolling_update::{IntOrPercent, RollingUpdateSpec};

use super::*;

const CLUSTER: &str = r#"
apiVersion: kops.k8s.io/v1alpha2
kind: Cluster
metadata:
  name: t.example.com
spec:
  kubernetesVersion: v1.32.0
  networking:
    calico: {}
  sshAccess: [10.0.0.0/8, "::/0"]
  subnets:
  - {name: a, zone: us-west-2a, cidr: 172.20.32.0/19, type: Private}
  - {name: utility-a, zone: us-west-2a, cidr: 172.20.0.0/22, type: Utility}
  etcdClusters:
  - name: main
    etcdMembers: [{name: a, instanceGroup: cp, encryptedVolume: true}]
  - name: events
    etcdMembers: [{name: a, instanceGroup: cp, encryptedVolume: true}]
---
apiVersion: kops.k8s.io/v1alpha2
kind: InstanceGroup
metadata:
  name: cp
  labels: {kops.k8s.io/cluster: t.example.com}
spec: {role: Master, machineType: m5.large, minSize: 1, maxSize: 1, subnets: [a], image: ballast-k8s-1.32-debian-12}
"#;

fn run(text: &str) -> Import {
    import(
        &parse_documents("t.yaml", text).expect("parses"),
        Choices::default(),
    )
}

fn fate_of<'a>(imported: &'a Import, object: &str, path: &str) -> &'a Fate {
    &imported
        .fields
        .iter()
        .find(|f| f.object == object && f.path == path)
        .unwrap_or_else(|| panic!("no fate for {object} {path}: {:#?}", imported.fields))
        .fate
}

#[test]
fn a_plain_private_cluster_maps_field_by_field() {
    let imported = run(CLUSTER);
    let config = imported.config.as_ref().expect("imported");
    let spec = &config.cluster.spec;
    // The pinned patch release of kops's minor.
    assert_eq!(spec.kubernetes_version.as_deref(), Some("1.32.8"));
    assert_eq!(spec.topology, Some(ballast_state::spec::Topology::Private));
    assert_eq!(
        spec.subnets[1].subnet_type,
        Some(ballast_state::spec::SubnetType::Public)
    );
    assert_eq!(spec.ssh_access, Some(vec!["10.0.0.0/8".to_string()]));
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.sshAccess[1]"),
        Fate::Dropped(_)
    ));
    let etcd = spec.etcd.as_ref().expect("etcd");
    assert_eq!(etcd.members.len(), 1, "events live in main's members");
    assert_eq!(etcd.encrypted_volume, Some(true));
    assert_eq!(
        config.instance_groups[0].spec.role,
        ballast_state::spec::Role::ControlPlane
    );
    assert!(imported.refused().next().is_none());
}

#[test]
fn an_unknown_field_is_refused_by_its_path_and_nothing_is_mapped() {
    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        "  somethingNew: {deep: 1}\n  kubernetesVersion:",
    );
    let imported = run(&text);
    assert!(imported.config.is_none());
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.somethingNew"),
        Fate::Refused(_)
    ));
}

#[test]
fn an_unencrypted_etcd_default_is_written_out_and_a_mismatched_events_cluster_refused() {
    let text = CLUSTER
        .replace("{name: a, instanceGroup: cp, encryptedVolume: true}]\n  - name: events", "{name: a, instanceGroup: cp}]\n  - name: events")
        .replace("  - name: events\n    etcdMembers: [{name: a, instanceGroup: cp, encryptedVolume: true}]", "  - name: events\n    etcdMembers: [{name: a, instanceGroup: other}]");
    let imported = run(&text);
    assert!(imported.config.is_none());
    assert!(matches!(
        fate_of(
            &imported,
            "Cluster/t.example.com",
            "spec.etcdClusters[1].etcdMembers"
        ),
        Fate::Refused(_)
    ));
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.etcdClusters[0].etcdMembers[0].encryptedVolume"),
        Fate::Mapped(m) if m.contains("false")
    ));
}

/// kops's `v1.34.0` (minimal-aws, privateflannel, apiservernodes) is the 1.34 release Ballast pins, mapped as is;
/// another 1.34 patch maps to it, said in the table; 1.35 is refused naming the pinned minors.
#[test]
fn kubernetes_1_34_maps_to_the_pinned_1_34_0() {
    let image =
        |text: &str| text.replace("ballast-k8s-1.32-debian-12", "ballast-k8s-1.34-debian-12");
    let imported = run(&image(&CLUSTER.replace("v1.32.0", "v1.34.0")));
    let config = imported.config.as_ref().expect("imported");
    assert_eq!(
        config.cluster.spec.kubernetes_version.as_deref(),
        Some("1.34.0")
    );
    // Past its end of life, an existing cluster is still imported at it, and told to move on.
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.kubernetesVersion"),
        Fate::Mapped(m) if m == "spec.kubernetesVersion: 1.34.0; Kubernetes 1.34 reached its end of life on \
            2026-10-28: upgrade one minor at a time to 1.35, 1.36, 1.37 (docs/upgrade.md)"
    ));
    let imported = run(&CLUSTER
        .replace("v1.32.0", "v1.36.4")
        .replace("ballast-k8s-1.32-debian-12", "ballast-k8s-1.36-debian-12"));
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.kubernetesVersion"),
        Fate::Mapped(m) if m == "spec.kubernetesVersion: 1.36.4"
    ));
    let imported = run(&image(&CLUSTER.replace("v1.32.0", "v1.34.2")));
    let config = imported.config.as_ref().expect("imported");
    assert_eq!(
        config.cluster.spec.kubernetes_version.as_deref(),
        Some("1.34.0")
    );
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.kubernetesVersion"),
        Fate::Mapped(m) if m.contains("kops asked for v1.34.2")
    ));
    let imported = run(&image(&CLUSTER.replace("v1.32.0", "v1.38.0")));
    assert!(imported.config.is_none());
    assert!(matches!(
        fate_of(&imported, "Cluster/t.example.com", "spec.kubernetesVersion"),
        Fate::Refused(r) if r.contains("1.32, 1.33, 1.34, 1.35, 1.36, 1.37")
    ));
}

#[test]
fn an_unpinned_minor_and_a_foreign_image_are_refused() {
    let text = CLUSTER.replace("v1.32.0", "v1.29.3").replace(
        "image: ballast-k8s-1.32-debian-12",
        "image: ubuntu/images/x",
    );
    let imported = run(&text);
    assert!(imported.config.is_none());
    for (object, path) in [
        ("Cluster/t.example.com", "spec.kubernetesVersion"),
        ("InstanceGroup/cp", "spec.image"),
    ] {
        assert!(
            matches!(fate_of(&imported, object, path), Fate::Refused(_)),
            "{path}"
        );
    }
}

#[test]
fn oversized_or_alias_bombed_input_is_refused_before_parsing() {
    let big = "a: b\n".repeat(ballast_state::limits::MAX_SPEC_FILE_BYTES / 5 + 1);
    assert!(parse_documents("big.yaml", &big).is_err());
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    assert!(parse_documents("bomb.yaml", &bomb).is_err());
}

/// kops's IRSA add-on fields against the IAM OIDC provider: `podIdentityWebhook.enabled` and
/// `iam.useServiceAccountExternalPermissions` map when they agree with it (true with the provider on) and are
/// refused when they do not; `certManager` is refused when kops installs it, mapped with `managed: false`, and
/// dropped when not enabled.
#[test]
fn irsa_add_on_fields_follow_the_oidc_provider_and_cert_manager_is_never_silently_dropped() {
    let with = |provider: bool, extra: &str| {
        let text = CLUSTER.replacen(
            "  kubernetesVersion: v1.32.0\n",
            &format!(
                "  kubernetesVersion: v1.32.0\n  serviceAccountIssuerDiscovery: {{discoveryStore: s3://oidc/t, enableAWSOIDCProvider: {provider}}}\n{extra}"
            ),
            1,
        );
        run(&text)
    };
    let object = "Cluster/t.example.com";
    let on = with(
        true,
        "  podIdentityWebhook: {enabled: true}\n  iam: {useServiceAccountExternalPermissions: true}\n",
    );
    assert!(on.config.is_some(), "{:#?}", on.fields);
    for path in [
        "spec.podIdentityWebhook.enabled",
        "spec.iam.useServiceAccountExternalPermissions",
    ] {
        assert!(
            matches!(fate_of(&on, object, path), Fate::Mapped(_)),
            "{path}"
        );
    }
    let off = with(
        false,
        "  podIdentityWebhook: {enabled: true}\n  iam: {useServiceAccountExternalPermissions: true}\n",
    );
    assert!(off.config.is_none());
    for path in [
        "spec.podIdentityWebhook.enabled",
        "spec.iam.useServiceAccountExternalPermissions",
    ] {
        let Fate::Refused(why) = fate_of(&off, object, path) else {
            panic!("{path} not refused without the provider");
        };
        assert!(why.contains("enableAWSOIDCProvider: true"), "{path}: {why}");
    }
    let disabled = with(
        true,
        "  podIdentityWebhook: {enabled: false}\n  iam: {useServiceAccountExternalPermissions: false}\n",
    );
    assert!(disabled.config.is_none());
    for path in [
        "spec.podIdentityWebhook.enabled",
        "spec.iam.useServiceAccountExternalPermissions",
    ] {
        assert!(
            matches!(fate_of(&disabled, object, path), Fate::Refused(_)),
            "{path}"
        );
    }

    let installed = with(true, "  certManager: {enabled: true}\n");
    assert!(installed.config.is_none());
    let Fate::Refused(why) = fate_of(&installed, object, "spec.certManager") else {
        panic!("certManager enabled is not refused");
    };
    assert!(why.contains("managed: false"), "{why}");
    let yours = with(true, "  certManager: {enabled: true, managed: false}\n");
    assert!(yours.config.is_some(), "{:#?}", yours.fields);
    assert!(matches!(
        fate_of(&yours, object, "spec.certManager"),
        Fate::Mapped(_)
    ));
    let configured = with(
        true,
        "  certManager: {enabled: true, managed: false, defaultIssuer: letsencrypt}\n",
    );
    assert!(matches!(
        fate_of(&configured, object, "spec.certManager.defaultIssuer"),
        Fate::Refused(_)
    ));
    let not_enabled = with(true, "  certManager: {enabled: false}\n");
    assert!(matches!(
        fate_of(&not_enabled, object, "spec.certManager"),
        Fate::Dropped(_)
    ));
}

/// kops's `spec.api.loadBalancer.additionalSecurityGroups` maps to the same field of Ballast, with or without
/// the type kops gave.
#[test]
fn the_api_load_balancers_security_groups_map_as_they_are() {
    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        "  api:\n    loadBalancer: {type: Internal, class: Network, additionalSecurityGroups: [sg-0aaaaaaa, sg-0123456789abcdef0]}\n  kubernetesVersion:",
    );
    let imported = run(&text);
    let config = imported.config.as_ref().expect("imported");
    let lb = config
        .cluster
        .spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
        .expect("the load balancer");
    assert_eq!(
        lb.lb_type,
        Some(ballast_state::spec::LoadBalancerType::Internal)
    );
    assert_eq!(
        lb.additional_security_groups,
        ["sg-0aaaaaaa", "sg-0123456789abcdef0"]
    );
    assert!(matches!(
        fate_of(
            &imported,
            "Cluster/t.example.com",
            "spec.api.loadBalancer.additionalSecurityGroups"
        ),
        Fate::Mapped(_)
    ));
    assert!(imported.refused().next().is_none());
    // Given without a type: the type stays to be defaulted, the groups are kept.
    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        "  api:\n    loadBalancer: {additionalSecurityGroups: [sg-0aaaaaaa]}\n  kubernetesVersion:",
    );
    let imported = run(&text);
    let config = imported.config.as_ref().expect("imported");
    let lb = config
        .cluster
        .spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
        .expect("lb");
    assert_eq!(lb.lb_type, None);
    assert_eq!(lb.additional_security_groups, ["sg-0aaaaaaa"]);
}

#[test]
fn a_groups_volumes_and_mounts_map_field_by_field_and_an_unknown_one_is_refused() {
    let group = r#"---
apiVersion: kops.k8s.io/v1alpha2
kind: InstanceGroup
metadata:
  name: nodes
  labels: {kops.k8s.io/cluster: t.example.com}
spec:
  role: Node
  machineType: m5.large
  minSize: 2
  maxSize: 2
  subnets: [a]
  image: ballast-k8s-1.32-debian-12
  volumes:
  - {device: /dev/xvdg, size: 50, type: io2, iops: 3000, encrypted: true, key: alias/data, deleteOnTermination: false}
  volumeMounts:
  - {device: /dev/xvdg, path: /data, filesystem: xfs, formatOptions: [-m, crc=1], mountOptions: [noatime]}
"#;
    let imported = run(&format!("{CLUSTER}{group}"));
    let config = imported.config.as_ref().expect("imported");
    let nodes = config.instance_group("nodes").expect("the node group");
    assert_eq!(
        nodes.spec.volumes,
        [ballast_state::spec::VolumeSpec {
            device: "/dev/xvdg".into(),
            size: Some(50),
            volume_type: Some("io2".into()),
            iops: Some(3000),
            throughput: None,
            encrypted: Some(true),
            key: Some("alias/data".into()),
            delete_on_termination: Some(false),
        }]
    );
    assert_eq!(
        nodes.spec.volume_mounts,
        [ballast_state::spec::VolumeMountSpec {
            device: "/dev/xvdg".into(),
            path: "/data".into(),
            filesystem: Some("xfs".into()),
            format_options: vec!["-m".into(), "crc=1".into()],
            mount_options: vec!["noatime".into()],
        }]
    );
    assert!(matches!(
        fate_of(&imported, "InstanceGroup/nodes", "spec.volumes[0]"),
        Fate::Mapped(_)
    ));
    assert!(imported.refused().next().is_none());

    let imported = run(&format!(
        "{CLUSTER}{}",
        group.replace("deleteOnTermination: false", "snapshotId: snap-1")
    ));
    assert!(matches!(
        fate_of(
            &imported,
            "InstanceGroup/nodes",
            "spec.volumes[0].snapshotId"
        ),
        Fate::Refused(_)
    ));
}

/// kops's `heartbeatInterval` and `leaderElectionTimeout` (Go durations) map to `spec.etcd`'s, in whole
/// milliseconds; events' are dropped (events live in main's etcd); a pair etcd refuses is refused by its path.
#[test]
fn etcd_timing_maps_from_main_and_a_pair_etcd_refuses_is_refused_by_its_path() {
    let timed = CLUSTER.replacen(
        "  - name: main\n",
        "  - name: main\n    heartbeatInterval: 50ms\n    leaderElectionTimeout: 0.5s\n",
        1,
    );
    let timed = timed.replacen(
        "  - name: events\n",
        "  - name: events\n    heartbeatInterval: 250ms\n",
        1,
    );
    let imported = run(&timed);
    let config = imported.config.as_ref().expect("imported");
    let etcd = config.cluster.spec.etcd.as_ref().expect("etcd");
    assert_eq!(etcd.heartbeat_interval.as_deref(), Some("50ms"));
    assert_eq!(etcd.leader_election_timeout.as_deref(), Some("500ms"));
    let cluster = "Cluster/t.example.com";
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[0].heartbeatInterval"),
        Fate::Mapped(to) if to == "spec.etcd.heartbeatInterval"
    ));
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[0].leaderElectionTimeout"),
        Fate::Mapped(to) if to == "spec.etcd.leaderElectionTimeout"
    ));
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[1].heartbeatInterval"),
        Fate::Dropped(_)
    ));

    // A heartbeat etcd's default election timeout (1 s) cannot hold five times: refused by its kops path.
    let too_slow = CLUSTER.replacen(
        "  - name: main\n",
        "  - name: main\n    heartbeatInterval: 300ms\n",
        1,
    );
    let imported = run(&too_slow);
    assert!(imported.config.is_none(), "a refused field imports nothing");
    match fate_of(&imported, cluster, "spec.etcdClusters[0].heartbeatInterval") {
        Fate::Refused(why) => assert!(why.contains("5 x heartbeatInterval"), "{why}"),
        other => panic!("{other:?}"),
    }
    // Beyond etcd's 50 s, and not whole milliseconds: each refused by its path, the pair's other too.
    let out_of_range = CLUSTER.replacen(
        "  - name: main\n",
        "  - name: main\n    heartbeatInterval: 100ms\n    leaderElectionTimeout: 1m\n",
        1,
    );
    let imported = run(&out_of_range);
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[0].leaderElectionTimeout"),
        Fate::Refused(why) if why.contains("5..=50000")
    ));
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[0].heartbeatInterval"),
        Fate::Refused(_)
    ));
    let fractional = CLUSTER.replacen(
        "  - name: main\n",
        "  - name: main\n    heartbeatInterval: 50.5ms\n",
        1,
    );
    let imported = run(&fractional);
    assert!(matches!(
        fate_of(&imported, cluster, "spec.etcdClusters[0].heartbeatInterval"),
        Fate::Refused(why) if why.contains("whole number of milliseconds")
    ));
}

/// A kops node group named `name` in subnet `a`, with `extra` lines under its spec.
fn node_group(name: &str, extra: &str) -> String {
    format!(
        r#"---
apiVersion: kops.k8s.io/v1alpha2
kind: InstanceGroup
metadata:
  name: {name}
  labels: {{kops.k8s.io/cluster: t.example.com}}
spec:
  role: Node
  machineType: m5.large
  minSize: 4
  maxSize: 4
  subnets: [a]
  image: ballast-k8s-1.32-debian-12
{extra}"#
    )
}

/// CLUSTER with the Cluster's `spec.rollingUpdate` set to `cluster` (a flow mapping, or "" for none) and its
/// control-plane group `cp` of up to `cp_size` instances given `cp` (", rollingUpdate: {...}", or "").
fn with_rolling_update(cluster: &str, cp_size: u32, cp: &str) -> String {
    let mut text = CLUSTER.replace(
        "maxSize: 1, subnets: [a]",
        &format!("maxSize: {cp_size}, subnets: [a]{cp}"),
    );
    if !cluster.is_empty() {
        text = text.replace(
            "  kubernetesVersion:",
            &format!("  rollingUpdate: {cluster}\n  kubernetesVersion:"),
        );
    }
    text
}

/// What a mapped field became; panics naming the field when it was not mapped.
fn mapped_to<'a>(imported: &'a Import, object: &str, path: &str) -> &'a str {
    match fate_of(imported, object, path) {
        Fate::Mapped(to) => to,
        other => panic!("{object} {path} was not mapped: {other:?}"),
    }
}

/// The imported spec's validation finds nothing wrong with any group's `rollingUpdate`.
fn assert_paces_valid(imported: &Import) {
    let errors = ballast_state::validate::validate(imported.config.as_ref().expect("imported"));
    assert!(
        errors.iter().all(|e| !e.path.contains("rollingUpdate")),
        "{errors:?}"
    );
}

fn pace_of(imported: &Import, group: &str) -> Option<RollingUpdateSpec> {
    imported
        .config
        .as_ref()
        .expect("imported")
        .instance_group(group)
        .unwrap_or_else(|| panic!("no group {group}"))
        .spec
        .rolling_update
        .clone()
}

fn int(n: i64) -> Option<IntOrPercent> {
    Some(IntOrPercent::Int(n))
}

fn percent(s: &str) -> Option<IntOrPercent> {
    Some(IntOrPercent::Text(s.to_string()))
}

/// Every refusal of `path` on `object`, one a line (a Cluster's field may be refused for several groups).
fn refusal(imported: &Import, object: &str, path: &str) -> String {
    let why: Vec<&str> = imported
        .refused()
        .filter(|f| f.object == object && f.path == path)
        .map(|f| f.fate.detail())
        .collect();
    assert!(
        !why.is_empty(),
        "{object} {path} is not refused: {:#?}",
        imported.fields
    );
    why.join("\n")
}

/// A node group's own `rollingUpdate` maps field for field; one that sets only `maxUnavailable` gets kops's
/// `maxSurge: 0` written out (Ballast's default surge is 25%); the result passes Ballast's validation.
#[test]
fn a_node_groups_rolling_update_maps_with_kops_default_surge_written_out() {
    let text = format!(
        "{CLUSTER}{}{}",
        node_group(
            "both",
            "  rollingUpdate:\n    maxSurge: 2\n    maxUnavailable: 10%\n    drainAndTerminate: true\n"
        ),
        node_group("unavailable", "  rollingUpdate: {maxUnavailable: 2}\n"),
    );
    let imported = run(&text);
    assert!(
        imported.refused().next().is_none(),
        "{:#?}",
        imported.fields
    );
    assert_eq!(
        pace_of(&imported, "both"),
        Some(RollingUpdateSpec {
            max_surge: int(2),
            max_unavailable: percent("10%"),
        })
    );
    assert!(matches!(
        fate_of(
            &imported,
            "InstanceGroup/both",
            "spec.rollingUpdate.maxSurge"
        ),
        Fate::Mapped(_)
    ));
    assert!(matches!(
        fate_of(
            &imported,
            "InstanceGroup/both",
            "spec.rollingUpdate.drainAndTerminate"
        ),
        Fate::Dropped(_)
    ));
    // kops rolls it 2 at a time with no surge, and so does Ballast with maxSurge: 0 written out.
    assert_eq!(
        pace_of(&imported, "unavailable"),
        Some(RollingUpdateSpec {
            max_surge: int(0),
            max_unavailable: int(2),
        })
    );
    let to = mapped_to(
        &imported,
        "InstanceGroup/unavailable",
        "spec.rollingUpdate.maxUnavailable",
    );
    assert!(to.contains("maxSurge: 0"), "{to}");
    assert_paces_valid(&imported);
}

/// kops's Cluster-level `rollingUpdate` is each group's default field by field, as kops resolves it: a group
/// that sets none takes both, one that sets one field takes the Cluster's other; a control-plane group takes
/// none (its `maxSurge` ignored by kops, its one-at-a-time `maxUnavailable` Ballast's own way).
#[test]
fn the_clusters_rolling_update_is_each_node_groups_default_field_by_field() {
    let text = format!(
        "{}{}{}",
        with_rolling_update("{maxSurge: 50%, maxUnavailable: 1}", 1, ""),
        node_group("plain", ""),
        node_group("own", "  rollingUpdate: {maxSurge: 1}\n"),
    );
    let imported = run(&text);
    assert!(
        imported.refused().next().is_none(),
        "{:#?}",
        imported.fields
    );
    assert_eq!(
        pace_of(&imported, "plain"),
        Some(RollingUpdateSpec {
            max_surge: percent("50%"),
            max_unavailable: int(1),
        })
    );
    assert_eq!(
        pace_of(&imported, "own"),
        Some(RollingUpdateSpec {
            max_surge: int(1),
            max_unavailable: int(1),
        })
    );
    assert_eq!(pace_of(&imported, "cp"), None);
    let to = mapped_to(
        &imported,
        "Cluster/t.example.com",
        "spec.rollingUpdate.maxSurge",
    );
    assert!(to.contains("Ballast has no Cluster-level field"), "{to}");
    assert_paces_valid(&imported);
    // Without a Cluster-level field or a group's own, a group keeps Ballast's defaults.
    let imported = run(&format!("{CLUSTER}{}", node_group("plain", "")));
    assert_eq!(pace_of(&imported, "plain"), None);
}

/// A control-plane group's `rollingUpdate` that rolls it one instance at a time, as Ballast always does, is
/// dropped with why; a surge, more than one at a time, or kops's "off" is refused naming the field.
#[test]
fn a_control_plane_rolling_update_is_dropped_when_one_at_a_time_and_refused_otherwise() {
    // maxSurge 0 and maxUnavailable 1; 50% of a group of one and 33% of three, which kops round down to 0
    // and then take as 1.
    for (size, cp) in [
        (3, ", rollingUpdate: {maxSurge: 0, maxUnavailable: 1}"),
        (3, ", rollingUpdate: {maxSurge: 0%, maxUnavailable: 1}"),
        (1, ", rollingUpdate: {maxUnavailable: 50%}"),
        (3, ", rollingUpdate: {maxUnavailable: 33%}"),
    ] {
        let imported = run(&with_rolling_update("", size, cp));
        assert!(
            imported.refused().next().is_none(),
            "{cp}: {:#?}",
            imported.fields
        );
        assert_eq!(pace_of(&imported, "cp"), None, "{cp}");
        let Fate::Dropped(why) = fate_of(
            &imported,
            "InstanceGroup/cp",
            "spec.rollingUpdate.maxUnavailable",
        ) else {
            panic!("{cp}: not dropped");
        };
        assert!(why.contains("one instance at a time"), "{why}");
    }
    let imported = run(&with_rolling_update(
        "",
        3,
        ", rollingUpdate: {maxSurge: 0, maxUnavailable: 1}",
    ));
    assert!(matches!(
        fate_of(&imported, "InstanceGroup/cp", "spec.rollingUpdate.maxSurge"),
        Fate::Dropped(_)
    ));

    // Two of three at once.
    let imported = run(&with_rolling_update(
        "",
        3,
        ", rollingUpdate: {maxUnavailable: 2}",
    ));
    assert!(imported.config.is_none());
    let why = refusal(
        &imported,
        "InstanceGroup/cp",
        "spec.rollingUpdate.maxUnavailable",
    );
    assert!(
        why.contains("up to 2") && why.contains("one instance at a time"),
        "{why}"
    );
    // 67% of three rounds down to 2.
    let imported = run(&with_rolling_update(
        "",
        3,
        ", rollingUpdate: {maxUnavailable: 67%}",
    ));
    assert!(refusal(
        &imported,
        "InstanceGroup/cp",
        "spec.rollingUpdate.maxUnavailable"
    )
    .contains("up to 2"));
    // A surge on the control plane.
    let imported = run(&with_rolling_update(
        "",
        1,
        ", rollingUpdate: {maxSurge: 1}",
    ));
    assert!(
        refusal(&imported, "InstanceGroup/cp", "spec.rollingUpdate.maxSurge")
            .contains("cannot surge")
    );
    // kops's "off": 0 unavailable and no surge.
    let imported = run(&with_rolling_update(
        "",
        1,
        ", rollingUpdate: {maxUnavailable: 0}",
    ));
    assert!(refusal(
        &imported,
        "InstanceGroup/cp",
        "spec.rollingUpdate.maxUnavailable"
    )
    .contains("off"));
}

/// The Cluster's `maxUnavailable` applies to control-plane groups in kops: one that would take more than one
/// instance of a control-plane group down at once is refused on the Cluster, naming the group; one that means
/// one at a time there is taken (only the node groups get it).
#[test]
fn the_clusters_max_unavailable_is_refused_where_it_would_roll_the_control_plane_faster() {
    let imported = run(&with_rolling_update("{maxUnavailable: 2}", 3, ""));
    assert!(imported.config.is_none());
    let why = refusal(
        &imported,
        "Cluster/t.example.com",
        "spec.rollingUpdate.maxUnavailable",
    );
    assert!(
        why.contains("InstanceGroup/cp") && why.contains("up to 2"),
        "{why}"
    );
    // The group's own one-at-a-time value wins over the Cluster's, as in kops.
    let imported = run(&format!(
        "{}{}",
        with_rolling_update(
            "{maxUnavailable: 2}",
            3,
            ", rollingUpdate: {maxUnavailable: 1}"
        ),
        node_group("nodes", ""),
    ));
    assert!(
        imported.refused().next().is_none(),
        "{:#?}",
        imported.fields
    );
    assert_eq!(
        pace_of(&imported, "nodes"),
        Some(RollingUpdateSpec {
            max_surge: int(0),
            max_unavailable: int(2),
        })
    );
    // On control-plane groups of one (kops's HA layout: a group per zone), 2 unavailable is one at a time.
    let imported = run(&with_rolling_update("{maxUnavailable: 2}", 1, ""));
    assert!(
        imported.refused().next().is_none(),
        "{:#?}",
        imported.fields
    );
}

/// What Ballast cannot take is refused by its path: kops's "off" on a node group (0 unavailable, no surge, from
/// the group or the Cluster), `drainAndTerminate: false`, values outside Ballast's bounds or not a number, and
/// any other field.
#[test]
fn a_rolling_update_ballast_cannot_take_is_refused_by_its_path() {
    for (extra, path, says) in [
        (
            "  rollingUpdate: {maxUnavailable: 0}\n",
            "spec.rollingUpdate.maxUnavailable",
            "off",
        ),
        (
            "  rollingUpdate: {drainAndTerminate: false}\n",
            "spec.rollingUpdate.drainAndTerminate",
            "drains and terminates",
        ),
        (
            "  rollingUpdate: {maxSurge: 5000}\n",
            "spec.rollingUpdate.maxSurge",
            "0 to 1000",
        ),
        (
            "  rollingUpdate: {maxSurge: 150%}\n",
            "spec.rollingUpdate.maxSurge",
            "0% to 100%",
        ),
        (
            "  rollingUpdate: {maxSurge: lots}\n",
            "spec.rollingUpdate.maxSurge",
            "neither a count",
        ),
        (
            "  rollingUpdate: {maxSurge: 1.5}\n",
            "spec.rollingUpdate.maxSurge",
            "not a whole number",
        ),
        (
            "  rollingUpdate: {maxSurge: 1, somethingNew: 3}\n",
            "spec.rollingUpdate.somethingNew",
            "no equivalent",
        ),
        (
            "  rollingUpdate: 3\n",
            "spec.rollingUpdate",
            "not a mapping",
        ),
    ] {
        let imported = run(&format!("{CLUSTER}{}", node_group("nodes", extra)));
        assert!(imported.config.is_none(), "{extra}");
        let why = refusal(&imported, "InstanceGroup/nodes", path);
        assert!(why.contains(says), "{extra}: {why}");
    }
    // The Cluster's 0 unavailable turns off every group's roll in kops: refused on the Cluster, naming the group.
    let imported = run(&format!(
        "{}{}",
        with_rolling_update("{maxUnavailable: 0}", 1, ""),
        node_group("nodes", ""),
    ));
    let why = refusal(
        &imported,
        "Cluster/t.example.com",
        "spec.rollingUpdate.maxUnavailable",
    );
    assert!(
        why.contains("InstanceGroup/nodes")
            && why.contains("InstanceGroup/cp")
            && why.contains("off"),
        "{why}"
    );
    // A surge of its own turns it back on: that group is taken (the control plane's is refused, as above).
    let imported = run(&format!(
        "{CLUSTER}{}",
        node_group(
            "nodes",
            "  rollingUpdate: {maxUnavailable: 0, maxSurge: 1}\n"
        )
    ));
    assert_eq!(
        pace_of(&imported, "nodes"),
        Some(RollingUpdateSpec {
            max_surge: int(1),
            max_unavailable: int(0),
        })
    );
}

/// A service account whose role name kops shortens: mapped, its new name and kops's both named; one that fits
/// keeps kops's name and is mapped plainly.
#[test]
fn a_role_name_kops_shortened_is_mapped_under_ballasts_name_saying_so() {
    use ballast_state::irsa::naming::{kops_role_name, service_account_role_name};
    let long = "a-service-account-whose-name-is-long-enough-to-be-shortened";
    let with = |name: &str| {
        run(&CLUSTER.replacen(
            "  kubernetesVersion: v1.32.0\n",
            &format!(
                "  kubernetesVersion: v1.32.0\n  serviceAccountIssuerDiscovery: {{discoveryStore: s3://oidc/t, \
                 enableAWSOIDCProvider: true}}\n  iam:\n    serviceAccountExternalPermissions:\n    - {{name: {name}, \
                 namespace: team-a, aws: {{policyARNs: [arn:aws:iam::aws:policy/ReadOnlyAccess]}}}}\n"
            ),
            1,
        ))
    };
    let path = "spec.iam.serviceAccountExternalPermissions";
    let object = "Cluster/t.example.com";
    let short = with("reports");
    assert_eq!(mapped_to(&short, object, path), path);
    let renamed = with(long);
    assert!(renamed.config.is_some(), "{:#?}", renamed.fields);
    let kops = kops_role_name(long, "team-a", "t.example.com");
    let ballast = service_account_role_name(long, "team-a", "t.example.com");
    assert_ne!(kops, ballast);
    assert_eq!(
        mapped_to(&renamed, object, path),
        format!(
            "{path} (roles whose names kops shortened get a new name, team-a/{long}: kops's role {kops} is made \
             anew as {ballast}; point what names the old role's ARN at the new one, then delete the old role: \
             docs/irsa.md, \"Role names\")"
        )
    );
}

/// A cluster's `kubelet.evictionHard` is kept in kops's form when every threshold reads; a bad one is refused
/// naming it, as is a group's.
#[test]
fn eviction_hard_maps_from_the_cluster_when_it_reads() {
    let thresholds = "memory.available<100Mi,nodefs.available<5%";
    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        &format!("  kubelet: {{evictionHard: \"{thresholds}\"}}\n  kubernetesVersion:"),
    );
    let imported = run(&text);
    assert_eq!(
        mapped_to(
            &imported,
            "Cluster/t.example.com",
            "spec.kubelet.evictionHard"
        ),
        "spec.kubelet.evictionHard"
    );
    let config = imported.config.as_ref().expect("imported");
    let kubelet = config.cluster.spec.kubelet.as_ref().expect("kubelet");
    assert_eq!(kubelet.eviction_hard.as_deref(), Some(thresholds));

    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        "  kubelet: {evictionHard: \"nodefs.available<200%\"}\n  kubernetesVersion:",
    );
    let why = refusal(
        &run(&text),
        "Cluster/t.example.com",
        "spec.kubelet.evictionHard",
    );
    assert!(why.contains("from 0% to 100%"), "{why}");
    let text = format!(
        "{CLUSTER}{}",
        node_group(
            "nodes",
            "  kubelet: {evictionHard: \"memory.available<1Mi\"}\n"
        )
    );
    let why = refusal(
        &run(&text),
        "InstanceGroup/nodes",
        "spec.kubelet.evictionHard",
    );
    assert!(
        why.contains("set spec.kubelet.evictionHard on the cluster"),
        "{why}"
    );
}

/// A cluster's `kubelet.failCgroupV1` is kept as `spec.kubelet.failCgroupV1`; a group's is refused by its path
/// (Ballast has no per-group kubelet settings), never dropped.
#[test]
fn fail_cgroup_v1_maps_from_the_cluster_and_is_refused_on_a_group() {
    let text = CLUSTER.replace(
        "  kubernetesVersion:",
        "  kubelet: {anonymousAuth: false, failCgroupV1: false}\n  kubernetesVersion:",
    );
    let imported = run(&text);
    assert_eq!(
        mapped_to(
            &imported,
            "Cluster/t.example.com",
            "spec.kubelet.failCgroupV1"
        ),
        "spec.kubelet.failCgroupV1"
    );
    let config = imported.config.as_ref().expect("imported");
    assert_eq!(
        config.cluster.spec.kubelet,
        Some(ballast_state::spec::KubeletSpec {
            fail_cgroup_v1: Some(false),
            eviction_hard: None,
        })
    );

    let text = format!(
        "{CLUSTER}{}",
        node_group("nodes", "  kubelet: {failCgroupV1: true}\n")
    );
    let imported = run(&text);
    let why = refusal(
        &imported,
        "InstanceGroup/nodes",
        "spec.kubelet.failCgroupV1",
    );
    assert!(
        why.contains("set spec.kubelet.failCgroupV1 on the cluster"),
        "{why}"
    );
}
