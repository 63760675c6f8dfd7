//! Which certificates a control-plane node issues for itself, and what each must say: its paths, its signer,
//! its subject, its names (SANs), its usages and how long it lives. Pure: a node spec and the node's facts in,
//! a list of [`CertPlan`]s out; no clock, no keys. [`crate::certs`] issues them (rcgen and the clock).
//!
//! The certificates: the API server's serving certificate (the load balancer's name among its SANs), its
//! clients of the kubelets and of etcd, etcd's server, peer and client certificates, and the client
//! certificates of the controller manager, the scheduler and the node's own kubelet, the kubelet's serving
//! certificate, and the node bootstrap service's serving certificate. Workers plan none: theirs comes from that service (crate::bootstrap).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use ballast_state::node::NodeSpec;
use time::Duration;

use crate::model::{pki, NodeFacts};

/// Leaf certificates live a year; nodeup renews them when fewer than 30 days are left.
pub const VALIDITY: Duration = Duration::days(365);
pub const RENEW_BEFORE: Duration = Duration::days(30);

/// How long a worker's kubelet client certificate lives (issued by the bootstrap service, crate::bootstrap::issue):
/// the kubelet renews it through the API (`rotateCertificates`, approved for `system:nodes` renewing their own),
/// and nodeup asks again at boot when fewer than [`NODE_CERT_RENEW_BEFORE`] are left.
pub const NODE_CERT_VALIDITY: Duration = Duration::days(30);
pub const NODE_CERT_RENEW_BEFORE: Duration = Duration::days(7);

/// Which CA signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signer {
    Kubernetes,
    Etcd,
}

/// What one certificate must say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertPlan {
    pub cert_path: String,
    pub key_path: String,
    pub signer: Signer,
    pub common_name: String,
    pub organization: Option<String>,
    /// Sorted.
    pub dns_names: Vec<String>,
    /// Sorted.
    pub ips: Vec<IpAddr>,
    pub server: bool,
    pub client: bool,
    /// How long a new certificate lives.
    pub validity: Duration,
    /// A certificate on the node with less than this left is issued again.
    pub renew_before: Duration,
}

impl CertPlan {
    fn new(
        stem: &str,
        signer: Signer,
        cn: &str,
        org: Option<&str>,
        server: bool,
        client: bool,
    ) -> Self {
        CertPlan {
            cert_path: pki::cert(stem),
            key_path: pki::key(stem),
            signer,
            common_name: cn.to_string(),
            organization: org.map(str::to_string),
            dns_names: Vec::new(),
            ips: Vec::new(),
            server,
            client,
            validity: VALIDITY,
            renew_before: RENEW_BEFORE,
        }
    }

    /// The subject alternative names: empty DNS names dropped, both lists sorted and without duplicates.
    fn names(mut self, dns: &[&str], ips: &[IpAddr]) -> Self {
        let dns: BTreeSet<String> = dns
            .iter()
            .filter(|d| !d.is_empty())
            .map(|d| d.to_string())
            .collect();
        let ips: BTreeSet<IpAddr> = ips.iter().copied().collect();
        self.dns_names = dns.into_iter().collect();
        self.ips = ips.into_iter().collect();
        self
    }

    /// One line for the golden files: path, signer, subject and names.
    pub fn summary(&self) -> String {
        let ips: Vec<String> = self.ips.iter().map(IpAddr::to_string).collect();
        format!(
            "{} signer={:?} cn={} o={} server={} client={} dns=[{}] ip=[{}]",
            self.cert_path,
            self.signer,
            self.common_name,
            self.organization.as_deref().unwrap_or("-"),
            self.server,
            self.client,
            self.dns_names.join(","),
            ips.join(",")
        )
    }
}

/// The first address of a CIDR (`100.64.0.0/13` -> `100.64.0.1`): the `kubernetes` service's IP.
pub fn first_service_ip(cidr: &str) -> Option<IpAddr> {
    let base: Ipv4Addr = cidr.split('/').next()?.parse().ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(u32::from(base).checked_add(1)?)))
}

/// The API server's serving certificate: the load balancer's name (clients and kubelets elsewhere reach the API
/// through it), the node's name and private IP (the kubelet on the node and the other API servers' endpoints),
/// the `kubernetes` service's names and IP (pods), and localhost. The same on a control-plane and an API-server
/// node.
fn api_server_serving(spec: &NodeSpec, node: &NodeFacts) -> CertPlan {
    let own_ips: Vec<IpAddr> = node.private_ip.parse().ok().into_iter().collect();
    let lb_name = spec
        .api_server_endpoint
        .rsplit_once(':')
        .map(|(host, _)| host)
        .unwrap_or(&spec.api_server_endpoint);
    let svc_domain = format!("kubernetes.default.svc.{}", spec.cluster_domain);
    let mut api_ips = own_ips;
    api_ips.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
    api_ips.extend(first_service_ip(&spec.service_cidr));
    CertPlan::new(
        pki::API_SERVER,
        Signer::Kubernetes,
        "kube-apiserver",
        None,
        true,
        false,
    )
    .names(
        &[
            lb_name,
            node.hostname.as_str(),
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            &svc_domain,
            "localhost",
        ],
        &api_ips,
    )
}

/// The API server's client certificate of the kubelets (logs, exec, port-forward).
fn api_server_kubelet_client() -> CertPlan {
    CertPlan::new(
        pki::API_SERVER_KUBELET_CLIENT,
        Signer::Kubernetes,
        "kube-apiserver-kubelet-client",
        Some("system:masters"),
        false,
        true,
    )
}

/// The node's own kubelet's client certificate, issued on the node (control plane and API-server nodes, which
/// hold the Kubernetes CA's key).
fn kubelet_client(host: &str) -> CertPlan {
    CertPlan::new(
        pki::KUBELET_CLIENT,
        Signer::Kubernetes,
        &format!("system:node:{host}"),
        Some("system:nodes"),
        false,
        true,
    )
}

/// The certificates an API-server node (role `ApiServer`) issues for itself, all signed by the Kubernetes CA:
/// its API server's serving and kubelet-client certificates, and its kubelet's client and serving ones. Nothing
/// signed by the etcd CA (the node holds no etcd CA key: its API server's etcd client pair comes issued from the
/// state store, `pki/etcd-client-api-server/`), no etcd member's, no controller manager's or scheduler's, no
/// bootstrap service's.
pub fn api_server_node_plan(spec: &NodeSpec, node: &NodeFacts) -> Vec<CertPlan> {
    let own_ips: Vec<IpAddr> = node.private_ip.parse().ok().into_iter().collect();
    vec![
        api_server_serving(spec, node),
        api_server_kubelet_client(),
        kubelet_client(&node.hostname),
        kubelet_serving(&node.hostname, &own_ips),
    ]
}

/// The certificates of a control-plane node, or of an API-server node ([`api_server_node_plan`]); none for
/// workers: the bootstrap service issues theirs.
pub fn plan(spec: &NodeSpec, node: &NodeFacts) -> Vec<CertPlan> {
    if spec.api_server.is_some() {
        return api_server_node_plan(spec, node);
    }
    if spec.control_plane.is_none() {
        return Vec::new();
    }
    let ip: Option<IpAddr> = node.private_ip.parse().ok();
    let own_ips: Vec<IpAddr> = ip.into_iter().collect();
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // etcd 3.4+ checks a peer's source address against its certificate: on the local cloud every connection
    // leaves from 127.0.0.1, so a member on a loopback private IP needs it among its peer SANs. On AWS the
    // private IP is not loopback and nothing is added.
    let mut peer_ips = own_ips.clone();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        peer_ips.push(loopback);
    }
    let mut server_ips = own_ips.clone();
    server_ips.push(loopback);
    let host = node.hostname.as_str();
    // Peers dial a member by its stable name (`ballast_etcd::hosts`): the name the peer certificate must carry,
    // and the server certificate too (API-server nodes' API servers dial `https://<that name>:2379`).
    let peer_name = spec
        .control_plane
        .as_ref()
        .map(|cp| ballast_etcd::hosts::peer_name(&spec.cluster_name, &cp.etcd.member_name))
        .unwrap_or_default();
    use pki::*;
    use Signer::*;
    let mut plans = vec![
        api_server_serving(spec, node),
        api_server_kubelet_client(),
        CertPlan::new(
            API_SERVER_ETCD_CLIENT,
            Etcd,
            "kube-apiserver-etcd-client",
            None,
            false,
            true,
        ),
        CertPlan::new(
            CONTROLLER_MANAGER,
            Kubernetes,
            "system:kube-controller-manager",
            None,
            false,
            true,
        ),
        CertPlan::new(
            SCHEDULER,
            Kubernetes,
            "system:kube-scheduler",
            None,
            false,
            true,
        ),
        kubelet_client(host),
        kubelet_serving(host, &own_ips),
        CertPlan::new(ETCD_SERVER, Etcd, host, None, true, true)
            .names(&[host, &peer_name, "localhost"], &server_ips),
        CertPlan::new(ETCD_PEER, Etcd, host, None, true, true)
            .names(&[host, &peer_name], &peer_ips),
        CertPlan::new(ETCD_CLIENT, Etcd, "nodeup-etcd-client", None, false, true),
        // The node bootstrap service (crate::bootstrap): workers reach it by this node's private IP and trust the
        // Kubernetes CA only.
        CertPlan::new(
            NODE_BOOTSTRAP,
            Kubernetes,
            "ballast-node-bootstrap",
            None,
            true,
            false,
        )
        .names(&[host], &own_ips),
    ];
    // The Pod Identity Webhook's serving certificate, when the node spec installs the webhook.
    if spec
        .control_plane
        .as_ref()
        .is_some_and(|cp| cp.pod_identity_webhook.is_some())
    {
        plans.push(pod_identity_webhook(
            pki::POD_IDENTITY_WEBHOOK_NAME,
            &spec.cluster_domain,
        ));
    }
    plans
}

/// A kubelet's serving certificate: the node's name and private IP, as EC2 gives them (the API server dials
/// kubelets by InternalIP, `--kubelet-preferred-address-types`), server authentication only. The subject is the
/// one Kubernetes's `kubelet-serving` signer requires. A worker's is issued by the bootstrap service with the
/// names it reads from EC2 (crate::bootstrap::issue); this plan is what a certificate on the node must say to be
/// kept.
pub fn kubelet_serving(hostname: &str, ips: &[IpAddr]) -> CertPlan {
    CertPlan::new(
        pki::KUBELET_SERVING,
        Signer::Kubernetes,
        &format!("system:node:{hostname}"),
        Some("system:nodes"),
        true,
        false,
    )
    .names(&[hostname], ips)
}

/// The Pod Identity Webhook's serving certificate (nodeup/src/addons/pod_identity_webhook.rs), on a control-plane
/// node of a cluster with IAM roles for service accounts: the names the API server dials its `kube-system` Service
/// `service` by, server authentication only, signed by the Kubernetes CA (the webhook's `caBundle`). Written as
/// `tls.crt` and `tls.key` in a directory of its own ([`pki::POD_IDENTITY_WEBHOOK_DIR`]).
pub fn pod_identity_webhook(service: &str, cluster_domain: &str) -> CertPlan {
    let svc = format!("{service}.kube-system.svc");
    CertPlan::new(
        &format!("{}/tls", pki::POD_IDENTITY_WEBHOOK_DIR),
        Signer::Kubernetes,
        &svc,
        None,
        true,
        false,
    )
    .names(
        &[
            service,
            &format!("{service}.kube-system"),
            &svc,
            &format!("{svc}.{cluster_domain}"),
        ],
        &[],
    )
}

/// A worker's kubelet client certificate, as the bootstrap service issues it (crate::bootstrap::issue): what a
/// certificate already on the node must say to be kept.
pub fn worker_kubelet_client(hostname: &str) -> CertPlan {
    let mut plan = CertPlan::new(
        pki::KUBELET_CLIENT,
        Signer::Kubernetes,
        &format!("system:node:{hostname}"),
        Some("system:nodes"),
        false,
        true,
    );
    plan.validity = NODE_CERT_VALIDITY;
    plan.renew_before = NODE_CERT_RENEW_BEFORE;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::defaults::complete;
    use ballast_state::generate::{generate, ClusterTemplate};
    use ballast_state::node::render_node_spec;

    const LB: &str = "api-demo-0123.elb.us-west-2.amazonaws.com";

    fn spec(group: &str, endpoint: &str) -> NodeSpec {
        let config = complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec!["us-west-2a".into()],
                ..Default::default()
            })
            .expect("template"),
        );
        render_node_spec(&config, group, "s3://b/p", endpoint)
            .expect("spec")
            .spec
    }

    fn control_plane() -> NodeSpec {
        spec("control-plane-us-west-2a", LB)
    }

    fn node(ip: &str, hostname: &str) -> NodeFacts {
        NodeFacts {
            instance_id: "i-1".into(),
            private_ip: ip.into(),
            hostname: hostname.into(),
            availability_zone: "us-west-2a".into(),
            resolv_conf: crate::model::PLAIN_RESOLV_CONF.into(),
            baked_images: Default::default(),
            oom_scores_restricted: false,
        }
    }

    fn find<'a>(plans: &'a [CertPlan], stem: &str) -> &'a CertPlan {
        plans
            .iter()
            .find(|p| p.cert_path == pki::cert(stem))
            .unwrap_or_else(|| panic!("no plan for {stem}"))
    }

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|ip| ip.parse().expect("an ip")).collect()
    }

    #[test]
    fn the_pod_identity_webhook_certificate_names_its_service_in_a_directory_of_its_own() {
        let plan = pod_identity_webhook("pod-identity-webhook", "cluster.local");
        assert_eq!(
            plan.summary(),
            "/etc/kubernetes/pki/pod-identity-webhook/tls.crt signer=Kubernetes \
             cn=pod-identity-webhook.kube-system.svc o=- server=true client=false \
             dns=[pod-identity-webhook,pod-identity-webhook.kube-system,pod-identity-webhook.kube-system.svc,\
             pod-identity-webhook.kube-system.svc.cluster.local] ip=[]"
        );
        assert_eq!(
            plan.key_path,
            "/etc/kubernetes/pki/pod-identity-webhook/tls.key"
        );
    }

    #[test]
    fn workers_plan_no_certificate() {
        let worker = spec("nodes", LB);
        assert!(plan(&worker, &node("10.0.1.10", "ip-10-0-1-10")).is_empty());
    }

    #[test]
    fn a_control_plane_plans_eleven_certificates_with_their_signers() {
        let plans = plan(&control_plane(), &node("10.0.1.10", "ip-10-0-1-10"));
        let signers: Vec<(&str, Signer)> = plans
            .iter()
            .map(|p| (p.cert_path.as_str(), p.signer))
            .collect();
        assert_eq!(
            signers,
            [
                ("/etc/kubernetes/pki/apiserver.crt", Signer::Kubernetes),
                (
                    "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
                    Signer::Kubernetes
                ),
                (
                    "/etc/kubernetes/pki/apiserver-etcd-client.crt",
                    Signer::Etcd
                ),
                (
                    "/etc/kubernetes/pki/controller-manager.crt",
                    Signer::Kubernetes
                ),
                ("/etc/kubernetes/pki/scheduler.crt", Signer::Kubernetes),
                (
                    "/var/lib/kubelet/pki/kubelet-client.crt",
                    Signer::Kubernetes
                ),
                (
                    "/var/lib/kubelet/pki/kubelet-server.crt",
                    Signer::Kubernetes
                ),
                ("/etc/kubernetes/pki/etcd/server.crt", Signer::Etcd),
                ("/etc/kubernetes/pki/etcd/peer.crt", Signer::Etcd),
                ("/etc/kubernetes/pki/etcd/client.crt", Signer::Etcd),
                ("/etc/kubernetes/pki/node-bootstrap.crt", Signer::Kubernetes),
            ]
        );
        for p in &plans {
            assert_eq!(p.key_path, p.cert_path.replace(".crt", ".key"));
            assert_eq!((p.validity, p.renew_before), (VALIDITY, RENEW_BEFORE));
        }
    }

    #[test]
    fn the_api_server_is_named_by_the_load_balancer_host_and_the_service_ip() {
        let spec = spec("control-plane-us-west-2a", &format!("{LB}:443"));
        let plans = plan(&spec, &node("10.0.1.10", "ip-10-0-1-10"));
        let api = find(&plans, pki::API_SERVER);
        assert_eq!(
            api.dns_names,
            [
                LB,
                "ip-10-0-1-10",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost"
            ]
        );
        assert_eq!(api.ips, ips(&["10.0.1.10", "100.64.0.1", "127.0.0.1"]));
        assert!(api.server && !api.client);
    }

    #[test]
    fn the_kubelet_serves_for_its_name_and_private_ip_only() {
        let plans = plan(&control_plane(), &node("10.0.1.10", "ip-10-0-1-10"));
        let serving = find(&plans, pki::KUBELET_SERVING);
        assert_eq!(serving.common_name, "system:node:ip-10-0-1-10");
        assert_eq!(serving.organization.as_deref(), Some("system:nodes"));
        assert_eq!(serving.dns_names, ["ip-10-0-1-10"]);
        assert_eq!(serving.ips, ips(&["10.0.1.10"]));
        assert!(serving.server && !serving.client);
        // A worker's plan (what it keeps of the bootstrap service's certificate) says the same.
        assert_eq!(
            &kubelet_serving("ip-10-0-1-10", &ips(&["10.0.1.10"])),
            serving
        );
    }

    #[test]
    fn client_certificates_carry_their_subjects_and_no_names() {
        let plans = plan(&control_plane(), &node("10.0.1.10", "ip-10-0-1-10"));
        let kubelet = find(&plans, pki::KUBELET_CLIENT);
        assert_eq!(kubelet.common_name, "system:node:ip-10-0-1-10");
        assert_eq!(kubelet.organization.as_deref(), Some("system:nodes"));
        let masters = find(&plans, pki::API_SERVER_KUBELET_CLIENT);
        assert_eq!(masters.organization.as_deref(), Some("system:masters"));
        for stem in [
            pki::API_SERVER_KUBELET_CLIENT,
            pki::API_SERVER_ETCD_CLIENT,
            pki::CONTROLLER_MANAGER,
            pki::SCHEDULER,
            pki::KUBELET_CLIENT,
            pki::ETCD_CLIENT,
        ] {
            let p = find(&plans, stem);
            assert!(p.client && !p.server, "{stem}");
            assert!(p.dns_names.is_empty() && p.ips.is_empty(), "{stem}");
        }
    }

    #[test]
    fn a_loopback_member_names_127_0_0_1_among_its_peer_ips_and_a_routable_one_does_not() {
        let spec = control_plane();
        let on_loopback = plan(&spec, &node("127.16.1.4", "h"));
        assert_eq!(
            find(&on_loopback, pki::ETCD_PEER).ips,
            ips(&["127.0.0.1", "127.16.1.4"])
        );
        let routable = plan(&spec, &node("10.0.1.10", "h"));
        assert_eq!(find(&routable, pki::ETCD_PEER).ips, ips(&["10.0.1.10"]));
        assert_eq!(
            find(&routable, pki::ETCD_SERVER).ips,
            ips(&["10.0.1.10", "127.0.0.1"])
        );
    }

    #[test]
    fn the_peer_certificate_names_the_members_stable_peer_name() {
        let spec = control_plane();
        let member = &spec
            .control_plane
            .as_ref()
            .expect("a control-plane spec")
            .etcd
            .member_name;
        let peer = find(&plan(&spec, &node("10.0.1.10", "h")), pki::ETCD_PEER).clone();
        let name = format!("etcd-{member}.internal.{}", spec.cluster_name);
        assert!(peer.dns_names.contains(&name), "{:?}", peer.dns_names);
    }

    /// API-server nodes' API servers dial etcd at `https://etcd-<member>.internal.<cluster>:2379`: TLS
    /// verification of that URL needs the name in the member's server certificate.
    #[test]
    fn the_etcd_server_certificate_names_the_members_stable_name() {
        let spec = control_plane();
        let member = &spec.control_plane.as_ref().expect("cp").etcd.member_name;
        let server = find(&plan(&spec, &node("10.0.1.10", "h")), pki::ETCD_SERVER).clone();
        assert_eq!(
            server.dns_names,
            [
                format!("etcd-{member}.internal.demo.example.com"),
                "h".to_string(),
                "localhost".to_string()
            ]
        );
        assert!(server.server && server.client);
    }

    /// An API-server node's spec, from the same template with an `ApiServer` group added.
    fn api_server_node(endpoint: &str) -> NodeSpec {
        let mut config = complete(
            &generate(&ClusterTemplate {
                name: "demo.example.com".into(),
                zones: vec!["us-west-2a".into()],
                ..Default::default()
            })
            .expect("template"),
        );
        let mut group = config
            .instance_groups
            .iter()
            .find(|ig| ig.spec.role == ballast_state::spec::Role::Node)
            .expect("nodes")
            .clone();
        group.metadata.name = "apiserver".into();
        group.spec.role = ballast_state::spec::Role::ApiServer;
        config.instance_groups.push(group);
        render_node_spec(&config, "apiserver", "s3://b/p", endpoint)
            .expect("spec")
            .spec
    }

    /// An API-server node issues its API server's and kubelet's certificates with the Kubernetes CA, the API
    /// server's with exactly the names a control-plane one has; nothing of etcd's CA, no etcd member's, no
    /// controller manager's, scheduler's or bootstrap service's.
    #[test]
    fn an_api_server_node_plans_its_api_server_and_kubelet_certificates_and_nothing_of_etcd() {
        let spec = api_server_node(&format!("{LB}:443"));
        let facts = node("10.0.1.20", "ip-10-0-1-20");
        let plans = plan(&spec, &facts);
        let paths: Vec<(&str, Signer)> = plans
            .iter()
            .map(|p| (p.cert_path.as_str(), p.signer))
            .collect();
        assert_eq!(
            paths,
            [
                ("/etc/kubernetes/pki/apiserver.crt", Signer::Kubernetes),
                (
                    "/etc/kubernetes/pki/apiserver-kubelet-client.crt",
                    Signer::Kubernetes
                ),
                (
                    "/var/lib/kubelet/pki/kubelet-client.crt",
                    Signer::Kubernetes
                ),
                (
                    "/var/lib/kubelet/pki/kubelet-server.crt",
                    Signer::Kubernetes
                ),
            ]
        );
        let api = find(&plans, pki::API_SERVER);
        assert_eq!(
            api.dns_names,
            [
                LB,
                "ip-10-0-1-20",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
                "localhost"
            ]
        );
        assert_eq!(api.ips, ips(&["10.0.1.20", "100.64.0.1", "127.0.0.1"]));
        // The same names as a control-plane node's API server on the same address.
        let cp = plan(&spec_with_endpoint_cp(&format!("{LB}:443")), &facts);
        assert_eq!(find(&cp, pki::API_SERVER), api);
        let kubelet = find(&plans, pki::KUBELET_CLIENT);
        assert_eq!(kubelet.common_name, "system:node:ip-10-0-1-20");
        assert_eq!(
            find(&plans, pki::API_SERVER_KUBELET_CLIENT)
                .organization
                .as_deref(),
            Some("system:masters")
        );
        assert!(!plans.iter().any(|p| p.signer == Signer::Etcd));
    }

    fn spec_with_endpoint_cp(endpoint: &str) -> NodeSpec {
        spec("control-plane-us-west-2a", endpoint)
    }

    #[test]
    fn an_unknown_hostname_or_ip_leaves_no_empty_name() {
        let spec = control_plane();
        let plans = plan(&spec, &node("not-an-ip", ""));
        let server = find(&plans, pki::ETCD_SERVER);
        let member = &spec.control_plane.as_ref().expect("cp").etcd.member_name;
        assert_eq!(
            server.dns_names,
            [
                format!("etcd-{member}.internal.{}", spec.cluster_name),
                "localhost".to_string()
            ]
        );
        assert_eq!(server.ips, ips(&["127.0.0.1"]));
    }

    #[test]
    fn the_service_ip_is_the_first_of_the_cidr() {
        assert_eq!(
            first_service_ip("100.64.0.0/13"),
            Some(ips(&["100.64.0.1"])[0])
        );
        assert_eq!(
            first_service_ip("10.96.0.0/12"),
            Some(ips(&["10.96.0.1"])[0])
        );
        assert_eq!(first_service_ip("255.255.255.255/32"), None);
        assert_eq!(first_service_ip("not-a-cidr"), None);
    }
}
