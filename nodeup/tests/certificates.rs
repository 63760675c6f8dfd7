//! Certificates issued on a control-plane node: their names (the load balancer's among the API server's SANs,
//! 127.0.0.1 in the etcd peer certificate on a loopback IP), their issuers, and that a certificate that still
//! fits is kept while one that no longer does is issued again.

use std::net::IpAddr;

use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::node::render_node_spec;
use ballast_state::pki::ClusterSecrets;
use nodeup::certs::{cert_facts, issue_all, names, plan};
use nodeup::render::{ControlPlaneSecrets, NodeFacts};

const LB: &str = "api-demo-0123.elb.us-west-2.amazonaws.com";

fn setup(ip: &str) -> (ballast_state::node::NodeSpec, NodeFacts, ClusterSecrets) {
    let config = complete(
        &generate(&ClusterTemplate {
            name: "demo.example.com".into(),
            zones: vec!["us-west-2a".into()],
            ..Default::default()
        })
        .expect("template"),
    );
    let spec = render_node_spec(&config, "control-plane-us-west-2a", "s3://b/p", LB)
        .expect("spec")
        .spec;
    let node = NodeFacts {
        instance_id: "i-1".into(),
        private_ip: ip.into(),
        hostname: "ip-x.us-west-2.compute.internal".into(),
        availability_zone: "us-west-2a".into(),
        resolv_conf: nodeup::model::RESOLVED_RESOLV_CONF.into(),
        baked_images: Default::default(),
        oom_scores_restricted: false,
    };
    (
        spec,
        node,
        ClusterSecrets::generate("demo.example.com").expect("secrets"),
    )
}

fn cp(s: &ClusterSecrets) -> ControlPlaneSecrets {
    ControlPlaneSecrets {
        kubernetes_ca_key: s.kubernetes_ca.key_pem.clone(),
        etcd_ca_cert: s.etcd_ca.cert_pem.clone(),
        etcd_ca_key: s.etcd_ca.key_pem.clone(),
        etcd_ca_trusted: Vec::new(),
        service_account_key: s.service_account_key_pem.clone(),
        service_account_public_key: s.service_account_public_pem.clone(),
        service_account_verify_keys: Vec::new(),
        encryption_keys: None,
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("ip")
}

#[test]
fn names_and_issuers_are_right() {
    let (spec, node, secrets) = setup("127.16.1.4");
    let plans = plan(&spec, &node);
    let now = time::OffsetDateTime::now_utc();
    let (files, outcomes) = issue_all(
        &plans,
        &cp(&secrets),
        &secrets.kubernetes_ca.cert_pem,
        |_| None,
        now,
    )
    .expect("issue");
    assert!(outcomes.iter().all(|o| !o.kept));
    let file = |p: &str| {
        files
            .iter()
            .find(|f| f.path == p)
            .unwrap_or_else(|| panic!("{p}"))
    };
    let k8s_ca = cert_facts(secrets.kubernetes_ca.cert_pem.as_bytes()).expect("ca");
    let etcd_ca = cert_facts(secrets.etcd_ca.cert_pem.as_bytes()).expect("ca");

    let api = cert_facts(&file(&format!("{}.crt", names::API_SERVER)).content).expect("apiserver");
    assert!(api.dns_names.contains(LB), "{:?}", api.dns_names);
    assert!(api
        .dns_names
        .contains("kubernetes.default.svc.cluster.local"));
    assert!(api.ips.contains(&ip("127.16.1.4")) && api.ips.contains(&ip("100.64.0.1")));
    assert_eq!(api.issuer_raw, k8s_ca.subject_raw);

    let peer = cert_facts(&file(&format!("{}.crt", names::ETCD_PEER)).content).expect("peer");
    assert_eq!(
        peer.ips.iter().copied().collect::<Vec<_>>(),
        [ip("127.0.0.1"), ip("127.16.1.4")]
    );
    assert_eq!(peer.issuer_raw, etcd_ca.subject_raw);
    let etcd_client =
        cert_facts(&file(&format!("{}.crt", names::API_SERVER_ETCD_CLIENT)).content).expect("c");
    assert_eq!(etcd_client.issuer_raw, etcd_ca.subject_raw);
    let kubelet =
        cert_facts(&file(&format!("{}.crt", names::KUBELET_CLIENT)).content).expect("kubelet");
    assert_eq!(
        kubelet.common_name,
        "system:node:ip-x.us-west-2.compute.internal"
    );
    assert_eq!(kubelet.organization.as_deref(), Some("system:nodes"));
    for f in files.iter().filter(|f| f.path.ends_with(".key")) {
        assert_eq!(f.mode, 0o600, "{}", f.path);
    }

    // A second pass with these files on the node keeps every one of them, byte for byte.
    let existing = |p: &str| {
        files
            .iter()
            .find(|f| f.path == p)
            .map(|f| f.content.clone())
    };
    let (again, outcomes) = issue_all(
        &plans,
        &cp(&secrets),
        &secrets.kubernetes_ca.cert_pem,
        existing,
        now,
    )
    .expect("issue");
    assert!(outcomes.iter().all(|o| o.kept));
    assert_eq!(again, files);

    // Another CA (a new cluster's): every certificate is issued again.
    let other = ClusterSecrets::generate("demo.example.com").expect("secrets");
    let (_, outcomes) = issue_all(
        &plans,
        &cp(&other),
        &other.kubernetes_ca.cert_pem,
        existing,
        now,
    )
    .expect("issue");
    assert!(outcomes.iter().all(|o| !o.kept));
}

#[test]
fn on_a_routable_ip_the_peer_certificate_names_only_it() {
    let (spec, node, _) = setup("10.0.1.10");
    let peer = plan(&spec, &node)
        .into_iter()
        .find(|p| p.cert_path == format!("{}.crt", names::ETCD_PEER))
        .expect("peer");
    assert_eq!(peer.ips, [ip("10.0.1.10")]);
}
