//! `ballast import kops`'s pure part: kops's `kops.k8s.io/v1alpha2` Cluster and InstanceGroups (what `kops get
//! cluster -o yaml` and `kops get ig -o yaml` print) read as YAML values and mapped to Ballast's spec.
//!
//! Every field of the input gets a fate ([`Fate`]): mapped to a Ballast field, replaced by a choice the operator
//! made on the command line, dropped (only where it cannot matter to the resulting cluster, with why), or refused
//! (with why and what to do). The input is walked as a YAML value, not deserialized into kops's types, so a field
//! this module does not know is refused by its path rather than silently ignored. One refused field means no
//! config: the command writes nothing.

mod cluster;
mod group;
mod rolling_update;
mod termination;
mod walk;

#[cfg(test)]
mod tests;

use ballast_state::error::{FieldError, SpecErrors};
use ballast_state::limits::{check_aliases, check_text, MAX_SPEC_FILE_BYTES};
use ballast_state::spec::{ClusterConfig, Networking};
use yaml_serde::Value;

pub use walk::{Fate, FieldFate};

/// kops's API version this importer reads.
pub const KOPS_API_VERSION: &str = "kops.k8s.io/v1alpha2";

/// What the operator chose on the command line for what kops leaves to them and Ballast cannot leave open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Choices {
    /// The CNI Ballast installs where kops's `networking: {cni: {}}` said "I install my own" (`--networking`).
    pub networking: Option<Networking>,
    /// Replace every group's kops image by Ballast's image for the cluster's version (`--ballast-images`).
    pub ballast_images: bool,
    /// Give no public IP to groups kops gives one (`--no-public-ips`): each such group's `associatePublicIp: false`.
    pub no_public_ips: bool,
}

/// The result of one import: the fate of every field read, and the cluster when nothing was refused.
#[derive(Debug, Clone)]
pub struct Import {
    pub fields: Vec<FieldFate>,
    /// `None` when any field was refused (or the input held no Cluster).
    pub config: Option<ClusterConfig>,
}

impl Import {
    /// The refused fields, in input order.
    pub fn refused(&self) -> impl Iterator<Item = &FieldFate> {
        self.fields
            .iter()
            .filter(|f| matches!(f.fate, Fate::Refused(_)))
    }
}

/// One YAML document of the input, named by its file and place for errors.
#[derive(Debug, Clone)]
pub struct KopsDocument {
    pub source: String,
    pub value: Value,
}

/// Reads the documents of one file's text, bounded like every spec Ballast reads: at most
/// [`MAX_SPEC_FILE_BYTES`], nesting and aliases checked before the parser runs.
pub fn parse_documents(source: &str, text: &str) -> Result<Vec<KopsDocument>, SpecErrors> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Err(refused) = check_text(text, MAX_SPEC_FILE_BYTES).and_then(|()| check_aliases(text)) {
        return Err(SpecErrors::new(
            source,
            vec![FieldError::new(source, "", refused.to_string())],
        ));
    }
    let mut documents = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let label = format!("{source}: document {}", index + 1);
        match <Value as serde::Deserialize>::deserialize(document) {
            Ok(Value::Null) => {}
            Ok(value) => documents.push(KopsDocument {
                source: label,
                value,
            }),
            Err(e) => {
                return Err(SpecErrors::new(
                    source,
                    vec![FieldError::new(&label, "", e.to_string())],
                ))
            }
        }
    }
    Ok(documents)
}

/// Maps kops's documents (one Cluster and its InstanceGroups, in any order) to a Ballast cluster.
pub fn import(documents: &[KopsDocument], choices: Choices) -> Import {
    let mut fates = Vec::new();
    let mut clusters = Vec::new();
    let mut groups = Vec::new();
    for document in documents {
        let kind = document
            .value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        match kind {
            "Cluster" => clusters.push(document),
            "InstanceGroup" => groups.push(document),
            other => fates.push(FieldFate {
                object: document.source.clone(),
                path: "kind".into(),
                fate: Fate::Refused(format!(
                    "{other:?} is not a kops Cluster or InstanceGroup: give what `kops get cluster -o yaml` and \
                     `kops get ig -o yaml` print (keys and secrets are made anew by Ballast)"
                )),
            }),
        }
    }
    let cluster = match clusters.as_slice() {
        [one] => cluster::map(one, choices, &mut fates),
        [] => {
            fates.push(FieldFate {
                object: "input".into(),
                path: "kind".into(),
                fate: Fate::Refused(
                    "no kops Cluster among the documents: add `kops get cluster NAME -o yaml`'s output".into(),
                ),
            });
            None
        }
        [_, second, ..] => {
            fates.push(FieldFate {
                object: second.source.clone(),
                path: "kind".into(),
                fate: Fate::Refused("a second kops Cluster: import one cluster at a time".into()),
            });
            None
        }
    };
    let mapped_groups: Vec<_> = match &cluster {
        Some(cluster) => groups
            .iter()
            .filter_map(|g| group::map(g, cluster, choices, &mut fates))
            .collect(),
        None => Vec::new(),
    };
    let refused = fates.iter().any(|f| matches!(f.fate, Fate::Refused(_)));
    let config = match cluster {
        Some(cluster) if !refused => Some(cluster.finish(mapped_groups)),
        _ => None,
    };
    Import {
        fields: fates,
        config,
    }
}
