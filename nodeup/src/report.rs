//! The boot report ([`ballast_state::report::NodeReport`]): each step's timing as it runs, the node's
//! identity once known, and the outcome (phase, the error and its causes, the log's tail), written under the
//! root and to the state store (`reports/<role-id>:<instance-id>.json`, named by its writer), where `ballast validate cluster` and the tests
//! read it.

use std::path::Path;
use std::time::{Duration, Instant};

use ballast_state::layout::ClusterPaths;
use ballast_state::node::BootConfig;
use ballast_state::report::{NodeReport, Step, StepTiming};
use ballast_state::report_signature;
/// Now, as the report's timestamps say it (RFC 3339, Ballast's one timestamp writer).
pub use ballast_state::timestamp::now_rfc3339;
use ballast_store::store::{Precondition, StateStore};

use crate::identity::Identity;
use crate::model::pki;

/// Where the boot report is kept on the node, relative to `--root`.
pub const REPORT_FILE: &str = "var/lib/nodeup/report.json";

/// How long writing the report to the state store may take: the node's own copy is written first, so a store
/// that does not answer costs the report's remote copy, not the boot.
const STORE_WRITE_TIMEOUT: Duration = Duration::from_secs(15);

/// Times one step into the report.
pub async fn step<T, E>(
    report: &mut NodeReport,
    step: Step,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let start = Instant::now();
    let result = work.await;
    report.steps.push(StepTiming {
        step,
        millis: start.elapsed().as_millis() as u64,
        ok: result.is_ok(),
    });
    result
}

/// Who the node is and what it was asked to be, once step 1 knows.
pub fn record_identity(report: &mut NodeReport, identity: &Identity, boot: &BootConfig) {
    report.instance_id = identity.instance_id.clone();
    report.private_ip = Some(identity.local_ipv4.clone());
    report.availability_zone = Some(identity.availability_zone.clone());
    report.cluster_name = Some(boot.cluster_name.clone());
    report.instance_group = Some(boot.instance_group.clone());
    report.role = Some(boot.role);
    report.node_spec_sha256 = Some(boot.node_spec_sha256.clone());
}

/// An error and its causes, one line each, leaving out a cause whose text an earlier line already says (most
/// messages quote their source).
pub fn error_lines(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut chain = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !chain.iter().any(|c| c.contains(&text)) {
            chain.push(text);
        }
        source = cause.source();
    }
    chain
}

/// Where the report goes besides the node: the state store, once the boot config named it.
pub struct ReportDestination<'a> {
    pub store: &'a StateStore,
    pub cluster: &'a str,
    /// Who the node writes as (`crate::tail_publish::writer_for`): the report's key is named by it, the one
    /// report key the node's IAM policy lets it write.
    pub writer: &'a str,
}

/// Writes the report under the root and, when the store is known and reachable, to the store. Failures are
/// logged: the report is how a failure is seen, so writing it never fails the boot.
pub async fn publish(root: &Path, report: &NodeReport, remote: Option<ReportDestination<'_>>) {
    let json = match report.to_json() {
        Ok(json) => json,
        Err(e) => {
            tracing::error!("serializing the boot report: {e}");
            return;
        }
    };
    let local = root.join(REPORT_FILE);
    // Durable: the local report is what an operator reads on a node that rebooted after a failed boot.
    let options = ballast_common::durable::Options::mode(0o644).create_parents(0o755);
    if let Err(e) = ballast_common::durable::write(&local, &json, &options) {
        tracing::error!("the boot report: {e}");
    }
    let Some(ReportDestination {
        store,
        cluster,
        writer,
    }) = remote
    else {
        tracing::warn!("the boot report stays on the node: the state store is not known");
        return;
    };
    let key = ClusterPaths::new(cluster).report(writer);
    let stored = signed_or_plain(root, report, json);
    match tokio::time::timeout(
        STORE_WRITE_TIMEOUT,
        store.put(&key, &stored, &Precondition::None),
    )
    .await
    {
        Ok(Ok(_)) => tracing::info!(key, phase = ?report.phase, "boot report written"),
        Ok(Err(e)) => tracing::error!(key, "writing the boot report to the state store: {e}"),
        Err(_) => tracing::error!(
            key,
            "writing the boot report to the state store: timed out after {STORE_WRITE_TIMEOUT:?}"
        ),
    }
}

/// The report as stored: signed with the node's kubelet client key when the node has one (readers trust only a
/// report signed by the node EC2 names for its key, `ballast_state::report_signature`), else plain, which readers
/// show as unsigned (a node that failed before it had its certificate still tells why).
fn signed_or_plain(root: &Path, report: &NodeReport, plain: Vec<u8>) -> Vec<u8> {
    let on_node = |path: String| root.join(path.trim_start_matches('/'));
    let key = std::fs::read_to_string(on_node(pki::key(pki::KUBELET_CLIENT)));
    let cert = std::fs::read_to_string(on_node(pki::cert(pki::KUBELET_CLIENT)));
    let (Ok(key), Ok(cert)) = (key, cert) else {
        tracing::warn!("no kubelet client certificate yet: the boot report is stored unsigned");
        return plain;
    };
    match report_signature::sign(report, &key, &cert) {
        Ok(signed) => signed,
        Err(e) => {
            tracing::error!("the boot report is stored unsigned: {e}");
            plain
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Outer(#[source] Middle);

    #[derive(Debug, thiserror::Error)]
    #[error("middle")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn the_stored_report_is_signed_with_the_nodes_kubelet_key_when_it_has_one() {
        let root = tempfile::tempdir().expect("tempdir");
        let report = NodeReport::new("i-0abc", "0.1.0", "2025-01-01T00:00:00Z");
        let plain = report.to_json().expect("json");
        // No key yet (a node that failed before its certificate): stored plain, still readable.
        assert_eq!(signed_or_plain(root.path(), &report, plain.clone()), plain);

        let ca = ballast_state::pki::generate_ca("kubernetes-ca", "Kubernetes CA").expect("ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:ip-127-0-0-9");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let issuer = rcgen::Issuer::from_ca_cert_pem(
            &ca.cert_pem,
            rcgen::KeyPair::from_pem(&ca.key_pem).expect("ca key"),
        )
        .expect("issuer");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        let dir = root.path().join(pki::KUBELET_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let on_node = |p: String| root.path().join(p.trim_start_matches('/'));
        std::fs::write(on_node(pki::cert(pki::KUBELET_CLIENT)), cert.pem()).expect("cert");
        std::fs::write(on_node(pki::key(pki::KUBELET_CLIENT)), key.serialize_pem()).expect("key");

        let stored = signed_or_plain(root.path(), &report, plain);
        let read = report_signature::parse_stored(&stored).expect("parse");
        assert_eq!(read.report, report);
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert_eq!(
            report_signature::verify(&read, &ca.cert_pem, Some("ip-127-0-0-9"), now).as_deref(),
            Ok("ip-127-0-0-9")
        );
    }

    #[test]
    fn a_cause_already_quoted_is_not_repeated() {
        let e = Outer(Middle(std::io::Error::other("disk full")));
        assert_eq!(error_lines(&e), ["outer: middle", "disk full"]);
    }
}
