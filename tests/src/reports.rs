//! Boot reports as the tests read and write them: stored reports are signed by their node
//! (`ballast_state::report_signature`), so a test reads their content through the envelope, and a test that plays
//! a node without running one signs as that node with a certificate the cluster's CA issues (the operator holds
//! the CA key; a worker never does).

use ballast_state::layout::ClusterPaths;
use ballast_state::report::NodeReport;
use ballast_state::report_signature::{self, StoredReport};
use ballast_store::store::{Precondition, StateStore};
use rcgen::{CertificateParams, DnType, Issuer, KeyPair};

/// The report in a stored object (signed or plain); panics when it is neither.
pub fn parse(bytes: &[u8]) -> StoredReport {
    report_signature::parse_stored(bytes).unwrap_or_else(|e| {
        panic!(
            "not a stored nodeup report ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// A kubelet client certificate and key for `node_name` (`system:node:<name>`, `system:nodes`), issued by the
/// cluster's Kubernetes CA (its keyset's primary) as read from `store`.
pub async fn node_certificate(
    store: &StateStore,
    paths: &ClusterPaths,
    node_name: &str,
) -> (String, String) {
    // The keyset's primary issues, as on the nodes (docs/keys.md).
    let ca = ballast_store::keystore::ca_in_use(
        store,
        paths.cluster(),
        ballast_state::keyset::KeysetName::KubernetesCa,
    )
    .await
    .unwrap_or_else(|e| panic!("the Kubernetes CA in the store: {e}"));
    let (ca_cert, ca_key) = (ca.cert_pem, ca.key_pem);
    let issuer = Issuer::from_ca_cert_pem(&ca_cert, KeyPair::from_pem(&ca_key).expect("CA key"))
        .expect("the CA certificate");
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, format!("system:node:{node_name}"));
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(1);
    let cert = params.signed_by(&key, &issuer).expect("issue");
    (cert.pem(), key.serialize_pem())
}

/// The IAM unique id a test that plays a node writes its report as (`<role-id>:<instance-id>`, as a node's role
/// session is named): readers find a report by the instance its writer names, whatever the role.
pub const PLAYED_ROLE_ID: &str = "AROAE2EPLAYEDNODE";

/// Stores `report` under its instance's key, signed as node `node_name` would sign it.
pub async fn put_signed(
    store: &StateStore,
    paths: &ClusterPaths,
    report: &NodeReport,
    node_name: &str,
) {
    let (cert, key) = node_certificate(store, paths, node_name).await;
    let signed = report_signature::sign(report, &key, &cert).expect("sign the report");
    store
        .put(
            &paths.report(&format!("{PLAYED_ROLE_ID}:{}", report.instance_id)),
            &signed,
            &Precondition::None,
        )
        .await
        .expect("store the report");
}
