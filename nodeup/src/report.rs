//! The boot report ([`ballast_state::report::NodeReport`]): each step's timing as it runs, the node's
//! identity once known, and the outcome (phase, the error and its causes, the log's tail), written under the
//! root and to the state store (`reports/<instance-id>.json`), where `ballast validate cluster` and the tests
//! read it.

use std::path::Path;
use std::time::{Duration, Instant};

use ballast_state::layout::ClusterPaths;
use ballast_state::node::BootConfig;
use ballast_state::report::{NodeReport, Step, StepTiming};
use ballast_state::store::{Precondition, StateStore};
/// Now, as the report's timestamps say it (RFC 3339, Ballast's one timestamp writer).
pub use ballast_state::timestamp::now_rfc3339;

use crate::identity::Identity;

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
    let written = local
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            let tmp = local.with_extension("json.tmp");
            std::fs::write(&tmp, &json)?;
            std::fs::rename(&tmp, &local)
        });
    if let Err(e) = written {
        tracing::error!(path = %local.display(), "writing the boot report: {e}");
    }
    let Some(ReportDestination { store, cluster }) = remote else {
        tracing::warn!("the boot report stays on the node: the state store is not known");
        return;
    };
    let key = ClusterPaths::new(cluster).report(&report.instance_id);
    match tokio::time::timeout(
        STORE_WRITE_TIMEOUT,
        store.put(&key, &json, &Precondition::None),
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
    fn a_cause_already_quoted_is_not_repeated() {
        let e = Outer(Middle(std::io::Error::other("disk full")));
        assert_eq!(error_lines(&e), ["outer: middle", "disk full"]);
    }
}
