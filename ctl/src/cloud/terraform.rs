//! `update cluster --target terraform`: the cluster's AWS resources as Terraform (HCL, AWS provider 5.x), written
//! by the same engine run as a plan: every kind diffs its wanted state against an actual state in which nothing
//! of the cluster exists yet (shared resources exist as the spec names them), and renders those changes, what
//! `apply` would create, with [`Task::render_terraform`](super::task::Task::render_terraform). Ids the direct
//! apply records in [`Known`](super::kinds::Known) are Terraform references here (`${aws_vpc.NAME.id}`), so a
//! resource names what it depends on by reference, never by id. HCL is built with hcl-rs and printed in
//! `terraform fmt`'s layout ([`fmt`]); resources print sorted by type and name, so a second run writes the same
//! bytes. Pure: no AWS, no state store.

use std::collections::BTreeMap;

use hcl::expr::{Traversal, Variable};
use hcl::{Block, Body, Expression, Object, ObjectKey};

use super::plan::Planned;

/// A rendering that cannot be written as Terraform.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Two kinds rendered the same Terraform resource.
    #[error(
        "{kind}.{name} is rendered twice: two resources of the cluster map to one Terraform name"
    )]
    Duplicate { kind: String, name: String },
    /// Terraform is rendered against a state in which the cluster's own resources do not exist yet, so every
    /// change is a creation; anything else means the rendering was asked of another state.
    #[error("{resource}: only creations are rendered as Terraform, not {action}")]
    NotACreate {
        resource: String,
        action: &'static str,
    },
    /// A kind whose resources are not written as Terraform yet: refused, never silently left out.
    #[error(
        "{resource}: not written as Terraform yet ({why}); make this cluster with `update cluster --target \
         direct`, or leave the feature out of its spec"
    )]
    NotYet { resource: String, why: &'static str },
    /// Something the caller reads for the rendering (AWS, the state store) was not given: refused rather than
    /// written without it.
    #[error("{resource}: {why}")]
    Missing { resource: String, why: String },
    /// hcl-rs could not print the document.
    #[error("printing HCL: {0}")]
    Hcl(#[from] hcl::Error),
}

/// The AWS provider the output is written for.
pub const AWS_PROVIDER_VERSION: &str = ">= 5.0.0";
/// The first AWS provider whose `aws_iam_openid_connect_provider` takes no `thumbprint_list` (hashicorp's
/// terraform-provider-aws pull request 37255, December 2024, after IAM made the list optional): required only
/// by a file that has an OIDC provider, which Ballast makes without thumbprints.
pub const AWS_PROVIDER_VERSION_OIDC_WITHOUT_THUMBPRINTS: &str = ">= 5.81.0";
/// Terraform itself: 1.0 reads every construct used here.
pub const TERRAFORM_VERSION: &str = ">= 1.0.0";
/// The one file written.
pub const FILE_NAME: &str = "kubernetes.tf";

/// For a kind not rendered as Terraform yet: nothing to write is fine, anything else is refused, naming the
/// first resource.
pub fn not_yet<P: Planned>(changes: &[P], why: &'static str) -> Result<(), RenderError> {
    match changes.iter().flat_map(Planned::planned).next() {
        Some(change) => Err(RenderError::NotYet {
            resource: format!("{} {}", change.kind, change.name),
            why,
        }),
        None => Ok(()),
    }
}

/// A Terraform-safe resource name, as kops makes them: every character that is not a letter, digit, `_` or `-`
/// becomes `-` (`nodes.demo.example.com` -> `nodes-demo-example-com`); a leading digit gets a `_` before it.
pub fn tf_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if !out.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        out.insert(0, '_');
    }
    out
}

/// A reference to an attribute of a resource, as [`Known`](super::kinds::Known) holds it: `${TYPE.NAME.ATTR}`.
pub fn reference(kind: &str, name: &str, attribute: &str) -> String {
    format!("${{{kind}.{name}.{attribute}}}")
}

/// A reference to an attribute of a data source: `${data.TYPE.NAME.ATTR}`.
pub fn data_reference(kind: &str, name: &str, attribute: &str) -> String {
    format!("${{data.{kind}.{name}.{attribute}}}")
}

/// A value as HCL: a reference made by [`reference`] becomes a bare traversal (`aws_vpc.x.id`), anything else a
/// string literal.
pub fn value(text: &str) -> Expression {
    let inner = text
        .strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .filter(|inner| !inner.contains(['$', '{', '}', '"', ' ']) && inner.contains('.'));
    match inner {
        Some(path) => {
            let mut parts = path.split('.');
            let head = parts.next().unwrap_or_default();
            let mut builder = Traversal::builder(Variable::unchecked(head));
            for part in parts {
                builder = builder.attr(part);
            }
            Expression::from(builder.build())
        }
        None => Expression::String(text.to_string()),
    }
}

/// A list of values (references or literals).
pub fn values<S: AsRef<str>>(texts: &[S]) -> Expression {
    Expression::Array(texts.iter().map(|t| value(t.as_ref())).collect())
}

/// A JSON document as HCL's `jsonencode(...)` of an object, each `${TYPE.NAME.ATTR}` string in it a reference
/// Terraform resolves (in a plain string it would be escaped, and the document would name the text `${...}`).
pub fn jsonencode(document: &serde_json::Value) -> Expression {
    hcl::expr::FuncCall::builder("jsonencode")
        .arg(json_as_hcl(document))
        .build()
        .into()
}

fn json_as_hcl(v: &serde_json::Value) -> Expression {
    use serde_json::Value;
    match v {
        Value::Null => Expression::Null,
        Value::Bool(b) => Expression::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Expression::Number(i.into()),
            None => Expression::String(n.to_string()),
        },
        Value::String(s) => value(s),
        Value::Array(items) => Expression::Array(items.iter().map(json_as_hcl).collect()),
        Value::Object(fields) => {
            let mut object = Object::new();
            for (k, v) in fields {
                object.insert(ObjectKey::from(k.as_str()), json_as_hcl(v));
            }
            Expression::Object(object)
        }
    }
}

/// A map of strings (tags): `{ "Name" = "x", ... }`, in key order.
pub fn string_map(map: &BTreeMap<String, String>) -> Expression {
    let mut object = Object::new();
    for (k, v) in map {
        object.insert(ObjectKey::from(k.as_str()), Expression::String(v.clone()));
    }
    Expression::Object(object)
}

/// A resource's (or data source's) body under construction: attributes in the order given, then blocks.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    attributes: Vec<(String, Expression)>,
    blocks: Vec<(String, Resource)>,
}

impl Resource {
    pub fn new() -> Self {
        Resource::default()
    }

    pub fn attr(mut self, key: &str, value: impl Into<Expression>) -> Self {
        self.attributes.push((key.to_string(), value.into()));
        self
    }

    pub fn block(mut self, name: &str, body: Resource) -> Self {
        self.blocks.push((name.to_string(), body));
        self
    }

    fn into_body(self) -> Body {
        let mut body = Body::builder();
        for (key, value) in self.attributes {
            body = body.add_attribute((key, value));
        }
        for (name, inner) in self.blocks {
            body = body.add_block(
                Block::builder(name)
                    .add_structures(inner.into_body())
                    .build(),
            );
        }
        body.build()
    }

    /// The attribute `key`, if set (the equivalence test reads rendered resources back through this shape).
    pub fn get(&self, key: &str) -> Option<&Expression> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// The Terraform of one cluster, being rendered.
#[derive(Debug, Clone, Default)]
pub struct Terraform {
    region: String,
    /// By (type, name): sorted, so the output is stable.
    resources: BTreeMap<(String, String), Resource>,
    data: BTreeMap<(String, String), Resource>,
    outputs: BTreeMap<String, Expression>,
    /// Groups whose launch templates and Auto Scaling Groups wait for the load balancer (see [`Self::deferred`]).
    deferred: Vec<String>,
    /// The AWS provider's version constraint: [`AWS_PROVIDER_VERSION`] unless a resource needs a later one.
    aws_provider_version: Option<&'static str>,
    /// The node specs the launch templates' hashes name: not Terraform's (Ballast writes them to the state
    /// store), handed over so the caller writes exactly these.
    node_specs: Vec<ballast_state::node::RenderedNodeSpec>,
}

impl Terraform {
    pub fn new(region: &str) -> Self {
        Terraform {
            region: region.to_string(),
            ..Default::default()
        }
    }

    /// Adds a resource; a second one of the same type and name is refused.
    pub fn resource(&mut self, kind: &str, name: &str, body: Resource) -> Result<(), RenderError> {
        let key = (kind.to_string(), name.to_string());
        if self.resources.contains_key(&key) {
            return Err(RenderError::Duplicate {
                kind: kind.to_string(),
                name: name.to_string(),
            });
        }
        self.resources.insert(key, body);
        Ok(())
    }

    /// Adds a data source; the same one asked for twice is one (two groups may use one image).
    pub fn data(&mut self, kind: &str, name: &str, body: Resource) {
        self.data
            .entry((kind.to_string(), name.to_string()))
            .or_insert(body);
    }

    /// Sets an output (kops's names: `vpc_id`, `node_security_group_ids`, ...).
    pub fn output(&mut self, name: &str, value: Expression) {
        self.outputs.insert(name.to_string(), value);
    }

    /// Notes a group whose launch template and Auto Scaling Group are not rendered yet: its node spec names the
    /// API load balancer's DNS name, which exists only once Terraform has made the load balancer.
    pub fn defer(&mut self, group: &str) {
        self.deferred.push(group.to_string());
    }

    pub fn deferred(&self) -> &[String] {
        &self.deferred
    }

    /// Raises the AWS provider's version constraint to `version` (one of this module's constants) for a
    /// resource an earlier provider cannot take as written.
    pub fn require_aws_provider(&mut self, version: &'static str) {
        self.aws_provider_version = Some(version);
    }

    /// Hands over the node specs rendered with the plan (their hashes are in the launch templates).
    pub fn keep_node_specs(&mut self, specs: Vec<ballast_state::node::RenderedNodeSpec>) {
        self.node_specs = specs;
    }

    /// The node specs rendered with the plan, for the caller to write to the state store; none before the
    /// load balancer exists.
    pub fn node_specs(&self) -> &[ballast_state::node::RenderedNodeSpec] {
        &self.node_specs
    }

    /// The resources rendered, by (type, name).
    pub fn resources(&self) -> &BTreeMap<(String, String), Resource> {
        &self.resources
    }

    /// The output's value, if set.
    pub fn output_value(&self, name: &str) -> Option<&Expression> {
        self.outputs.get(name)
    }

    /// The files to write: `kubernetes.tf`, in `terraform fmt`'s layout.
    pub fn files(&self) -> Result<Vec<(String, String)>, RenderError> {
        let mut body = Body::builder();
        for (name, value) in &self.outputs {
            body = body.add_block(
                Block::builder("output")
                    .add_label(name.as_str())
                    .add_attribute(("value", value.clone()))
                    .build(),
            );
        }
        body = body.add_block(
            Block::builder("provider")
                .add_label("aws")
                .add_attribute(("region", self.region.as_str()))
                .build(),
        );
        for ((kind, name), data) in &self.data {
            body = body.add_block(
                Block::builder("data")
                    .add_label(kind.as_str())
                    .add_label(name.as_str())
                    .add_structures(data.clone().into_body())
                    .build(),
            );
        }
        for ((kind, name), resource) in &self.resources {
            body = body.add_block(
                Block::builder("resource")
                    .add_label(kind.as_str())
                    .add_label(name.as_str())
                    .add_structures(resource.clone().into_body())
                    .build(),
            );
        }
        let mut aws = Object::new();
        aws.insert(ObjectKey::from("source"), Expression::from("hashicorp/aws"));
        aws.insert(
            ObjectKey::from("version"),
            Expression::from(self.aws_provider_version.unwrap_or(AWS_PROVIDER_VERSION)),
        );
        // `required_providers { aws = { source, version } }`: the block's attribute is the provider's local
        // name, its value the requirement itself (an object nested under a second `aws` key is refused by
        // `terraform init` and `terraform providers`).
        body = body.add_block(
            Block::builder("terraform")
                .add_attribute(("required_version", TERRAFORM_VERSION))
                .add_block(
                    Block::builder("required_providers")
                        .add_attribute(("aws", Expression::Object(aws)))
                        .build(),
                )
                .build(),
        );
        // Lists on one line, as kops's files have them (`subnets = [a, b]`); objects one item a line.
        let mut formatter = hcl::format::Formatter::builder()
            .compact_arrays(true)
            .build_vec();
        let text = hcl::format::Format::format_string(&body.build(), &mut formatter)?;
        Ok(vec![(FILE_NAME.to_string(), fmt(&text))])
    }
}

/// `terraform fmt`'s layout on hcl-rs's output: the `=` of adjacent single-line attributes (and object items)
/// line up one space after the longest key. A line that opens a multi-line value or a block, a closing bracket
/// or a blank line ends such a run, as in hclwrite's formatter.
pub fn fmt(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        let mut end = i;
        while end < lines.len() && single_line_assignment(lines[end]).is_some() {
            end += 1;
        }
        if end == i {
            out.push(lines[i].trim_end().to_string());
            i += 1;
            continue;
        }
        let width = (i..end)
            .filter_map(|k| single_line_assignment(lines[k]).map(|(_, key)| key.len()))
            .max()
            .unwrap_or(0);
        for line in &lines[i..end] {
            if let Some((indent, key)) = single_line_assignment(line) {
                let rest = line.trim_start()[key.len()..].trim_start();
                out.push(format!("{}{key:<width$} {rest}", " ".repeat(indent)));
            }
        }
        i = end;
    }
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// `(indentation, key)` of a `key = value` line whose value ends on it.
fn single_line_assignment(line: &str) -> Option<(usize, &str)> {
    let (indent, key) = assignment(line)?;
    let end = line.trim_end();
    let opens =
        end.ends_with('{') || end.ends_with('[') || end.ends_with('(') || end.contains("<<");
    (!opens).then_some((indent, key))
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// `(indentation, key)` of a `key = value` line.
fn assignment(line: &str) -> Option<(usize, &str)> {
    let trimmed = line.trim_start();
    let key_end = if let Some(rest) = trimmed.strip_prefix('"') {
        // A quoted key: to its closing quote (keys here hold no escaped quotes).
        rest.find('"').map(|e| e + 2)?
    } else {
        trimmed.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))?
    };
    if key_end == 0 {
        return None;
    }
    let after = trimmed[key_end..].trim_start();
    (after.starts_with('=') && !after.starts_with("=="))
        .then(|| (indent_of(line), &trimmed[..key_end]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_references() {
        assert_eq!(tf_name("nodes.demo.example.com"), "nodes-demo-example-com");
        assert_eq!(tf_name("1a.demo"), "_1a-demo");
        assert_eq!(
            hcl::format::to_string(&value(&reference("aws_vpc", "demo", "id"))).expect("fmt"),
            "aws_vpc.demo.id"
        );
        assert_eq!(
            hcl::format::to_string(&value("vpc-123")).expect("fmt"),
            "\"vpc-123\""
        );
    }

    #[test]
    fn fmt_aligns_consecutive_attributes_only() {
        let text = "a = 1\nlong_key = 2\n\nb {\n  x = 1\n  yy = {\n    \"k\" = \"v\"\n    \"kk\" = \"w\"\n  }\n  z = 3\n  zz = 4\n}\n";
        assert_eq!(
            fmt(text),
            "a        = 1\nlong_key = 2\n\nb {\n  x = 1\n  yy = {\n    \"k\"  = \"v\"\n    \"kk\" = \"w\"\n  }\n  z  = 3\n  zz = 4\n}\n"
        );
    }
}
