//! Waiting on a condition, never on the clock: a test that sleeps "long enough" is slow when the machine is idle
//! and flaky when it is busy. [`wait_until`] polls a condition until it holds or a deadline passes, and names what
//! it waited for (and the last answer) when it gives up.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// The first pause between two looks; it doubles up to [`LONGEST_PAUSE`], so a condition that holds at once
/// costs nothing and an expensive one (a CLI run, an etcd connection) is not asked hundreds of times.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// What one look at a condition found: a value when it holds, or what was seen instead (shown on timeout).
pub trait Look {
    type Value;
    fn into_look(self) -> Result<Self::Value, String>;
}

impl<T> Look for Option<T> {
    type Value = T;
    fn into_look(self) -> Result<T, String> {
        self.ok_or_else(|| "not yet".to_string())
    }
}

impl<T, E: Debug> Look for Result<T, E> {
    type Value = T;
    fn into_look(self) -> Result<T, String> {
        self.map_err(|e| format!("{e:?}"))
    }
}

impl Look for bool {
    type Value = ();
    fn into_look(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("not yet".to_string())
        }
    }
}

/// Looks at `condition` until it holds (`Some`, `Ok` or `true`) and returns its value; panics after `deadline`
/// naming `what` it waited for and the last thing the condition saw.
pub async fn wait_until<L, F, Fut>(deadline: Duration, what: &str, mut condition: F) -> L::Value
where
    L: Look,
    F: FnMut() -> Fut,
    Fut: Future<Output = L>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        let last = match condition().await.into_look() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if started.elapsed() >= deadline {
            panic!("timed out after {deadline:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(pause.min(deadline.saturating_sub(started.elapsed()))).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn returns_the_value_once_the_condition_holds() {
        let looks = &AtomicUsize::new(0);
        let got = wait_until(Duration::from_secs(5), "the third look", || async move {
            let n = looks.fetch_add(1, Ordering::SeqCst) + 1;
            (n >= 3).then_some(n)
        })
        .await;
        assert_eq!(got, 3);
    }

    #[tokio::test]
    async fn a_result_s_error_is_what_the_timeout_names() {
        let waited = tokio::spawn(wait_until(
            Duration::from_millis(100),
            "a condition that never holds",
            || async move { Err::<(), _>("the door is shut") },
        ))
        .await
        .expect_err("it times out");
        let message = waited
            .into_panic()
            .downcast::<String>()
            .map(|s| *s)
            .unwrap_or_default();
        assert!(
            message.contains("waiting for a condition that never holds")
                && message.contains("the door is shut"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_bool_condition_waits_for_true() {
        let looks = &AtomicUsize::new(0);
        wait_until(Duration::from_secs(5), "two looks", || async move {
            looks.fetch_add(1, Ordering::SeqCst) >= 1
        })
        .await;
        assert_eq!(looks.load(Ordering::SeqCst), 2);
    }
}
