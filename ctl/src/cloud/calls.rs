//! Counting AWS calls by operation, through an SDK interceptor on every client: what `update cluster --stats`
//! prints and the benchmark measures (a no-op update must make no mutating call).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::{Intercept, SharedInterceptor};
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// Calls made, by `Service:Operation`, attempts included.
#[derive(Debug, Clone, Default)]
pub struct CallLog {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl CallLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// An interceptor that records into this log.
    pub fn interceptor(&self) -> SharedInterceptor {
        SharedInterceptor::new(CallLogInterceptor { log: self.clone() })
    }

    fn record(&self, operation: String) {
        if let Ok(mut totals) = PROCESS_TOTALS.lock() {
            *totals.entry(operation.clone()).or_default() += 1;
        }
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry(operation).or_default() += 1;
        }
    }

    /// Counts so far, by operation.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    pub fn total(&self) -> u64 {
        self.snapshot().values().sum()
    }

    /// Calls that may change something: anything but Describe*, List*, Get*, Head*.
    pub fn mutating(&self) -> BTreeMap<String, u64> {
        self.snapshot()
            .into_iter()
            .filter(|(op, _)| !is_read_only(op))
            .collect()
    }

    /// `N calls (M mutating): Service:Op=n, ...`
    pub fn summary(&self) -> String {
        let snapshot = self.snapshot();
        let ops: Vec<String> = snapshot.iter().map(|(op, n)| format!("{op}={n}")).collect();
        format!(
            "AWS calls: {} ({} mutating): {}",
            self.total(),
            self.mutating().values().sum::<u64>(),
            ops.join(", ")
        )
    }
}

/// Every call of this process, whichever log counted it: what [`append_process_calls`] writes.
static PROCESS_TOTALS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// The environment variable naming a file to which each `ballast` run appends one JSON line of the AWS calls it
/// made (`{"command": ..., "total": n, "mutating": m, "operations": {...}}`): how the lifecycle benchmark counts
/// the calls of a `ballast` it runs as a child process. Unset: nothing is written.
pub const CALL_LOG_ENV: &str = "BALLAST_AWS_CALL_LOG";

/// Appends this process's calls to `path` as one JSON line (see [`CALL_LOG_ENV`]).
pub fn append_process_calls(path: &Path, command: &str) -> std::io::Result<()> {
    let operations = PROCESS_TOTALS.lock().map(|t| t.clone()).unwrap_or_default();
    let mutating: u64 = operations
        .iter()
        .filter(|(op, _)| !is_read_only(op))
        .map(|(_, n)| n)
        .sum();
    let line = serde_json::json!({
        "command": command,
        "total": operations.values().sum::<u64>(),
        "mutating": mutating,
        "operations": operations,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write per line, so that runs appending at once do not interleave.
    file.write_all(format!("{line}\n").as_bytes())
}

fn is_read_only(operation: &str) -> bool {
    let name = operation.rsplit(':').next().unwrap_or(operation);
    ["Describe", "List", "Get", "Head"]
        .iter()
        .any(|p| name.starts_with(p))
}

#[derive(Debug)]
struct CallLogInterceptor {
    log: CallLog,
}

impl Intercept for CallLogInterceptor {
    fn name(&self) -> &'static str {
        "ballast-call-log"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(metadata) = cfg.load::<Metadata>() {
            self.log
                .record(format!("{}:{}", metadata.service(), metadata.name()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_operations_are_told_apart() {
        let log = CallLog::new();
        log.record("EC2:DescribeVpcs".into());
        log.record("EC2:DescribeVpcs".into());
        log.record("EC2:CreateVpc".into());
        log.record("IAM:GetRole".into());
        assert_eq!(log.total(), 4);
        assert_eq!(
            log.mutating().keys().collect::<Vec<_>>(),
            vec!["EC2:CreateVpc"]
        );
        assert!(log.summary().starts_with("AWS calls: 4 (1 mutating)"));
    }

    #[test]
    fn a_run_appends_its_calls_as_one_json_line() {
        let log = CallLog::new();
        log.record("EC2:DescribeSubnets".into());
        log.record("EC2:CreateSubnet".into());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("calls.jsonl");
        append_process_calls(&path, "ballast update cluster").expect("append");
        append_process_calls(&path, "ballast validate cluster").expect("append");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["command"], "ballast update cluster");
        // Other tests of this process count into the same totals: at least ours are there.
        assert!(lines[0]["operations"]["EC2:CreateSubnet"].as_u64() >= Some(1));
        let sum: u64 = lines[0]["operations"]
            .as_object()
            .expect("operations")
            .values()
            .filter_map(|n| n.as_u64())
            .sum();
        assert_eq!(lines[0]["total"].as_u64(), Some(sum));
        assert!(lines[0]["mutating"].as_u64() >= Some(1));
    }
}
