//! Counting AWS calls by operation, through an SDK interceptor on every client: what `update cluster --stats`
//! prints and the benchmark measures (a no-op update must make no mutating call).

use std::collections::BTreeMap;
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
}
