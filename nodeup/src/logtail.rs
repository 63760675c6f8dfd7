//! nodeup's log, teed: to stderr as usual, and the last lines kept in memory, redacted
//! (`ballast_state::redact`) and cut to a bound (`ballast_state::log_tail`), for the boot report and the
//! published log tail (`crate::tail_publish`). The etcd supervisor runs inside nodeup on control-plane nodes;
//! its lines (the `ballast_etcd` target) are kept apart, so that a busy supervisor never pushes out the boot's.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

pub use ballast_state::log_tail::TAIL_LINES;

/// The tracing target prefix of the etcd supervisor's events.
const ETCD_TARGET: &str = "ballast_etcd";

/// The last [`TAIL_LINES`] lines logged by nodeup, and as many of the etcd supervisor's.
#[derive(Debug, Clone, Default)]
pub struct LogTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    etcd: Arc<Mutex<VecDeque<String>>>,
}

impl LogTail {
    /// nodeup's own lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        copy(&self.lines)
    }

    /// The etcd supervisor's lines, oldest first.
    pub fn etcd_lines(&self) -> Vec<String> {
        copy(&self.etcd)
    }
}

fn copy(lines: &Mutex<VecDeque<String>>) -> Vec<String> {
    lines
        .lock()
        .map(|l| l.iter().cloned().collect())
        .unwrap_or_default()
}

/// One event's writer: buffers the formatted event, pushes its lines on drop.
pub struct TailWriter {
    lines: Arc<Mutex<VecDeque<String>>>,
    buf: Vec<u8>,
}

impl Write for TailWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TailWriter {
    fn drop(&mut self) {
        // Redacted as one event first (a PEM block spans lines), then line by line as kept.
        let text = String::from_utf8_lossy(&self.buf);
        let text = ballast_state::redact::redact(&text);
        if let Ok(mut lines) = self.lines.lock() {
            for line in text.lines().filter(|l| !l.is_empty()) {
                if lines.len() == TAIL_LINES {
                    lines.pop_front();
                }
                lines.push_back(ballast_state::log_tail::kept_line(line));
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogTail {
    type Writer = TailWriter;

    fn make_writer(&'a self) -> Self::Writer {
        TailWriter {
            lines: self.lines.clone(),
            buf: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        let lines = if meta.target().starts_with(ETCD_TARGET) {
            &self.etcd
        } else {
            &self.lines
        };
        TailWriter {
            lines: lines.clone(),
            buf: Vec::new(),
        }
    }
}

/// Without `RUST_LOG`: `info`, except the kube client's connection errors. The add-on applier probes the local
/// API server until it answers (docs/addons.md); each refused probe is an expected wait, not an error for the boot
/// report's log tail, and the applier reports its own failures.
const DEFAULT_FILTER: &str = "info,kube_client::client::builder=off";

/// Installs nodeup's logging: an env filter (`RUST_LOG`, else [`DEFAULT_FILTER`]), formatted to stderr and teed
/// into the returned tail for the boot report.
pub fn init_logging() -> LogTail {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let tail = LogTail::default();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER));
    // A second init (a test that already installed a subscriber) is not an error worth stopping a boot for.
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                // Logs usually go to files (the runner's, each instance's): colours only on a terminal.
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
        )
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(tail.clone())
                .with_ansi(false)
                .with_target(false),
        )
        .try_init();
    tail
}

#[cfg(test)]
mod tests {
    use tracing::subscriber::with_default;
    use tracing_subscriber::layer::SubscriberExt;

    /// The default filter silences the kube client builder's connection errors and nothing else.
    #[test]
    fn the_default_filter_silences_only_the_kube_clients_connection_errors() {
        let filter = tracing_subscriber::EnvFilter::try_new(super::DEFAULT_FILTER)
            .expect("the default filter parses");
        let tail = super::LogTail::default();
        let subscriber = tracing_subscriber::registry().with(filter).with(
            tracing_subscriber::fmt::layer()
                .with_writer(tail.clone())
                .with_ansi(false),
        );
        with_default(subscriber, || {
            tracing::error!(target: "kube_client::client::builder", "failed with error client error (Connect)");
            tracing::error!(target: "kube_client::api", "another kube error");
            tracing::info!(target: "nodeup::boot", "configured");
            tracing::debug!(target: "nodeup::boot", "not at info");
        });
        let text = tail.lines().join("\n");
        assert!(!text.contains("client error (Connect)"), "{text}");
        assert!(text.contains("another kube error"), "{text}");
        assert!(text.contains("configured"), "{text}");
        assert!(!text.contains("not at info"), "{text}");
    }

    /// The etcd supervisor's lines are kept apart from nodeup's, and a key logged by mistake is never kept.
    #[test]
    fn etcd_lines_apart_and_keys_redacted() {
        let tail = super::LogTail::default();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(tail.clone())
                .with_ansi(false),
        );
        let key = ballast_state::pki::generate_ca("x", "X")
            .expect("ca")
            .key_pem;
        with_default(subscriber, || {
            tracing::info!(target: "nodeup::boot", "booting");
            for i in 0..2 * super::TAIL_LINES {
                tracing::info!(target: "ballast_etcd::supervisor", "round {i}");
            }
            tracing::error!(target: "nodeup::fetch", "oops {key}");
        });
        let nodeup = tail.lines().join("\n");
        assert!(nodeup.contains("booting"), "{nodeup}");
        assert!(!nodeup.contains("round"), "{nodeup}");
        assert!(
            nodeup.contains(ballast_state::redact::REDACTED_KEY),
            "{nodeup}"
        );
        assert!(!nodeup.contains("PRIVATE KEY-----"), "{nodeup}");
        let etcd = tail.etcd_lines();
        assert_eq!(etcd.len(), super::TAIL_LINES);
        assert!(
            etcd[0].ends_with(&format!("round {}", super::TAIL_LINES)),
            "{etcd:?}"
        );
    }
}
