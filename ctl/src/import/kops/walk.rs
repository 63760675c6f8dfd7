//! Walking a kops document as a YAML value: every key read is taken out of its mapping, and whatever is left
//! when a mapping is done is refused by its path. No field can pass unseen.

use serde::Serialize;
use yaml_serde::{Mapping, Value};

/// What became of one kops field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase", tag = "fate", content = "detail")]
pub enum Fate {
    /// Carried over: what it became in Ballast's spec.
    Mapped(String),
    /// Replaced by what the operator chose on the command line (the flag is named).
    Replaced(String),
    /// Left out because it cannot matter to the resulting cluster: why.
    Dropped(String),
    /// Ballast cannot do what it says: why, and what to do.
    Refused(String),
}

impl Fate {
    pub fn label(&self) -> &'static str {
        match self {
            Fate::Mapped(_) => "mapped",
            Fate::Replaced(_) => "replaced",
            Fate::Dropped(_) => "dropped",
            Fate::Refused(_) => "refused",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Fate::Mapped(s) | Fate::Replaced(s) | Fate::Dropped(s) | Fate::Refused(s) => s,
        }
    }
}

/// One field's fate: the kops object (`Cluster/NAME`, `InstanceGroup/NAME`) and the field's path in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldFate {
    pub object: String,
    pub path: String,
    #[serde(flatten)]
    pub fate: Fate,
}

/// Records fates for one object.
pub struct Recorder<'a> {
    pub object: String,
    pub fates: &'a mut Vec<FieldFate>,
}

impl Recorder<'_> {
    fn push(&mut self, path: &str, fate: Fate) {
        self.fates.push(FieldFate {
            object: self.object.clone(),
            path: path.to_string(),
            fate,
        });
    }
    pub fn mapped(&mut self, path: &str, to: impl Into<String>) {
        self.push(path, Fate::Mapped(to.into()));
    }
    pub fn replaced(&mut self, path: &str, by: impl Into<String>) {
        self.push(path, Fate::Replaced(by.into()));
    }
    pub fn dropped(&mut self, path: &str, why: impl Into<String>) {
        self.push(path, Fate::Dropped(why.into()));
    }
    pub fn refused(&mut self, path: &str, why: impl Into<String>) {
        self.push(path, Fate::Refused(why.into()));
    }

    /// The value as a mapping's fields, or refused when it is not a mapping.
    pub fn fields(&mut self, path: &str, value: Value) -> Option<Fields> {
        match value {
            Value::Mapping(mapping) => Some(Fields {
                path: path.to_string(),
                mapping,
            }),
            Value::Null => Some(Fields {
                path: path.to_string(),
                mapping: Mapping::new(),
            }),
            other => {
                self.refused(path, format!("is {}, not a mapping", describe(&other)));
                None
            }
        }
    }

    /// A string scalar, or refused.
    pub fn string(&mut self, path: &str, value: Value) -> Option<String> {
        match value {
            Value::String(s) => Some(s),
            other => {
                self.refused(path, format!("is {}, not a string", describe(&other)));
                None
            }
        }
    }

    /// A boolean, or refused.
    pub fn boolean(&mut self, path: &str, value: Value) -> Option<bool> {
        match value {
            Value::Bool(b) => Some(b),
            other => {
                self.refused(path, format!("is {}, not true or false", describe(&other)));
                None
            }
        }
    }

    /// A boolean whose `true` is what Ballast always does (dropped, saying so) and whose `false` asks for what
    /// Ballast never does (refused, saying why); anything else refused as not a boolean.
    pub fn only_true(&mut self, path: &str, value: Value, when_true: &str, when_false: &str) {
        match self.boolean(path, value) {
            Some(true) => self.dropped(path, when_true),
            Some(false) => self.refused(path, when_false),
            None => {}
        }
    }

    /// A whole number that fits a `u32`, or refused.
    pub fn number(&mut self, path: &str, value: Value) -> Option<u32> {
        match value.as_u64().map(u32::try_from) {
            Some(Ok(n)) => Some(n),
            _ => {
                self.refused(
                    path,
                    format!("is {}, not a whole number up to 2^32-1", describe(&value)),
                );
                None
            }
        }
    }

    /// A list of strings, or refused (each bad item by its index).
    pub fn strings(&mut self, path: &str, value: Value) -> Option<Vec<String>> {
        let Value::Sequence(items) = value else {
            self.refused(path, format!("is {}, not a list", describe(&value)));
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for (i, item) in items.into_iter().enumerate() {
            match self.string(&format!("{path}[{i}]"), item) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// A mapping of strings to strings (labels), or refused.
    pub fn string_map(
        &mut self,
        path: &str,
        value: Value,
    ) -> Option<std::collections::BTreeMap<String, String>> {
        let mut fields = self.fields(path, value)?;
        let mut out = std::collections::BTreeMap::new();
        let mut ok = true;
        for (key, value) in fields.drain() {
            let item = format!("{path}.{key}");
            match value {
                Value::String(s) => {
                    out.insert(key, s);
                }
                // A label's value written unquoted (`true`, `123`) is the string YAML shows.
                Value::Bool(b) => {
                    out.insert(key, b.to_string());
                }
                Value::Number(n) => {
                    out.insert(key, n.to_string());
                }
                other => {
                    self.refused(&item, format!("is {}, not a string", describe(&other)));
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// Refuses every field left in `fields`, each by its path.
    pub fn finish(&mut self, mut fields: Fields, why: &str) {
        for (key, _) in fields.drain() {
            let path = format!("{}.{key}", fields.path);
            self.refused(&path, why.to_string());
        }
    }
}

/// The fields of one mapping, taken out one by one.
pub struct Fields {
    path: String,
    mapping: Mapping,
}

impl Fields {
    /// The path of a field of this mapping.
    pub fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// A field's value, left in place (to decide another field's fate by it).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.mapping.get(key)
    }

    /// Takes a field out: it is then the caller's to give a fate.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.mapping.remove(key)
    }

    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }

    /// Takes every field left, keys as text (a non-string key is shown as YAML writes it).
    pub fn drain(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.mapping)
            .into_iter()
            .map(|(k, v)| {
                let key = match k {
                    Value::String(s) => s,
                    other => yaml_serde::to_string(&other)
                        .map(|s| s.trim_end().to_string())
                        .unwrap_or_else(|_| "?".into()),
                };
                (key, v)
            })
            .collect()
    }
}

/// A value's kind in words, for refusals.
pub fn describe(value: &Value) -> String {
    match value {
        Value::Null => "empty".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(t) => format!("a value tagged {} (tags are refused)", t.tag),
    }
}

/// Whether a CIDR is an IPv6 one (`::/0`).
pub fn is_ipv6_cidr(cidr: &str) -> bool {
    cidr.contains(':')
}
