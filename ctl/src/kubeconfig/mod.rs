//! `export kubeconfig`'s pure part: merging one cluster's entry into a kubeconfig the way kubectl does, and
//! choosing which file of a `KUBECONFIG` list to write. Issuing the admin certificate is in [`admin`]; reading the
//! store and AWS and writing the file is the command's (`commands::export`).
//!
//! A kubeconfig is merged as YAML values, not typed structs: whatever else the user's file holds (other
//! clusters, exec plugins, preferences, extensions) must come back out unchanged, including fields this code
//! has never heard of.

pub mod admin;
pub mod hosts;

use std::path::{Path, PathBuf};

use base64::Engine;
use yaml_serde::{Mapping, Value};

/// The three named entries `export kubeconfig` writes for one cluster.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterEntry {
    /// The name of the cluster, user and context entries (kops's convention: the cluster's name).
    pub name: String,
    /// `https://HOST[:PORT]`.
    pub server: String,
    /// The name the API server's certificate must carry when `server` dials another (an address the hosts file
    /// gave the name: `kubeconfig::hosts`), written as `tls-server-name`.
    pub tls_server_name: Option<String>,
    /// The cluster CA's certificate, PEM.
    pub ca_pem: String,
    /// Which user the context names, and the credentials to store under it (`--admin`), if any.
    pub user: UserEntry,
}

// The admin key is a private key: never in debug output.
impl std::fmt::Debug for ClusterEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterEntry")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("tls_server_name", &self.tls_server_name)
            .field("user", &self.user.name())
            .finish_non_exhaustive()
    }
}

/// The context's user.
#[derive(Clone, PartialEq, Eq)]
pub enum UserEntry {
    /// A user entry with a client certificate and key (PEM), written under `name`.
    Certificate {
        name: String,
        cert_pem: String,
        key_pem: String,
    },
    /// A user the kubeconfig already has (or will get by other means, e.g. an exec plugin): only named.
    Existing { name: String },
}

impl UserEntry {
    pub fn name(&self) -> &str {
        match self {
            UserEntry::Certificate { name, .. } | UserEntry::Existing { name } => name,
        }
    }
}

/// Why a kubeconfig cannot be merged into. The file is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    #[error(
        "{path}: not a kubeconfig (YAML): {source}; fix or move it, or pass --kubeconfig FILE"
    )]
    Parse {
        path: String,
        #[source]
        source: yaml_serde::Error,
    },
    #[error("{path}: not a kubeconfig: {what}; fix or move it, or pass --kubeconfig FILE")]
    Shape { path: String, what: String },
    #[error("rendering the kubeconfig for {path}: {source}")]
    Render {
        path: String,
        #[source]
        source: yaml_serde::Error,
    },
}

/// Merges `entry` into `existing` (a kubeconfig's text; `None` or blank for a new file): the entries named
/// `entry.name` (cluster, context) and the user are replaced or added, `current-context` is set to it, and
/// everything else is kept. `path` only names the file in errors.
pub fn merge(
    existing: Option<&str>,
    entry: &ClusterEntry,
    path: &Path,
) -> Result<String, KubeconfigError> {
    let path_text = path.display().to_string();
    let shape = |what: &str| KubeconfigError::Shape {
        path: path_text.clone(),
        what: what.to_string(),
    };
    let mut config = match existing.filter(|text| !text.trim().is_empty()) {
        None => Mapping::new(),
        Some(text) => match yaml_serde::from_str::<Value>(text) {
            Ok(Value::Mapping(mapping)) => mapping,
            // kubectl writes `null` documents for an emptied file.
            Ok(Value::Null) => Mapping::new(),
            Ok(_) => return Err(shape("its top level is not a mapping")),
            Err(source) => {
                return Err(KubeconfigError::Parse {
                    path: path_text,
                    source,
                })
            }
        },
    };
    set_default(&mut config, "apiVersion", Value::from("v1"));
    set_default(&mut config, "kind", Value::from("Config"));
    if config.get("kind").and_then(Value::as_str) != Some("Config") {
        return Err(shape("its `kind` is not Config"));
    }

    let base64 = |pem: &str| Value::from(base64::engine::general_purpose::STANDARD.encode(pem));
    let mut cluster = Mapping::new();
    cluster.insert("server".into(), Value::from(entry.server.as_str()));
    cluster.insert("certificate-authority-data".into(), base64(&entry.ca_pem));
    if let Some(name) = &entry.tls_server_name {
        cluster.insert("tls-server-name".into(), Value::from(name.as_str()));
    }
    upsert(&mut config, "clusters", "cluster", &entry.name, cluster).map_err(|w| shape(&w))?;

    if let UserEntry::Certificate {
        name,
        cert_pem,
        key_pem,
    } = &entry.user
    {
        let mut user = Mapping::new();
        user.insert("client-certificate-data".into(), base64(cert_pem));
        user.insert("client-key-data".into(), base64(key_pem));
        upsert(&mut config, "users", "user", name, user).map_err(|w| shape(&w))?;
    }

    let mut context = Mapping::new();
    context.insert("cluster".into(), Value::from(entry.name.as_str()));
    context.insert("user".into(), Value::from(entry.user.name()));
    upsert(&mut config, "contexts", "context", &entry.name, context).map_err(|w| shape(&w))?;
    config.insert("current-context".into(), Value::from(entry.name.as_str()));

    yaml_serde::to_string(&Value::Mapping(config)).map_err(|source| KubeconfigError::Render {
        path: path_text,
        source,
    })
}

fn set_default(config: &mut Mapping, key: &str, value: Value) {
    if config.get(key).is_none_or(Value::is_null) {
        config.insert(key.into(), value);
    }
}

/// Replaces the `{name: NAME, FIELD: ...}` item of list `list` (kubectl's named-list shape), or appends one.
fn upsert(
    config: &mut Mapping,
    list: &str,
    field: &str,
    name: &str,
    body: Mapping,
) -> Result<(), String> {
    let items = config
        .entry(list.into())
        .or_insert_with(|| Value::Sequence(Vec::new()));
    if items.is_null() {
        *items = Value::Sequence(Vec::new());
    }
    let Value::Sequence(items) = items else {
        return Err(format!("its `{list}` is not a list"));
    };
    let mut item = Mapping::new();
    item.insert("name".into(), Value::from(name));
    item.insert(field.into(), Value::Mapping(body));
    let same_name = |v: &Value| v.get("name").and_then(Value::as_str) == Some(name);
    match items.iter_mut().find(|v| same_name(v)) {
        Some(existing) => *existing = Value::Mapping(item),
        None => items.push(Value::Mapping(item)),
    }
    Ok(())
}

/// Which file to write, as kubectl chooses: `--kubeconfig` when given; else, from the `KUBECONFIG` list, the
/// first file that already defines a context or cluster named `name` (a re-export updates it where it is),
/// else the first file that exists, else the last of the list; without `KUBECONFIG`, `~/.kube/config`.
/// `defines(path)` says whether a file exists and names `name` (`None` when it does not exist).
pub fn choose_file(
    flag: Option<&Path>,
    kubeconfig_env: Option<&str>,
    home: Option<&Path>,
    mut defines: impl FnMut(&Path) -> Option<bool>,
) -> Option<PathBuf> {
    if let Some(path) = flag {
        return Some(path.to_path_buf());
    }
    let list: Vec<PathBuf> = kubeconfig_env
        .map(|value| {
            std::env::split_paths(value)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    if list.is_empty() {
        return home.map(|home| home.join(".kube").join("config"));
    }
    let found: Vec<Option<bool>> = list.iter().map(|p| defines(p)).collect();
    let index = found
        .iter()
        .position(|f| *f == Some(true))
        .or_else(|| found.iter().position(Option::is_some))
        .unwrap_or(list.len() - 1);
    Some(list[index].clone())
}

/// Whether kubeconfig text defines a context or cluster named `name` (unparsable text: no).
pub fn defines_name(text: &str, name: &str) -> bool {
    let Ok(config) = yaml_serde::from_str::<Value>(text) else {
        return false;
    };
    ["contexts", "clusters"].iter().any(|list| {
        config
            .get(*list)
            .and_then(Value::as_sequence)
            .is_some_and(|items| {
                items
                    .iter()
                    .any(|v| v.get("name").and_then(Value::as_str) == Some(name))
            })
    })
}

#[cfg(test)]
mod tests;
