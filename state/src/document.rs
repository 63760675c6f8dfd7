//! Reading and writing spec documents: multi-document YAML holding `Cluster` and `InstanceGroup` objects.
//!
//! Structural problems (YAML syntax, unknown fields, wrong types, unknown kinds) are reported with the path of
//! the offending field, and as many of them as can be found in one pass: after each error the offending field
//! is set aside and the document is read again, so an operator fixes a file once, not once per typo.

use serde::de::DeserializeOwned;
use serde::Serialize;
use yaml_serde::Value;

use crate::error::{FieldError, SpecErrors};
use crate::limits::{check_aliases, check_text, path_key, MAX_PARSED_BYTES, MAX_SPEC_FILE_BYTES};
use crate::spec::{Cluster, InstanceGroup, API_VERSION, KIND_CLUSTER, KIND_INSTANCE_GROUP};

/// At most this many structural errors are collected from one document.
const MAX_ERRORS_PER_DOCUMENT: usize = 20;

/// One object read from a spec file. Serializes as the object itself.
// A file holds one cluster and at most `MAX_INSTANCE_GROUPS` groups: the larger variant's bytes cost nothing worth
// a box that every match on a cluster would have to see through.
#[allow(clippy::large_enum_variant)]
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

/// Parses a spec file an operator gave (`create -f`, `replace -f`): at most
/// [`MAX_SPEC_FILE_BYTES`](crate::limits::MAX_SPEC_FILE_BYTES). `source` names the file in errors.
pub fn parse_spec_file(source: &str, text: &str) -> Result<Vec<SpecObject>, SpecErrors> {
    parse_bounded(source, text, MAX_SPEC_FILE_BYTES)
}

/// Parses every document of a YAML text, such as a spec Ballast stored itself. `source` names the text (a
/// file name, a key) in errors.
pub fn parse_objects(source: &str, text: &str) -> Result<Vec<SpecObject>, SpecErrors> {
    parse_bounded(source, text, MAX_PARSED_BYTES)
}

fn parse_bounded(source: &str, text: &str, limit: usize) -> Result<Vec<SpecObject>, SpecErrors> {
    // Editors on Windows start UTF-8 files with a byte-order mark, which YAML would read as part of the first
    // key (and then report the document's `kind` missing).
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Refused before parsing: the parser's time grows faster than the text on deep nesting, and aliases that
    // repeat aliases multiply the nodes a small text stands for (the alias budget).
    if let Err(refused) = check_text(text, limit).and_then(|()| check_aliases(text)) {
        return Err(SpecErrors::new(
            source,
            vec![FieldError::new(source, "", refused.to_string())],
        ));
    }
    let hidden = hidden_tags(text);
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let label = format!("document {}", index + 1);
        let value = match <Value as serde::Deserialize>::deserialize(document) {
            Ok(value) => value,
            Err(e) => {
                errors.push(FieldError::new(&label, "", yaml_message(&e)));
                // A syntax error leaves the rest of the stream unreadable.
                break;
            }
        };
        if value.is_null() {
            continue;
        }
        let hidden = hidden.get(index).map(Vec::as_slice).unwrap_or_default();
        match parse_object(&label, value, hidden) {
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

fn parse_object(
    label: &str,
    value: Value,
    hidden: &[(String, String)],
) -> Result<SpecObject, Vec<FieldError>> {
    if !value.is_mapping() {
        return Err(vec![FieldError::new(
            label,
            "",
            format!(
                "is {}, not an object: expected apiVersion, kind, metadata and spec",
                found_words(&value_kind(&value))
            ),
        )]);
    }
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = kind.as_str();
    let name_value = value.get("metadata").and_then(|m| m.get("name"));
    let name = name_value.and_then(Value::as_str).unwrap_or("");
    let object = object_label(label, kind, name);
    let errors = identity_errors(&object, &value, kind, name_value);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut value = value;
    let mut tags: Vec<FieldError> = hidden
        .iter()
        .map(|(path, tag)| tag_error(&object, path, tag))
        .collect();
    tags.extend(strip_tags(&object, &mut value));
    tags.truncate(MAX_ERRORS_PER_DOCUMENT);
    let parsed = match kind {
        KIND_CLUSTER => parse_typed::<Cluster>(&object, value).map(SpecObject::Cluster),
        _ => parse_typed::<InstanceGroup>(&object, value).map(SpecObject::InstanceGroup),
    };
    match parsed {
        Ok(object) if tags.is_empty() => Ok(object),
        Ok(_) => Err(tags),
        Err(errors) => {
            // A tag's removal may leave a value of the wrong type: the tag is the error to fix there.
            let tagged: Vec<&str> = tags.iter().map(|e| e.path.as_str()).collect();
            let mut all = tags.clone();
            all.extend(
                errors
                    .into_iter()
                    .filter(|e| !tagged.contains(&e.path.as_str())),
            );
            Err(all)
        }
    }
}

/// `Kind/name` when the document says both; otherwise its place in the file, so a document with neither is
/// still found (`document 2`, `document 2 (Cluster)`, `document 2 (name "nodes")`).
fn object_label(label: &str, kind: &str, name: &str) -> String {
    match (kind.is_empty(), name.is_empty()) {
        (false, false) => format!("{kind}/{name}"),
        (false, true) => format!("{label} ({kind})"),
        (true, false) => format!("{label} (name {name:?})"),
        (true, true) => label.to_string(),
    }
}

/// Problems with what names an object: its apiVersion, kind and metadata.name, all reported at once.
fn identity_errors(
    object: &str,
    value: &Value,
    kind: &str,
    name: Option<&Value>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match value.get("apiVersion").and_then(Value::as_str) {
        None => errors.push(FieldError::new(
            object,
            "apiVersion",
            format!("is missing: set it to {API_VERSION:?}"),
        )),
        Some(API_VERSION) => {}
        Some(other) => errors.push(FieldError::new(
            object,
            "apiVersion",
            format!("must be {API_VERSION:?}, found {other:?}"),
        )),
    }
    match kind {
        KIND_CLUSTER | KIND_INSTANCE_GROUP => {}
        "" => errors.push(FieldError::new(
            object,
            "kind",
            format!("is missing: set it to {KIND_CLUSTER} or {KIND_INSTANCE_GROUP}"),
        )),
        other => errors.push(FieldError::new(
            object,
            "kind",
            format!("unknown kind {other:?}: expected {KIND_CLUSTER} or {KIND_INSTANCE_GROUP}"),
        )),
    }
    match name {
        None => errors.push(FieldError::new(
            object,
            "metadata.name",
            "is missing: every object needs a name",
        )),
        Some(Value::String(name)) if !name.is_empty() => {}
        Some(other) => errors.push(FieldError::new(
            object,
            "metadata.name",
            format!(
                "expected a non-empty string, found {}",
                found_words(&value_kind(other))
            ),
        )),
    }
    errors
}

/// YAML tags (`!thing value`) mean nothing in a spec, and serde would read a tagged value as an enum variant
/// named by the tag: each is an error, with its path, and is removed so the rest of the document is checked.
fn strip_tags(object: &str, value: &mut Value) -> Vec<FieldError> {
    let mut tags = Vec::new();
    take_tags(value, "", &mut tags);
    tags.truncate(MAX_ERRORS_PER_DOCUMENT);
    tags.iter()
        .map(|(path, tag)| tag_error(object, path, tag))
        .collect()
}

fn tag_error(object: &str, path: &str, tag: &str) -> FieldError {
    FieldError::new(
        object,
        path,
        format!("has the YAML tag {tag}: a spec uses plain values, remove the tag"),
    )
}

/// Every tag in `value` as (path, tag), each removed from the value.
fn take_tags(value: &mut Value, path: &str, tags: &mut Vec<(String, String)>) {
    if let Value::Tagged(tagged) = value {
        tags.push((path.to_string(), tagged.tag.to_string()));
        let inner = std::mem::take(&mut tagged.value);
        *value = inner;
    }
    match value {
        Value::Sequence(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                take_tags(item, &format!("{path}[{i}]"), tags);
            }
        }
        Value::Mapping(map) => {
            for (key, item) in map.iter_mut() {
                let key = match key {
                    Value::String(key) => key.clone(),
                    other => found_words(&value_kind(other)),
                };
                take_tags(item, &path_key(path, &key), tags);
            }
        }
        _ => {}
    }
}

/// What a secondary-handle tag (`!!python/object`) is rewritten to for [`hidden_tags`]: a local tag serde keeps.
const CORE_TAG_MARK: &str = "!ballast-hidden-tag-secondary-";
/// What a verbatim tag (`!<tag:yaml.org,2002:str>`) is rewritten to, its URI percent-encoded where a local tag
/// may not hold it.
const VERBATIM_TAG_MARK: &str = "!ballast-hidden-tag-verbatim-";

/// The tags the parser resolves to a full URI and serde then drops without a word, per document (by its index in
/// the stream): `!!python/object` (`tag:yaml.org,2002:python/object`), `!!str`, verbatim `!<...>`. A value under
/// one would be read as if untagged, although a spec refuses every tag (docs/spec.md).
///
/// The text is read a second time with each such tag rewritten as a local tag, which serde keeps; only where tags
/// are is taken from that reading, never a value (the rewrite also touches `!!` inside strings and comments,
/// where no tag results, so nothing is found there). A rewritten text the parser cannot read finds nothing: the
/// real reading reports its error.
fn hidden_tags(text: &str) -> Vec<Vec<(String, String)>> {
    if !text.contains("!!") && !text.contains("!<") {
        return Vec::new();
    }
    let rewritten = rewrite_hidden_tags(text);
    let mut found = Vec::new();
    for document in yaml_serde::Deserializer::from_str(&rewritten) {
        let Ok(mut value) = <Value as serde::Deserialize>::deserialize(document) else {
            break;
        };
        let mut tags = Vec::new();
        take_tags(&mut value, "", &mut tags);
        found.push(
            tags.into_iter()
                .filter_map(|(path, tag)| Some((path, as_written(&tag)?)))
                .collect(),
        );
    }
    found
}

/// `text` with `!!suffix` written `!ballast-hidden-tag-secondary-suffix` and `!<uri>` written
/// `!ballast-hidden-tag-verbatim-` and the URI, `%`, `!`, `,`, `[`, `]`, `{` and `}` percent-encoded.
fn rewrite_hidden_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 64);
    let mut rest = text;
    while let Some(at) = rest.find('!') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        if let Some(after) = tail.strip_prefix("!!") {
            out.push_str(CORE_TAG_MARK);
            rest = after;
        } else if let Some((uri, after)) = tail
            .strip_prefix("!<")
            .and_then(|t| t.split_once('>'))
            .filter(|(uri, _)| !uri.is_empty() && !uri.contains(char::is_whitespace))
        {
            out.push_str(VERBATIM_TAG_MARK);
            for c in uri.chars() {
                match c {
                    '%' | '!' | ',' | '[' | ']' | '{' | '}' => {
                        out.push_str(&format!("%{:02X}", u32::from(c)))
                    }
                    c => out.push(c),
                }
            }
            rest = after;
        } else {
            out.push('!');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// A tag found in the rewritten text as its author wrote it (`!!python/object`, `!<tag:yaml.org,2002:str>`);
/// `None` for a tag that was not rewritten (the real reading reports those).
fn as_written(tag: &str) -> Option<String> {
    if let Some(suffix) = tag.strip_prefix(CORE_TAG_MARK) {
        Some(format!("!!{suffix}"))
    } else {
        let uri = tag.strip_prefix(VERBATIM_TAG_MARK)?;
        let mut decoded = String::with_capacity(uri.len());
        let mut chars = uri.chars();
        while let Some(c) = chars.next() {
            if c == '%' {
                let hex: String = chars.by_ref().take(2).collect();
                match u8::from_str_radix(&hex, 16) {
                    Ok(byte) => decoded.push(char::from(byte)),
                    Err(_) => decoded.push_str(&format!("%{hex}")),
                }
            } else {
                decoded.push(c);
            }
        }
        Some(format!("!<{decoded}>"))
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
                let message = in_project_words(&err.inner().to_string());
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
                out = path_key(&out, key);
            }
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn is_missing_echo(removed: &[Segment], parent: &[Segment], message: &str) -> bool {
    match removed.split_last() {
        Some((Segment::Key(key), removed_parent)) => {
            removed_parent == parent && message.contains(&format!("{key:?}"))
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

/// The YAML parser's message, with the one internal term it uses said plainly.
fn yaml_message(error: &yaml_serde::Error) -> String {
    let message = error.to_string();
    let message = message.replace(
        "recursion limit exceeded",
        "nested too deeply (an alias that contains itself does that)",
    );
    format!("invalid YAML: {message}")
}

/// serde's messages name Rust types (`u32`, `struct RootVolumeSpec`, `a Value::Tagged enum`) and quote with
/// backticks; say the same in the spec's terms: `expected a whole number from 0 to 4294967295, found the
/// string "three"`.
fn in_project_words(message: &str) -> String {
    let message = message.trim();
    let mismatch = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        .and_then(|rest| rest.split_once(", expected "));
    if let Some((found, expected)) = mismatch {
        return format!(
            "expected {}, found {}",
            expected_words(expected),
            found_words(found)
        );
    }
    let message = match message.strip_prefix("unknown variant ") {
        Some(rest) => format!("unknown value {rest}"),
        None => message.to_string(),
    };
    backticks_to_quotes(&message)
}

fn expected_words(expected: &str) -> String {
    let range = |max: &str| format!("a whole number from 0 to {max}");
    match expected {
        "u8" => range("255"),
        "u16" => range("65535"),
        "u32" => range("4294967295"),
        "u64" => range("18446744073709551615"),
        "i8" | "i16" | "i32" | "i64" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "a list".into(),
        "a map" => "a mapping".into(),
        // An enum field given something other than one of its names.
        "a Value::Tagged enum" => "one of the allowed names (a string)".into(),
        other if other.starts_with("struct ") => "a mapping of fields".into(),
        other if other.starts_with("enum ") => "one of the allowed names (a string)".into(),
        other => backticks_to_quotes(other),
    }
}

/// serde's "found" side (`integer \`3\``, `sequence`, `map`) in plain words.
fn found_words(found: &str) -> String {
    let found = backticks_to_quotes(found);
    let unquoted = |rest: &str| rest.trim_matches('"').to_string();
    if let Some(rest) = found.strip_prefix("integer ") {
        format!("the number {}", unquoted(rest))
    } else if let Some(rest) = found.strip_prefix("floating point ") {
        format!("the number {}", unquoted(rest))
    } else if let Some(rest) = found.strip_prefix("boolean ") {
        unquoted(rest)
    } else if let Some(rest) = found.strip_prefix("string ") {
        format!("the string {rest}")
    } else {
        match found.as_str() {
            "sequence" => "a list".into(),
            "map" => "a mapping".into(),
            "enum" => "a tagged value".into(),
            "unit value" | "null" => "nothing".into(),
            _ => found,
        }
    }
}

/// The serde words [`found_words`] takes, for a value we hold.
fn value_kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Sequence(_) => "sequence".into(),
        Value::Mapping(_) => "map".into(),
        Value::Tagged(_) => "enum".into(),
    }
}

fn backticks_to_quotes(text: &str) -> String {
    text.replace('`', "\"")
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

/// Refuses a file that gives one InstanceGroup twice, naming both places: where a file's groups change a
/// stored cluster one by one (`create -f` of groups, `replace -f`), the second would silently replace the first.
/// (A file that makes a new cluster is validated whole instead, where a repeated name is one error among all.)
pub fn check_unique_groups(source: &str, groups: &[InstanceGroup]) -> Result<(), SpecErrors> {
    let mut first_seen: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut errors = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        let name = group.metadata.name.as_str();
        match first_seen.get(name) {
            Some(first) => errors.push(FieldError::new(
                &format!("{KIND_INSTANCE_GROUP}/{name}"),
                "metadata.name",
                format!(
                    "is given twice, as the file's instance groups {first} and {} (in the file's order): one would \
                     silently replace the other; keep one, or rename it",
                    index + 1
                ),
            )),
            None => {
                first_seen.insert(name, index + 1);
            }
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(SpecErrors::new(source, errors))
    }
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
