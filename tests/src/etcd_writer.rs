//! The no-lost-write check: a client writes keys one after the other while something is done to the cluster
//! (instances terminated, a roll, a key rotation); afterwards every write etcd acknowledged must be there. A put
//! that fails (the leader died, no quorum for a moment) is retried under a new key over a fresh connection: an
//! unacknowledged write may or may not be there, an acknowledged one must be.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, GetOptions};

use crate::wait::wait_until;

/// How long one put may take before it counts as failed (a member that lost power never answers).
const PUT_TIMEOUT: Duration = Duration::from_secs(5);
/// After a failed put: the pause before the next, so a cluster without quorum is not hammered.
const AFTER_FAILURE: Duration = Duration::from_millis(100);

/// Shared between the writer and whoever drives the test: a stop flag, and how many writes were acknowledged so
/// far (to wait for the writer to be under way, or for writes through a healed cluster, instead of sleeping).
#[derive(Debug, Default)]
pub struct WriterControl {
    stop: AtomicBool,
    acknowledged: AtomicUsize,
}

impl WriterControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the writer to stop after its current put.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Writes acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Waits until `more` writes beyond those acknowledged now are acknowledged.
    pub async fn wait_for_more_writes(&self, more: usize, deadline: Duration) {
        let target = self.acknowledged() + more;
        wait_until(
            deadline,
            &format!("the writer's acknowledged writes to reach {target}"),
            || async move {
                let now = self.acknowledged();
                if now >= target {
                    Ok(())
                } else {
                    Err(format!("{now} acknowledged"))
                }
            },
        )
        .await;
    }
}

/// What a writer did: the keys etcd acknowledged, in order, and how many puts failed.
#[derive(Debug, Default)]
pub struct WriterReport {
    pub prefix: String,
    pub acknowledged: Vec<String>,
    pub failures: usize,
}

impl WriterReport {
    /// Panics naming every acknowledged key `client` cannot read back, and when the writer hardly wrote (fewer
    /// than `at_least` acknowledged writes: a check over nothing proves nothing).
    pub async fn assert_none_lost(&self, client: &mut Client, at_least: usize) {
        assert!(
            self.acknowledged.len() >= at_least,
            "the writer hardly wrote: {} acknowledged (at least {at_least} expected), {} failed",
            self.acknowledged.len(),
            self.failures
        );
        let stored = stored_keys(client, &self.prefix).await;
        let lost: Vec<&String> = self
            .acknowledged
            .iter()
            .filter(|k| !stored.contains(*k))
            .collect();
        assert!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost: {lost:?}",
            lost.len(),
            self.acknowledged.len()
        );
    }
}

/// The keys under `prefix`, read linearizably.
pub async fn stored_keys(client: &mut Client, prefix: &str) -> BTreeSet<String> {
    client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("get {prefix}: {e}"))
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

/// Writes `<prefix><n>` (n zero-padded, counting up) until `control` says stop, one put at a time and `pace`
/// apart (zero: as fast as etcd answers); connects, and after a failed put reconnects, through `connect` (the
/// endpoints change as instances are replaced).
pub async fn write_until_stopped<C, Fut>(
    control: &WriterControl,
    prefix: &str,
    pace: Duration,
    mut connect: C,
) -> WriterReport
where
    C: FnMut() -> Fut,
    Fut: Future<Output = Option<Client>>,
{
    let mut report = WriterReport {
        prefix: prefix.to_string(),
        ..WriterReport::default()
    };
    let mut client = connect().await;
    let mut n = 0u32;
    while !control.stopped() {
        let key = format!("{prefix}{n:06}");
        n += 1;
        let put = async {
            match client.as_mut() {
                Some(c) => c.put(key.clone(), "w", None).await.is_ok(),
                None => false,
            }
        };
        let acknowledged = tokio::time::timeout(PUT_TIMEOUT, put)
            .await
            .unwrap_or(false);
        if acknowledged {
            report.acknowledged.push(key);
            control.acknowledged.fetch_add(1, Ordering::Relaxed);
        } else {
            report.failures += 1;
            // Reconnect over whoever is alive now; keep the old client if nobody answers yet.
            if let Some(fresh) = connect().await {
                client = Some(fresh);
            }
            tokio::time::sleep(AFTER_FAILURE).await;
        }
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
    }
    report
}
