//! What API-server instance groups (`role: ApiServer`, kops's `APIServer`) need of AWS, apart from the model so
//! that a cluster without them keeps exactly its resources: their own security group and its rules, the rules
//! the control plane's and the nodes' groups gain for them, and their own IAM role's statements. Pure.
//!
//! An API-server node runs kube-apiserver and a kubelet, no etcd: it reaches etcd's client port (2379) on the
//! control plane and nothing of etcd's peer port (2380), reads what its API server needs from the state store
//! and no etcd object, backup or etcd CA key (docs/spec.md, "API-server groups").

use ballast_state::layout::{pki_names, ENCRYPTION_KEYS_SECRET};
use ballast_state::spec::{ClusterConfig, Role};

use super::rules::{IngressRule, Source};

/// etcd's client port, the one port of etcd an API-server node reaches.
pub const ETCD_CLIENT_PORT: i32 = 2379;
/// etcd's peer port: members only.
pub const ETCD_PEER_PORT: i32 = 2380;
/// The API port behind the load balancer.
pub const API_PORT: i32 = 443;

/// The etcd client certificate the API-server nodes share, under `pki/` (its key beside it).
const ETCD_CLIENT_NAME: &str = pki_names::API_SERVER_ETCD_CLIENT;

/// The etcd client pair's subject: the one a control-plane node's API server has (etcd authorizes by the CA,
/// not the name; the name says who dialed in etcd's logs).
pub const ETCD_CLIENT_COMMON_NAME: &str = "kube-apiserver-etcd-client";
/// The pair lives a year and `update cluster` issues it again when less than [`ETCD_CLIENT_RENEW_BEFORE`] is
/// left (or when another etcd CA issues, after a rotation); nodes read the new pair at their next boot, so a
/// rolling update carries it.
pub const ETCD_CLIENT_VALIDITY_DAYS: i64 = 365;
pub const ETCD_CLIENT_RENEW_BEFORE_DAYS: i64 = 60;

/// Failures issuing the API servers' etcd client pair.
#[derive(Debug, thiserror::Error)]
pub enum EtcdClientPairError {
    /// The etcd CA's certificate or key from the state store is unusable.
    #[error("the etcd CA from the state store is unusable: {0}")]
    BadCa(#[source] rcgen::Error),
    /// rcgen failed to make the key or the certificate.
    #[error("issuing the etcd client certificate: {0}")]
    Issue(#[source] rcgen::Error),
}

/// A new etcd client pair (certificate, key; PEM) for the API-server nodes, signed by the etcd CA
/// (`ca_cert`, `ca_key`), client authentication only. Pure but for the key's randomness.
pub fn issue_etcd_client_pair(
    ca_cert: &str,
    ca_key: &str,
    now: time::OffsetDateTime,
) -> Result<(String, String), EtcdClientPairError> {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::from_pem(ca_key).map_err(EtcdClientPairError::BadCa)?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, ca_key).map_err(EtcdClientPairError::BadCa)?;
    let key = KeyPair::generate().map_err(EtcdClientPairError::Issue)?;
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(EtcdClientPairError::Issue)?;
    params
        .distinguished_name
        .push(DnType::CommonName, ETCD_CLIENT_COMMON_NAME);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(ETCD_CLIENT_VALIDITY_DAYS);
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(EtcdClientPairError::Issue)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Whether the stored pair can stay: the certificate parses, was issued by `ca_cert` (its authority key
/// identifier is the CA's subject key identifier), is its key's, and has more than
/// [`ETCD_CLIENT_RENEW_BEFORE_DAYS`] left. Anything else (absent, torn, another CA's, expiring) is issued again.
pub fn etcd_client_pair_fits(
    cert: &[u8],
    key: &[u8],
    ca_cert: &[u8],
    now: time::OffsetDateTime,
) -> bool {
    use x509_parser::extensions::ParsedExtension;
    let parse = |pem: &[u8]| x509_parser::pem::parse_x509_pem(pem).ok().map(|(_, p)| p);
    let (Some(cert_pem), Some(ca_pem)) = (parse(cert), parse(ca_cert)) else {
        return false;
    };
    let (Ok(cert), Ok(ca)) = (cert_pem.parse_x509(), ca_pem.parse_x509()) else {
        return false;
    };
    let mut authority = None;
    for ext in cert.extensions() {
        if let ParsedExtension::AuthorityKeyIdentifier(aki) = ext.parsed_extension() {
            authority = aki.key_identifier.as_ref().map(|k| k.0.to_vec());
        }
    }
    let mut subject = None;
    for ext in ca.extensions() {
        if let ParsedExtension::SubjectKeyIdentifier(ski) = ext.parsed_extension() {
            subject = Some(ski.0.to_vec());
        }
    }
    let Ok(key) = std::str::from_utf8(key)
        .map_err(|_| ())
        .and_then(|k| rcgen::KeyPair::from_pem(k).map_err(|_| ()))
    else {
        return false;
    };
    let renew_at = now + time::Duration::days(ETCD_CLIENT_RENEW_BEFORE_DAYS);
    authority.is_some()
        && authority == subject
        && cert.issuer().as_raw() == ca.subject().as_raw()
        && *cert.public_key().subject_public_key.data == *key.public_key_raw()
        && cert.validity().not_after.timestamp() > renew_at.unix_timestamp()
}

/// Whether the cluster has an API-server group: only then does any of this exist.
pub fn has_api_servers(completed: &ClusterConfig) -> bool {
    completed
        .instance_groups
        .iter()
        .any(|ig| ig.spec.role == Role::ApiServer)
}

fn rule(protocol: &str, from_port: i32, to_port: i32, source: Source) -> IngressRule {
    IngressRule {
        protocol: protocol.to_string(),
        from_port,
        to_port,
        source,
    }
}

/// What the control plane's group lets in from API-server nodes: everything nodes may reach, and etcd's client
/// port besides; never etcd's peer port. The CNI's extra protocols come as the nodes' do.
pub fn control_plane_rules(cni_rules: &[IngressRule]) -> Vec<IngressRule> {
    let from = || Source::Group(Role::ApiServer);
    let mut rules = vec![
        rule("tcp", 1, ETCD_CLIENT_PORT, from()),
        rule("tcp", ETCD_PEER_PORT + 1, 65535, from()),
        rule("udp", 1, 65535, from()),
    ];
    rules.extend(
        cni_rules
            .iter()
            .filter(|r| r.source == Source::Group(Role::Node))
            .map(|r| IngressRule {
                source: from(),
                ..r.clone()
            }),
    );
    rules
}

/// What the nodes' group lets in from API-server nodes: everything, as from the control plane (the API server
/// reaches kubelets and pods; pods on API-server nodes are pods of the cluster's network).
pub fn node_rules() -> Vec<IngressRule> {
    vec![rule("-1", -1, -1, Source::Group(Role::ApiServer))]
}

/// The API-server nodes' own group's rules: everything from the control plane, the nodes and each other
/// (kubelets, pods, the CNI), the API port from where clients and the load balancer's health checks come, and
/// `ssh`, the SSH rules the model gives every instance (from `spec.sshAccess`, or from the bastions).
pub fn security_group_rules(
    completed: &ClusterConfig,
    network_cidr: &str,
    ssh: &[IngressRule],
) -> Vec<IngressRule> {
    let spec = &completed.cluster.spec;
    let mut rules = vec![
        rule("-1", -1, -1, Source::Group(Role::ControlPlane)),
        rule("-1", -1, -1, Source::Group(Role::Node)),
        rule("-1", -1, -1, Source::Group(Role::ApiServer)),
    ];
    for cidr in spec.kubernetes_api_access.iter().flatten() {
        rules.push(rule("tcp", API_PORT, API_PORT, Source::Cidr(cidr.clone())));
    }
    if !network_cidr.is_empty() {
        rules.push(rule(
            "tcp",
            API_PORT,
            API_PORT,
            Source::Cidr(network_cidr.to_string()),
        ));
    }
    rules.extend(ssh.iter().cloned());
    rules.sort();
    rules.dedup();
    rules
}

/// The API-server role's statements (the state store key's and the CNI's are added by the model as for the other
/// roles). It reads exactly: its groups' node specs, the Kubernetes CA's certificates and
/// keys (the node issues its API server's serving and kubelet-client certificates, and its kubelet's, as a
/// control-plane node does), the etcd CA's certificates (to verify etcd's servers) but not its keys, the etcd
/// client certificate and key `update cluster` issued for API servers, the service-account keys (the API server
/// signs and verifies tokens) and the encryption keys (it encrypts secrets at rest). It writes its own report
/// and log tail. It lists no prefix and reads nothing of etcd's (`etcd/`: records, health, backups).
/// `object` gives the ARN of a key under the cluster's prefix in the state store; `own_keys` is every node's
/// grant of its own report and log tail.
pub fn iam_statements(
    completed: &ClusterConfig,
    object: impl Fn(&str) -> String,
    own_keys: serde_json::Value,
) -> Vec<serde_json::Value> {
    let mut reads: Vec<String> = completed
        .instance_groups
        .iter()
        .filter(|ig| ig.spec.role == Role::ApiServer)
        .map(|ig| object(&format!("nodes/{}/*", ig.metadata.name)))
        .collect();
    let k8s = pki_names::KUBERNETES_CA;
    let etcd = pki_names::ETCD_CA;
    let sa = pki_names::SERVICE_ACCOUNT;
    reads.extend([
        object(&format!("pki/{k8s}/cert.pem")),
        object(&format!("pki/{k8s}/*/cert.pem")),
        object(&format!("pki/{k8s}/key.pem")),
        object(&format!("pki/{k8s}/*/key.pem")),
        object(&format!("pki/{etcd}/cert.pem")),
        object(&format!("pki/{etcd}/*/cert.pem")),
        object(&format!("pki/{ETCD_CLIENT_NAME}/cert.pem")),
        object(&format!("pki/{ETCD_CLIENT_NAME}/key.pem")),
        object(&format!("pki/{sa}/*")),
        object(&format!("secrets/{ENCRYPTION_KEYS_SECRET}")),
        object("control-plane/node-bootstrap.json"),
    ]);
    vec![
        serde_json::json!({"Sid": "ReadApiServerState", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": reads}),
        own_keys,
        // Itself, and which control-plane instance holds each etcd member's volume: the addresses of the names
        // its API server dials etcd by (the hosts block, ballast_etcd::hosts).
        serde_json::json!({"Sid": "FindEtcdMembers", "Effect": "Allow", "Action": ["ec2:DescribeInstances", "ec2:DescribeVolumes"], "Resource": "*"}),
        serde_json::json!({"Sid": "PullFromContainerRegistry", "Effect": "Allow", "Resource": "*", "Action": [
            "ecr:GetAuthorizationToken", "ecr:BatchCheckLayerAvailability", "ecr:GetDownloadUrlForLayer", "ecr:BatchGetImage"]}),
    ]
}
