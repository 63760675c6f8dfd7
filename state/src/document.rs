//! Reading and writing spec documents: multi-document YAML holding `Cluster` and `InstanceGroup` objects.
//!
//! Structural problems (YAML syntax, unknown fields, wrong types, unknown kinds) are reported with the path of
//! the offending field, and as many of them as can be found in one pass: after each error the offending field
//! is set aside and the document is read again, so an operator fixes a file once, not once per typo.

use serde::de::DeserializeOwned;
use serde::Serialize;
use yaml_serde::Value;

use crate::error::{FieldError, SpecErrors};
use crate::spec::{Cluster, InstanceGroup, API_VERSION, KIND_CLUSTER, KIND_INSTANCE_GROUP};

/// At most this many structural errors are collected from one document.
const MAX_ERRORS_PER_DOCUMENT: usize = 20;

/// One object read from a spec file. Serializes as the object itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SpecObject {
    Cluster(Cluster),
    InstanceGroup(InstanceGroup),
}

impl SpecObject {
    /// `Kind/name`, as errors and logs name objects.
    pub fn reference(&self) -> String {
        match self {
            SpecObject::Cluster(c) => format!("{KIND_CLUSTER}/{}", c.metadata.name),
            SpecObject::InstanceGroup(ig) => format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name),
        }
    }
}

/// Parses every document of a YAML text. `source` names the text (a file name) in errors.
pub fn parse_objects(source: &str, text: &str) -> Result<Vec<SpecObject>, SpecErrors> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let label = format!("document {}", index + 1);
        let value = match <Value as serde::Deserialize>::deserialize(document) {
            Ok(value) => value,
            Err(e) => {
                errors.push(FieldError::new(&label, "", format!("invalid YAML: {e}")));
                // A syntax error leaves the rest of the stream unreadable.
                break;
            }
        };
        if value.is_null() {
            continue;
        }
        match parse_object(&label, value) {
            Ok(object) => objects.push(object),
            Err(mut errs) => errors.append(&mut errs),
        }
    }
    if errors.is_empty() && objects.is_empty() {
        errors.push(FieldError::new(
            source,
            "",
            format!("no objects found: expected a {KIND_CLUSTER} and {KIND_INSTANCE_GROUP}s"),
        ));
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(SpecErrors::new(source, errors))
    }
}

fn parse_object(label: &str, value: Value) -> Result<SpecObject, Vec<FieldError>> {
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = value
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let object = if name.is_empty() {
        format!("{label} ({})", if kind.is_empty() { "?" } else { kind })
    } else {
        format!("{kind}/{name}")
    };
    let api_version = value.get("apiVersion").and_then(Value::as_str);
    if api_version != Some(API_VERSION) {
        let found = api_version.map_or("nothing".to_string(), |v| format!("{v:?}"));
        return Err(vec![FieldError::new(
            &object,
            "apiVersion",
            format!("must be {API_VERSION:?}, found {found}"),
        )]);
    }
    match kind {
        KIND_CLUSTER => parse_typed::<Cluster>(&object, value).map(SpecObject::Cluster),
        KIND_INSTANCE_GROUP => {
            parse_typed::<InstanceGroup>(&object, value).map(SpecObject::InstanceGroup)
        }
        other => Err(vec![FieldError::new(
            &object,
            "kind",
            format!("unknown kind {other:?}: expected {KIND_CLUSTER} or {KIND_INSTANCE_GROUP}"),
        )]),
    }
}

/// Deserializes `value` as `T`, collecting every structural error with its path.
pub(crate) fn parse_typed<T: DeserializeOwned>(
    object: &str,
    mut value: Value,
) -> Result<T, Vec<FieldError>> {
    let mut errors: Vec<FieldError> = Vec::new();
    let mut removed: Vec<Vec<Segment>> = Vec::new();
    loop {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(parsed) if errors.is_empty() => return Ok(parsed),
            Ok(_) => return Err(errors),
            Err(err) => {
                let segments = segments_of(err.path());
                let message = clean_message(&err.inner().to_string());
                // Removing a required field that was wrong makes serde then report it "missing": say it once.
                let is_echo = message.starts_with("missing field")
                    && removed
                        .iter()
                        .any(|r| is_missing_echo(r, &segments, &message));
                if !is_echo {
                    errors.push(FieldError::new(object, &render_path(&segments), message));
                }
                if is_echo
                    || errors.len() >= MAX_ERRORS_PER_DOCUMENT
                    || !remove_at(&mut value, &segments)
                {
                    return Err(errors);
                }
                removed.push(segments);
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

fn segments_of(path: &serde_path_to_error::Path) -> Vec<Segment> {
    path.iter()
        .filter_map(|segment| match segment {
            serde_path_to_error::Segment::Map { key } => Some(Segment::Key(key.clone())),
            serde_path_to_error::Segment::Seq { index } => Some(Segment::Index(*index)),
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {
                None
            }
        })
        .collect()
}

/// `spec.subnets[1].cidr`
pub(crate) fn render_path(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn is_missing_echo(removed: &[Segment], parent: &[Segment], message: &str) -> bool {
    match removed.split_last() {
        Some((Segment::Key(key), removed_parent)) => {
            removed_parent == parent && message.contains(&format!("`{key}`"))
        }
        _ => false,
    }
}

/// Removes the node at `segments` from `value`; false when there is nothing to remove.
fn remove_at(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut node = value;
    for segment in parents {
        let next = match segment {
            Segment::Key(key) => node.get_mut(key.as_str()),
            Segment::Index(i) => node.get_mut(*i),
        };
        match next {
            Some(n) => node = n,
            None => return false,
        }
    }
    match (last, node) {
        (Segment::Key(key), Value::Mapping(map)) => map.remove(key.as_str()).is_some(),
        // Dropping a list element would shift the indices of later errors; blank it instead.
        (Segment::Index(i), Value::Sequence(seq)) if *i < seq.len() => {
            if seq[*i].is_null() {
                return false;
            }
            seq[*i] = Value::Null;
            true
        }
        _ => false,
    }
}

/// serde's messages for enums and fields are precise but noisy; trim what adds nothing for an operator.
fn clean_message(message: &str) -> String {
    message.trim().to_string()
}

/// Renders objects as one multi-document YAML text, in the order given.
pub fn to_yaml_documents<T: Serialize>(objects: &[T]) -> Result<String, yaml_serde::Error> {
    let mut out = String::new();
    for (i, object) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&yaml_serde::to_string(object)?);
    }
    Ok(out)
}

/// Renders a [`SpecObject`] as YAML.
pub fn object_to_yaml(object: &SpecObject) -> Result<String, yaml_serde::Error> {
    yaml_serde::to_string(object)
}

/// Gathers the objects of one file into a cluster config: exactly one Cluster, any number of groups.
pub fn config_from_objects(
    source: &str,
    objects: Vec<SpecObject>,
) -> Result<crate::spec::ClusterConfig, SpecErrors> {
    let mut clusters = Vec::new();
    let mut instance_groups = Vec::new();
    for object in objects {
        match object {
            SpecObject::Cluster(c) => clusters.push(c),
            SpecObject::InstanceGroup(ig) => instance_groups.push(ig),
        }
    }
    if clusters.len() != 1 {
        let found: Vec<String> = clusters
            .iter()
            .map(|c| format!("{:?}", c.metadata.name))
            .collect();
        return Err(SpecErrors::new(
            source,
            vec![FieldError::new(
                source,
                "",
                format!(
                    "holds {} Cluster objects ({}): a cluster spec is one Cluster and its InstanceGroups",
                    clusters.len(),
                    if found.is_empty() { "none".to_string() } else { found.join(", ") }
                ),
            )],
        ));
    }
    Ok(crate::spec::ClusterConfig {
        cluster: clusters.remove(0),
        instance_groups,
    })
}
