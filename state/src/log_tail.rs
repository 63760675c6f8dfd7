//! A node's published log tail (`logs/<writer>.json`, docs/toolbox.md): the last lines of nodeup's log and, on a
//! control-plane node, of its etcd supervisor, redacted ([`crate::redact`]) and bounded, so `ballast toolbox
//! dump` can show why a node failed without anyone logging in to it. The key's `<writer>` is the instance role
//! session's `aws:userid` (`<role-id>:<instance-id>`), the only key the node's IAM policy lets it write
//! (`ctl/src/cloud/model.rs`): a node can publish its own tail and no other.

use serde::{Deserialize, Serialize};

use crate::limits::ReadLimit;

/// Lines kept per source (nodeup, the etcd supervisor).
pub const TAIL_LINES: usize = 60;
/// The longest line kept; a longer one is cut (and says so).
pub const MAX_LINE_BYTES: usize = 1024;
/// A stored tail is at most this big: 2 sources x 60 lines x 1 KiB, and room for the envelope.
pub const MAX_LOG_TAIL: ReadLimit = ReadLimit {
    bytes: 160 * 1024,
    what: "a node's published log tail",
};

/// Why the tail was published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TailReason {
    /// The boot failed: published at once.
    BootFailed,
    /// A control-plane node's periodic publication.
    Periodic,
    /// A dump asked (`log-tail-request.json`).
    Requested,
}

/// The published tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeLogTail {
    /// What the node says it is; the key's `<writer>`, which IAM bound to the node, is what readers trust.
    pub instance_id: String,
    pub reason: TailReason,
    /// RFC 3339 and Unix seconds, by the node's clock.
    pub published_at: String,
    pub published_unix: i64,
    /// nodeup's own lines, oldest first.
    pub nodeup: Vec<String>,
    /// The etcd supervisor's lines (control-plane nodes), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd: Vec<String>,
}

/// A dump's request that control-plane nodes publish their tails now (`log-tail-request.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TailRequest {
    pub requested_at: String,
    pub requested_unix: i64,
    pub requested_by: String,
}

/// One line as kept: redacted, then cut to [`MAX_LINE_BYTES`] on a character boundary.
pub fn kept_line(line: &str) -> String {
    let redacted = crate::redact::redact(line);
    if redacted.len() <= MAX_LINE_BYTES {
        return redacted.into_owned();
    }
    let mut end = MAX_LINE_BYTES;
    while !redacted.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [cut at {MAX_LINE_BYTES} bytes]", &redacted[..end])
}

impl NodeLogTail {
    /// The tail as kept, by its writer and again by every reader (a stored tail is the node's word, and a node
    /// may be anyone's): the last [`TAIL_LINES`] of each source, every line redacted and cut to
    /// [`MAX_LINE_BYTES`].
    pub fn kept(mut self) -> Self {
        for lines in [&mut self.nodeup, &mut self.etcd] {
            let skip = lines.len().saturating_sub(TAIL_LINES);
            *lines = lines.iter().skip(skip).map(|l| kept_line(l)).collect();
        }
        self
    }

    /// The tail as stored: [`NodeLogTail::kept`], so the whole is under [`MAX_LOG_TAIL`].
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(&self.clone().kept())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_tail_fits_its_read_limit_and_keeps_no_key() {
        let key = crate::pki::generate_ca("x", "X").expect("ca").key_pem;
        let long = "é".repeat(4 * MAX_LINE_BYTES);
        let tail = NodeLogTail {
            instance_id: "i-0123456789abcdef0".into(),
            reason: TailReason::BootFailed,
            published_at: "2026-12-02T16:00:00Z".into(),
            published_unix: 1_796_227_200,
            nodeup: vec![long.clone(); 3 * TAIL_LINES],
            etcd: (0..2 * TAIL_LINES).map(|i| format!("{i} {key}")).collect(),
        };
        let json = tail.to_json().expect("json");
        assert!(json.len() as u64 <= MAX_LOG_TAIL.bytes, "{}", json.len());
        let read: NodeLogTail = serde_json::from_slice(&json).expect("reads back");
        assert_eq!(read.nodeup.len(), TAIL_LINES);
        assert_eq!(read.etcd.len(), TAIL_LINES);
        assert!(read.nodeup[0].ends_with("[cut at 1024 bytes]"));
        assert_eq!(
            read.etcd[0].trim_end(),
            format!("{TAIL_LINES} {}", crate::redact::REDACTED_KEY)
        );
        assert!(!String::from_utf8_lossy(&json).contains("PRIVATE KEY-----\n"));
    }
}
