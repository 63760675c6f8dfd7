//! nodeup's log, teed: to stderr as usual, and the last lines kept in memory for the boot report.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// How many lines the boot report keeps.
pub const TAIL_LINES: usize = 60;

/// The last [`TAIL_LINES`] lines logged.
#[derive(Debug, Clone, Default)]
pub struct LogTail {
    lines: Arc<Mutex<VecDeque<String>>>,
}

impl LogTail {
    pub fn lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// One event's writer: buffers the formatted event, pushes its lines on drop.
pub struct TailWriter {
    tail: LogTail,
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
        let text = String::from_utf8_lossy(&self.buf);
        if let Ok(mut lines) = self.tail.lines.lock() {
            for line in text.lines().filter(|l| !l.is_empty()) {
                if lines.len() == TAIL_LINES {
                    lines.pop_front();
                }
                lines.push_back(line.to_string());
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogTail {
    type Writer = TailWriter;

    fn make_writer(&'a self) -> Self::Writer {
        TailWriter {
            tail: self.clone(),
            buf: Vec::new(),
        }
    }
}
