//! `ballast toolbox dump`'s pure part (docs/toolbox.md): what a dump holds (its [`Kind`]s of parts), what is
//! missing and why, the redaction every part goes through ([`redact`]), the bound on each part's size, and the
//! rendering into one document or files by kind plus an `index`. The gathering (state store and AWS reads) is
//! `ctl/src/commands/toolbox.rs`.

pub mod redact;

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// The largest one part may be once rendered: past it, the part's longest lists lose items from their end, and
/// the index says how many.
pub const MAX_PART_BYTES: usize = 4 * 1024 * 1024;

/// The parts of a dump, each a file with `--out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Spec,
    Completed,
    Cloud,
    Reports,
    Etcd,
    Markers,
    Logs,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Spec,
        Kind::Completed,
        Kind::Cloud,
        Kind::Reports,
        Kind::Etcd,
        Kind::Markers,
        Kind::Logs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Spec => "spec",
            Kind::Completed => "completed",
            Kind::Cloud => "cloud",
            Kind::Reports => "reports",
            Kind::Etcd => "etcd",
            Kind::Markers => "markers",
            Kind::Logs => "logs",
        }
    }

    /// What the part holds, for the index.
    pub fn what(self) -> &'static str {
        match self {
            Kind::Spec => "the Cluster and InstanceGroups as written (secrets redacted)",
            Kind::Completed => "the completed spec plans are made from (secrets redacted)",
            Kind::Cloud => {
                "AWS by the cluster's tags: instances, Auto Scaling groups, load balancers, volumes, security groups"
            }
            Kind::Reports => "every node's latest boot report, signed or not",
            Kind::Etcd => "etcd's record, published health reports and their judgement",
            Kind::Markers => "rolling-update markers on the groups and the cluster's lock, if any",
            Kind::Logs => "each node's published log tail (nodeup and the etcd supervisor)",
        }
    }
}

/// Something the dump does not hold, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// What is missing: a part (`cloud`) or an item of one (`logs: i-0abc`).
    pub what: String,
    pub why: String,
}

/// What was gathered: parts by kind, what is missing, and notes that explain without being a gap.
#[derive(Debug, Clone, Default)]
pub struct Gathered {
    pub parts: BTreeMap<Kind, Value>,
    pub missing: Vec<Missing>,
    pub notes: Vec<String>,
}

impl Gathered {
    /// A part, found.
    pub fn found(&mut self, kind: Kind, value: Value) {
        self.parts.insert(kind, value);
    }

    /// What another gatherer found (a part read at the same time as this one's).
    pub fn merge(&mut self, other: Gathered) {
        self.parts.extend(other.parts);
        self.missing.extend(other.missing);
        self.notes.extend(other.notes);
    }

    /// A part or an item of one, not found, and why.
    pub fn missing(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.missing.push(Missing {
            what: what.into(),
            why: why.into(),
        });
    }
}

/// How the dump is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
}

impl Format {
    pub fn extension(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }

    fn render(self, value: &impl Serialize) -> Result<String, RenderError> {
        match self {
            Format::Yaml => yaml_serde::to_string(value).map_err(|e| RenderError(e.to_string())),
            Format::Json => serde_json::to_string_pretty(value)
                .map(|mut s| {
                    s.push('\n');
                    s
                })
                .map_err(|e| RenderError(e.to_string())),
        }
    }
}

/// A part could not be rendered (a value serde cannot write).
#[derive(Debug, thiserror::Error)]
#[error("rendering the dump: {0}")]
pub struct RenderError(String);

/// One part in the index.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IndexPart {
    pub kind: Kind,
    /// The part's file under `--out` (with one document on stdout, its key).
    pub file: String,
    pub what: &'static str,
    pub bytes: usize,
    /// Items dropped to keep the part within [`MAX_PART_BYTES`], if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<String>,
}

/// What is where, what is missing and why.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub cluster: String,
    pub generated_at: String,
    /// True when anything is missing: the command then exits 7.
    pub partial: bool,
    pub parts: Vec<IndexPart>,
    pub missing: Vec<Missing>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The rendered dump: files by kind (`<kind>.<ext>`) and `index.<ext>`, or the one document holding them all.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub index: Index,
    pub files: Vec<(String, String)>,
    pub document: String,
}

/// Redacts every part, bounds it, and renders the parts and the index.
pub fn assemble(
    cluster: &str,
    generated_at: &str,
    gathered: Gathered,
    format: Format,
) -> Result<Rendered, RenderError> {
    let mut files = Vec::new();
    let mut parts = Vec::new();
    let mut whole = serde_json::Map::new();
    for (kind, mut value) in gathered.parts {
        redact::redact_value(&mut value);
        let cut = bound(&mut value, MAX_PART_BYTES);
        let text = format.render(&value)?;
        let file = format!("{}.{}", kind.name(), format.extension());
        parts.push(IndexPart {
            kind,
            file: file.clone(),
            what: kind.what(),
            bytes: text.len(),
            cut,
        });
        files.push((file, text));
        whole.insert(kind.name().to_string(), value);
    }
    let index = Index {
        cluster: cluster.to_string(),
        generated_at: generated_at.to_string(),
        partial: !gathered.missing.is_empty(),
        parts,
        missing: gathered.missing,
        notes: gathered.notes,
    };
    let index_value = serde_json::to_value(&index).map_err(|e| RenderError(e.to_string()))?;
    files.push((
        format!("index.{}", format.extension()),
        format.render(&index)?,
    ));
    let mut document = serde_json::Map::new();
    document.insert("index".to_string(), index_value);
    document.extend(whole);
    let document = format.render(&Value::Object(document))?;
    Ok(Rendered {
        index,
        files,
        document,
    })
}

/// Keeps `value` within `max` bytes of JSON by dropping items from the end of its longest lists (anywhere in
/// it); says how many were dropped, if any.
pub fn bound(value: &mut Value, max: usize) -> Option<String> {
    let mut dropped = 0usize;
    while serde_json::to_vec(value).map_or(0, |v| v.len()) > max {
        let list = longest_list(value)
            .and_then(|pointer| value.pointer_mut(&pointer))
            .and_then(Value::as_array_mut);
        match list {
            Some(list) => {
                // Half of the list each round: a few rounds for any size.
                let drop = list.len().div_ceil(2);
                list.truncate(list.len() - drop);
                dropped += drop;
            }
            None => {
                *value = Value::String(format!("[cut: over {max} bytes, with no list to shorten]"));
                return Some("the whole part: no list to shorten".to_string());
            }
        }
    }
    (dropped > 0).then(|| {
        format!("{dropped} item(s) dropped from the end of the longest lists, to stay under {max} bytes")
    })
}

/// The JSON pointer of the largest non-empty list reachable through objects (the part itself included).
fn longest_list(value: &Value) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    let mut stack = vec![(String::new(), value)];
    while let Some((pointer, v)) = stack.pop() {
        match v {
            Value::Array(items) if !items.is_empty() => {
                let size = serde_json::to_vec(v).map_or(0, |b| b.len());
                if best.as_ref().is_none_or(|(b, _)| size > *b) {
                    best = Some((size, pointer));
                }
            }
            Value::Object(map) => {
                for (key, child) in map {
                    let escaped = key.replace('~', "~0").replace('/', "~1");
                    stack.push((format!("{pointer}/{escaped}"), child));
                }
            }
            _ => {}
        }
    }
    best.map(|(_, pointer)| pointer)
}

#[cfg(test)]
mod tests;
