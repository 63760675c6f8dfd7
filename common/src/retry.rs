//! The one retry policy: exponential backoff with jitter (on `backon`), bounded both in attempts and by a total
//! deadline. Each use site names its own [`Policy`] (a constant beside the call: what is retried, how fast, for how
//! long), and runs through [`Policy::retry`] or, for a loop that polls a condition of its own, [`Policy::pauses`].
//!
//! Jitter: each pause is drawn from `[d, 2d)` around the doubling delay `d`, so many nodes booting together (or
//! many CLIs) do not hit IMDS, S3 or the API server in lockstep.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};

/// One try's failure, for [`Policy::retry`] with [`Failure::is_transient`]: give up at once (`Permanent`), or try
/// again (`Transient`, which becomes the caller's "still failing after N tries" error when the policy runs out).
#[derive(Debug)]
pub enum Failure<P, T> {
    Permanent(P),
    Transient(T),
}

impl<P, T> Failure<P, T> {
    pub fn is_transient(&self) -> bool {
        matches!(self, Failure::Transient(_))
    }
}

/// How a failing operation is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// The first pause (before jitter); each next pause doubles, up to `max_delay`.
    pub first: Duration,
    pub max_delay: Duration,
    /// Tries in all, the first included; `None`: as many as the deadline allows.
    pub attempts: Option<usize>,
    /// No pause starts that would end past this much time after the first try began.
    pub deadline: Duration,
}

impl Policy {
    /// Pauses from `first` doubling to `max_delay`, retried until `deadline`.
    pub const fn new(first: Duration, max_delay: Duration, deadline: Duration) -> Self {
        Self {
            first,
            max_delay,
            attempts: None,
            deadline,
        }
    }

    /// At most `attempts` tries in all (at least one).
    pub const fn with_attempts(mut self, attempts: usize) -> Self {
        self.attempts = Some(if attempts == 0 { 1 } else { attempts });
        self
    }

    fn builder(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.first)
            .with_max_delay(self.max_delay)
            .with_total_delay(Some(self.deadline));
        match self.attempts {
            Some(n) => builder.with_max_times(n.saturating_sub(1)),
            None => builder.without_max_times(),
        }
    }

    /// The pauses of a loop that waits for a condition of its own and never gives up by itself (the add-ons runner
    /// waiting for the API server; a teardown that stops on "no progress"): the policy's jittered doubling, capped
    /// at `max_delay` (with jitter, below twice that), without end. The loop restarts the sequence by calling
    /// this again.
    pub fn pauses(&self) -> impl Iterator<Item = Duration> {
        let cap = self.max_delay;
        let mut pauses = ExponentialBuilder::new()
            .with_jitter()
            .with_factor(2.0)
            .with_min_delay(self.first)
            .with_max_delay(self.max_delay)
            .without_max_times()
            .build();
        std::iter::from_fn(move || Some(pauses.next().unwrap_or(cap)))
    }

    /// Runs `op` until it succeeds, fails with an error `retryable` refuses, or the policy runs out (attempts, or the
    /// deadline: no pause is started that would end past it); the last error is returned. `notify` sees each
    /// retried error and the pause before the next try (for a log line).
    pub async fn retry<T, E, F, Fut>(
        &self,
        op: F,
        retryable: impl FnMut(&E) -> bool,
        notify: impl FnMut(&E, Duration),
    ) -> Result<T, E>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // A deadline too far to represent (`Duration::MAX`) is no deadline.
        let deadline = tokio::time::Instant::now().checked_add(self.deadline);
        op.retry(self.builder())
            .sleep(tokio::time::sleep)
            .when(retryable)
            .adjust(move |_, pause| {
                pause.filter(|pause| {
                    deadline.is_none_or(|end| tokio::time::Instant::now() + *pause < end)
                })
            })
            .notify(notify)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const FAST: Policy = Policy::new(
        Duration::from_millis(100),
        Duration::from_secs(1),
        Duration::from_secs(30),
    );

    #[tokio::test(start_paused = true)]
    async fn retries_until_success_with_growing_jittered_pauses() {
        let tries = AtomicUsize::new(0);
        let mut pauses = Vec::new();
        let result: Result<usize, &str> = FAST
            .retry(
                || async {
                    let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                    if n < 5 {
                        Err("not yet")
                    } else {
                        Ok(n)
                    }
                },
                |_| true,
                |_, pause| pauses.push(pause),
            )
            .await;
        assert_eq!(result, Ok(5));
        assert_eq!(pauses.len(), 4);
        // Doubling from 100 ms, capped at 1 s, each within [d, 2d).
        for (pause, d) in pauses.iter().zip([100, 200, 400, 800]) {
            let d = Duration::from_millis(d);
            assert!(*pause >= d && *pause < d * 2, "{pause:?} for {d:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_attempt_bound_with_the_last_error() {
        let tries = AtomicUsize::new(0);
        let result: Result<(), usize> = FAST
            .with_attempts(3)
            .retry(
                || async { Err(tries.fetch_add(1, Ordering::SeqCst) + 1) },
                |_| true,
                |_, _| {},
            )
            .await;
        assert_eq!(result, Err(3));
        assert_eq!(tries.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_deadline() {
        let start = tokio::time::Instant::now();
        let tries = AtomicUsize::new(0);
        let result: Result<(), &str> = FAST
            .retry(
                || async {
                    tries.fetch_add(1, Ordering::SeqCst);
                    Err("down")
                },
                |_| true,
                |_, _| {},
            )
            .await;
        assert_eq!(result, Err("down"));
        let elapsed = start.elapsed();
        assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
        // Pauses of at most 2 s each: the last try began within one pause of the deadline.
        assert!(elapsed > Duration::from_secs(27), "{elapsed:?}");
        assert!(tries.load(Ordering::SeqCst) > 10);
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_not_retryable_returns_at_once() {
        let tries = AtomicUsize::new(0);
        let result: Result<(), &str> = FAST
            .retry(
                || async {
                    tries.fetch_add(1, Ordering::SeqCst);
                    Err("refused")
                },
                |e| *e != "refused",
                |_, _| {},
            )
            .await;
        assert_eq!(result, Err("refused"));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn pauses_grow_to_the_cap_and_never_end() {
        let pauses: Vec<Duration> = FAST.pauses().take(50).collect();
        assert_eq!(pauses.len(), 50);
        assert!(pauses[0] >= Duration::from_millis(100) && pauses[0] < Duration::from_millis(200));
        assert!(pauses[49] >= Duration::from_secs(1) && pauses[49] < Duration::from_secs(2));
        assert!(pauses.iter().all(|p| *p < Duration::from_secs(2)));
    }
}
