//! API-server groups (`role: ApiServer`) in the plan model (`ballast::cloud::model::cluster_model`,
//! `ctl/src/cloud/api_servers.rs`): what they open and reach, and what their role may read; and validation.

use ballast::cloud::model::{cluster_model, IngressRule, Source, StateLocation};
use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::spec::{ClusterConfig, InstanceGroup, InstanceGroupSpec, Role};
use ballast_state::validate::validate;

const ETCD_CLIENT_PORT: i32 = 2379;
const ETCD_PEER_PORT: i32 = 2380;

fn config(with_api_servers: bool) -> ClusterConfig {
    let mut config = generate(&ClusterTemplate {
        name: "api.example.com".into(),
        zones: vec!["us-west-2a".into()],
        ssh_access: vec!["203.0.113.0/24".into()],
        ..Default::default()
    })
    .expect("template");
    config.cluster.spec.kubernetes_api_access = Some(vec!["198.51.100.0/24".into()]);
    if with_api_servers {
        config.instance_groups.push(InstanceGroup::new(
            "apiserver",
            InstanceGroupSpec::with_role(Role::ApiServer),
        ));
    }
    complete(&config)
}

fn state() -> StateLocation {
    StateLocation::from_url("s3://state/clusters").expect("s3")
}

fn rule(protocol: &str, from_port: i32, to_port: i32, source: Source) -> IngressRule {
    IngressRule {
        protocol: protocol.into(),
        from_port,
        to_port,
        source,
    }
}

#[test]
fn a_cluster_without_api_servers_has_no_api_server_resources() {
    let model = cluster_model(&config(false), &state());
    assert!(model
        .security_groups
        .iter()
        .all(|g| g.role != Role::ApiServer));
    assert!(model.roles.iter().all(|r| r.role != Role::ApiServer));
    for group in &model.security_groups {
        assert!(
            group
                .rules
                .iter()
                .all(|r| r.source != Source::Group(Role::ApiServer)),
            "{group:?}"
        );
    }
}

#[test]
fn api_servers_reach_etcds_client_port_and_never_its_peer_port() {
    let config = config(true);
    // nodeup runs kube-apiserver on such a node (docs/nodeup.md, "API-server nodes"): the group is valid.
    let errors: Vec<String> = validate(&config).iter().map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let model = cluster_model(&config, &state());
    let group = |role: Role| {
        model
            .security_groups
            .iter()
            .find(|g| g.role == role)
            .expect("group")
    };
    let from_api: Vec<&IngressRule> = group(Role::ControlPlane)
        .rules
        .iter()
        .filter(|r| r.source == Source::Group(Role::ApiServer))
        .collect();
    let reaches = |port: i32| {
        from_api.iter().any(|r| {
            (r.protocol == "tcp" || r.protocol == "-1") && r.from_port <= port && port <= r.to_port
        })
    };
    assert!(reaches(ETCD_CLIENT_PORT), "{from_api:?}");
    assert!(reaches(443), "{from_api:?}");
    assert!(!reaches(ETCD_PEER_PORT), "{from_api:?}");
    assert!(from_api.iter().all(|r| r.protocol != "-1"), "{from_api:?}");
    // Nodes still reach neither etcd port.
    assert!(group(Role::ControlPlane)
        .rules
        .iter()
        .filter(|r| r.source == Source::Group(Role::Node) && r.protocol == "tcp")
        .all(|r| r.to_port < ETCD_CLIENT_PORT || r.from_port > ETCD_PEER_PORT));
    // The API port is open on the API servers' own group to the API's clients and the VPC (the load balancer
    // keeps clients' addresses and health-checks from inside it), SSH as for every instance.
    let own = group(Role::ApiServer);
    assert_eq!(own.name, "api-servers.api.example.com");
    for cidr in ["198.51.100.0/24", "172.20.0.0/16"] {
        assert!(
            own.rules
                .contains(&rule("tcp", 443, 443, Source::Cidr(cidr.into()))),
            "{cidr}: {own:?}"
        );
    }
    assert!(own
        .rules
        .contains(&rule("tcp", 22, 22, Source::Cidr("203.0.113.0/24".into()))));
    assert!(group(Role::Node)
        .rules
        .contains(&rule("-1", -1, -1, Source::Group(Role::ApiServer))));
    // Its instances are behind the API's target group, with their own profile.
    let api = model
        .groups
        .iter()
        .find(|g| g.name == "apiserver")
        .expect("the group");
    assert_eq!(api.role, Role::ApiServer);
    assert_eq!(api.tags["ballast.dev/role"], "api-server");
}

#[test]
fn the_api_server_role_reads_what_its_api_server_needs_and_nothing_of_etcds() {
    let model = cluster_model(&config(true), &state());
    let role = model
        .roles
        .iter()
        .find(|r| r.role == Role::ApiServer)
        .expect("the API-server role");
    assert_eq!(role.name, "api-servers.api.example.com");
    let policy: serde_json::Value = serde_json::from_str(&role.policy).expect("policy JSON");
    let text = policy.to_string();
    let prefix = "arn:aws:s3:::state/clusters/api.example.com";
    for readable in [
        "nodes/apiserver/*",
        "pki/kubernetes-ca/key.pem",
        "pki/etcd-ca/cert.pem",
        "pki/etcd-client-api-server/cert.pem",
        "pki/etcd-client-api-server/key.pem",
        "pki/service-account/*",
        "secrets/encryption-keys.yaml",
    ] {
        assert!(
            text.contains(&format!("\"{prefix}/{readable}\"")),
            "{readable}: {text}"
        );
    }
    // The etcd client pair issued for API servers is the API-server role's: the nodes' role reads no part of it.
    let nodes = model
        .roles
        .iter()
        .find(|r| r.role == Role::Node)
        .expect("the nodes' role");
    for never in [
        "etcd-client-api-server",
        "key.pem",
        "pki/*",
        "api.example.com/*\"",
    ] {
        assert!(!nodes.policy.contains(never), "{never}: {}", nodes.policy);
    }
    for never in [
        "etcd-ca/key.pem",
        "etcd-ca/*/key.pem",
        "/etcd/",
        "s3:ListBucket",
        "s3:DeleteObject",
        "nodes/nodes/",
        "ec2:AttachVolume",
        "iam:GetInstanceProfile",
        "api.example.com/*\"",
    ] {
        assert!(!text.contains(never), "{never}: {text}");
    }
}

#[test]
fn validation_bounds_api_server_groups_and_wants_a_control_plane() {
    let mut config = config(true);
    let group = config
        .instance_groups
        .iter_mut()
        .find(|g| g.metadata.name == "apiserver")
        .expect("group");
    group.spec.max_size = Some(21);
    let errors: Vec<String> = validate(&config).iter().map(|e| e.to_string()).collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("InstanceGroup/apiserver") && e.contains("spec.maxSize")),
        "{errors:?}"
    );
    let mut without_control_plane = self::config(true);
    without_control_plane
        .instance_groups
        .retain(|g| g.spec.role != Role::ControlPlane);
    let errors: Vec<String> = validate(&without_control_plane)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.iter().any(|e| e.contains("InstanceGroup/apiserver")
            && e.contains("spec.role")
            && e.contains("ControlPlane")),
        "{errors:?}"
    );
}

/// The etcd client pair `update cluster` issues for API servers: signed by the etcd CA, client authentication
/// only; it stays while it is that CA's, its key's and has more than the renewal margin left, and is issued
/// again otherwise (another CA after a rotation, a torn pair, expiring).
#[test]
fn the_api_servers_etcd_client_pair_is_the_etcd_cas_and_renewed_before_it_expires() {
    use ballast::cloud::api_servers::{
        etcd_client_pair_fits, issue_etcd_client_pair, ETCD_CLIENT_RENEW_BEFORE_DAYS,
        ETCD_CLIENT_VALIDITY_DAYS,
    };
    let ca = ballast_state::pki::generate_ca("etcd-ca", "etcd CA").expect("an etcd CA");
    let other = ballast_state::pki::generate_ca("etcd-ca", "etcd CA").expect("another etcd CA");
    let now = time::OffsetDateTime::now_utc();
    let (cert, key) = issue_etcd_client_pair(&ca.cert_pem, &ca.key_pem, now).expect("issued");
    assert!(etcd_client_pair_fits(
        cert.as_bytes(),
        key.as_bytes(),
        ca.cert_pem.as_bytes(),
        now
    ));
    // Another CA of the same name (a rotation): issued again.
    assert!(!etcd_client_pair_fits(
        cert.as_bytes(),
        key.as_bytes(),
        other.cert_pem.as_bytes(),
        now
    ));
    // A torn pair (a certificate with another key): issued again.
    let (_, other_key) = issue_etcd_client_pair(&ca.cert_pem, &ca.key_pem, now).expect("issued");
    assert!(!etcd_client_pair_fits(
        cert.as_bytes(),
        other_key.as_bytes(),
        ca.cert_pem.as_bytes(),
        now
    ));
    // Within the renewal margin of its end: issued again.
    let late =
        now + time::Duration::days(ETCD_CLIENT_VALIDITY_DAYS - ETCD_CLIENT_RENEW_BEFORE_DAYS + 1);
    assert!(!etcd_client_pair_fits(
        cert.as_bytes(),
        key.as_bytes(),
        ca.cert_pem.as_bytes(),
        late
    ));
    assert!(!etcd_client_pair_fits(
        b"",
        b"",
        ca.cert_pem.as_bytes(),
        now
    ));
    // What it says: the API server's etcd client subject, client authentication, no names.
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).expect("PEM");
    let parsed = pem.parse_x509().expect("X.509");
    assert_eq!(
        parsed
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok()),
        Some("kube-apiserver-etcd-client")
    );
    let eku = parsed
        .extended_key_usage()
        .expect("parses")
        .expect("an extended key usage");
    assert!(eku.value.client_auth && !eku.value.server_auth);
    assert!(parsed.subject_alternative_name().expect("parses").is_none());
    // rcgen's CA can verify it: the issuer is the CA's subject.
    assert_eq!(
        parsed.issuer().as_raw(),
        x509_parser::pem::parse_x509_pem(ca.cert_pem.as_bytes())
            .expect("CA PEM")
            .1
            .parse_x509()
            .expect("CA")
            .subject()
            .as_raw()
    );
}
