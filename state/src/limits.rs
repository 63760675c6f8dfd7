//! Bounds on what Ballast accepts, in one place: every input has a size, a depth or a count it may not pass,
//! so a mistaken or hostile input is refused at once with a message naming the limit, before any work in
//! proportion to it is done (parsing, generating groups, tagging AWS resources). docs/spec.md lists them.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::LazyLock;

use regex::Regex;

/// A spec file an operator gives (`create -f`, `replace -f`, an edited object): a real cluster's spec is a
/// few KiB, so 1 MiB leaves room for hundreds of instance groups and still parses in milliseconds.
pub const MAX_SPEC_FILE_BYTES: usize = 1024 * 1024;
/// Any YAML text Ballast parses, the completed specs it stored itself included: completion writes every
/// default out, so a stored spec may be several times the size of the file it came from.
pub const MAX_PARSED_BYTES: usize = 16 * MAX_SPEC_FILE_BYTES;
/// Nesting levels of YAML, by indentation or by brackets. The spec's deepest field is 5 levels down; the
/// YAML parser's cost grows with the square of bracket nesting (100,000 brackets took minutes), so deeper
/// texts are refused by a linear scan before the parser sees them.
pub const MAX_NESTING_DEPTH: usize = 64;

/// A bound on one object read from the state store whose writer Ballast trusts less than the operator: a node
/// (its instance role may write its own report, and a control-plane node `etcd/*` and
/// `control-plane/node-bootstrap.json`). Read with
/// `ballast_store::store::StateStore::get_bounded`, which never holds more than `bytes` and
/// one more in memory and refuses a larger object naming its key and the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimit {
    pub bytes: u64,
    /// What is read, in words: "a node's boot report".
    pub what: &'static str,
}

/// A node's boot report (`reports/<role-id>:<instance-id>.json`, signed): a few KiB (the report, its add-ons, a
/// certificate and a signature). A node writes what it likes in its own, so without a bound one worker could make
/// every `get instances`, `validate cluster` and rolling update load gigabytes (a 150 MB report took 341 MB).
pub const MAX_REPORT: ReadLimit = ReadLimit {
    bytes: 1024 * 1024,
    what: "a node's boot report",
};
/// A record a control-plane node writes for the others and the operator: an etcd health report
/// (`etcd/health/*`), etcd's cluster record (`etcd/cluster.json`), a backup request or a backup's metadata,
/// the published bootstrap services (`control-plane/node-bootstrap.json`): each well under 4 KiB. The instance
/// role may write them, so a node taken over could otherwise make the operator's commands, every etcd
/// supervisor and every booting worker read without end.
pub const MAX_NODE_RECORD: ReadLimit = ReadLimit {
    bytes: 64 * 1024,
    what: "a record nodes write (etcd's records, the bootstrap services)",
};

/// An etcd backup's snapshot (`etcd/backups/<id>/snapshot.db`), which the leader's supervisor writes and a
/// restore reads whole: at most etcd's largest recommended backend quota (`--quota-backend-bytes`, 8 GiB), so
/// a node taken over cannot make a restore read without end.
pub const MAX_SNAPSHOT: ReadLimit = ReadLimit {
    bytes: 8 * 1024 * 1024 * 1024,
    what: "an etcd snapshot (etcd's largest backend quota)",
};

/// YAML aliases (`*name`) repeat the node their anchor (`&name`) marks, and an anchored node may itself hold
/// aliases, so a few KiB can stand for billions of nodes ("billion laughs": a 10 KB spec took 7.7 s and 850 MB
/// to parse, 25 KB ran out of memory), past the size and depth limits. The alias budget: a text may hold, with
/// every alias expanded, at most [`MAX_YAML_NODES_PER_BYTE`] nodes per byte of its text (more than any text
/// without aliases can, since each node takes at least a character or a separator) plus this many, which a
/// spec's few anchors (a shared list of subnets, common labels) never come near. Counted before anything is
/// built, stopping at the bound, so a refusal costs no more than the budget.
pub const MAX_ALIAS_NODES: usize = 10_000;
/// See [`MAX_ALIAS_NODES`].
pub const MAX_YAML_NODES_PER_BYTE: usize = 2;

/// IAM allows role names of at most 64 characters ("IAM and AWS STS quotas"), and a cluster's roles (and
/// their instance profiles) are named `control-plane.<cluster>` and `nodes.<cluster>`
/// (`ctl/src/cloud/model.rs`, `role_resource_name`).
pub const IAM_MAX_ROLE_NAME_CHARS: usize = 64;
/// The longest prefix a cluster's IAM role name puts before the cluster's name.
pub const IAM_ROLE_NAME_PREFIX: &str = "control-plane.";
/// The longest cluster name: 50 characters, so that `control-plane.<cluster>` is a name IAM accepts. A longer
/// name was stored by `create cluster` and failed only at `update cluster`, after other resources were made.
pub const MAX_CLUSTER_NAME_CHARS: usize = IAM_MAX_ROLE_NAME_CHARS - IAM_ROLE_NAME_PREFIX.len();
/// Instance groups one cluster may have. Each becomes an Auto Scaling group, a launch template and a node spec,
/// and `update cluster`, `validate cluster` and a rolling update make AWS calls per group: a file of thousands
/// of groups (1 MiB holds ten thousand) would make thousands of AWS resources and calls. Real clusters have a
/// handful to a few dozen.
pub const MAX_INSTANCE_GROUPS: usize = 100;

/// The largest control-plane count (`--control-plane-count`): etcd needs 1, 3 or 5 members.
pub const MAX_CONTROL_PLANE_COUNT: u32 = 5;
/// The most instances one group may run (`--node-count`, an instance group's `maxSize`).
pub const MAX_GROUP_SIZE: u32 = 1000;
/// The most instances a bastion group may run: a jump host or two per zone is plenty, and every one is a door
/// from the internet into the VPC.
pub const MAX_BASTION_SIZE: u32 = 6;
/// The most instances one API-server group may run: each holds connections to every etcd member and watches
/// every resource, so a few dozen API servers already load etcd more than any cluster's clients need.
pub const MAX_API_SERVER_GROUP_SIZE: u32 = 20;
/// The most annotations `spec.cilium.agentPodAnnotations` (and `operatorPodAnnotations`) may hold.
pub const MAX_POD_ANNOTATIONS: usize = 32;
/// The longest annotation value Ballast passes on; Kubernetes caps all of an object's annotations together at
/// 256 KiB, which [`MAX_POD_ANNOTATIONS`] values of this size stay well under.
pub const MAX_POD_ANNOTATION_VALUE_BYTES: usize = 4096;

/// Sizes in GiB an etcd member's volume may have: room for etcd's default 2 GiB quota with its WAL and
/// snapshots at the low end, EBS's largest gp2/gp3 volume at the high end.
pub const ETCD_VOLUME_SIZE_GIB: std::ops::RangeInclusive<u32> = 3..=16_384;
/// EBS types an etcd member's volume may have: general purpose SSDs (io1/io2 need an IOPS figure the spec
/// does not carry; HDD types are too slow for etcd's fsyncs).
pub const ETCD_VOLUME_TYPES: [&str; 2] = ["gp3", "gp2"];

/// Provisioned IOPS a gp3 volume may have (the EC2 API reference's CreateVolume, ModifyVolume and launch
/// templates' `Iops`: 3,000 - 16,000).
pub const GP3_IOPS: std::ops::RangeInclusive<u32> = 3000..=16_000;
/// Throughput in MiB/s a gp3 volume may have (CreateVolume's and launch templates' `Throughput`: 125 - 1,000).
pub const GP3_THROUGHPUT_MIBS: std::ops::RangeInclusive<u32> = 125..=1000;
/// What a gp3 volume has when no IOPS are set: AWS's baseline, whatever its size.
pub const GP3_BASELINE_IOPS: u32 = 3000;
/// What a gp3 volume has when no throughput is set: AWS's baseline.
pub const GP3_BASELINE_THROUGHPUT_MIBS: u32 = 125;
/// gp3's most IOPS per GiB of size (above its baseline).
pub const GP3_MAX_IOPS_PER_GIB: u32 = 500;
/// gp3's most throughput (MiB/s) per provisioned IOPS.
pub const GP3_MAX_THROUGHPUT_PER_IOPS: f64 = 0.25;
/// Provisioned IOPS an io1 volume may have (100 - 64,000), and at most 50 per GiB.
pub const IO1_IOPS: std::ops::RangeInclusive<u32> = 100..=64_000;
pub const IO1_MAX_IOPS_PER_GIB: u32 = 50;
/// Provisioned IOPS an io2 volume may have (100 - 256,000, the Nitro instances' figure), and at most 1,000 per GiB.
pub const IO2_IOPS: std::ops::RangeInclusive<u32> = 100..=256_000;
pub const IO2_MAX_IOPS_PER_GIB: u32 = 1000;

/// How long an audit line may wait on a control-plane node before it is shipped (`spec.auditLog.chunkInterval`):
/// at least 5 s (a chunk is an S3 PUT; shorter would make a busy API server's log thousands of tiny objects a
/// day per node), at most an hour (it is what a power cut may lose).
pub const AUDIT_CHUNK_INTERVAL_SECS: std::ops::RangeInclusive<u64> = 5..=3600;
/// The size of one audit chunk (`spec.auditLog.chunkMaxBytes`): from 64 KiB (one large audit event fits) to
/// 64 MiB (held in the shipper's memory while it is uploaded in one PUT).
pub const AUDIT_CHUNK_MAX_BYTES: std::ops::RangeInclusive<u64> = 64 * 1024..=64 * 1024 * 1024;
/// Days audit chunks are kept (`spec.auditLog.retentionDays`): ten years at most, like every duration.
pub const AUDIT_RETENTION_DAYS: std::ops::RangeInclusive<u32> = 1..=3650;

/// A terminating lifecycle hook's heartbeat timeout (`spec.terminationHandling.heartbeatTimeout`): Auto Scaling's
/// own bounds for `HeartbeatTimeout`, 30 s to 7200 s (PutLifecycleHook's API reference).
pub const TERMINATION_HEARTBEAT_SECS: std::ops::RangeInclusive<u64> = 30..=7200;

/// The cluster autoscaler's durations (`spec.clusterAutoscaler.scaleDownDelayAfterAdd`, `scaleDownUnneededTime`,
/// `maxNodeProvisionTime`): a second to a day. Longer would leave unneeded nodes running, or a failed scale-up
/// unnoticed, for days.
pub const AUTOSCALER_DURATION_SECS: std::ops::RangeInclusive<u64> = 1..=86_400;
/// The highest `autoscalePriority` of an instance group (the priority expander's tiers are compared, never
/// summed; a million tiers is more than any cluster has groups).
pub const MAX_AUTOSCALE_PRIORITY: u32 = 1_000_000;

/// AWS allows 50 tags on a resource ("Tag restrictions" in the EC2 user guide), the ones Ballast adds
/// included.
pub const AWS_MAX_TAGS_PER_RESOURCE: usize = 50;
/// Tags Ballast puts on an instance besides the cloud labels: `kubernetes.io/cluster/NAME`,
/// `ballast.dev/cluster`, `ballast.dev/cluster-id`, `ballast.dev/role`, `ballast.dev/instance-group`,
/// `ballast.dev/node-spec-hash` and `Name`. No resource gets more of them than an instance does.
pub const BALLAST_TAGS_PER_RESOURCE: usize = 7;
/// Cloud labels one resource may carry: the cluster's and its group's together.
pub const MAX_CLOUD_LABELS: usize = AWS_MAX_TAGS_PER_RESOURCE - BALLAST_TAGS_PER_RESOURCE;
/// AWS counts tag lengths in Unicode characters.
pub const MAX_TAG_KEY_CHARS: usize = 128;
pub const MAX_TAG_VALUE_CHARS: usize = 256;
/// Key prefixes AWS keeps for itself (any letter case) or Ballast sets on its own resources.
const RESERVED_TAG_PREFIXES: [&str; 3] = ["aws:", "kubernetes.io/cluster/", "ballast.dev/"];

/// The characters AWS accepts in every service's tags: letters, numbers, spaces and `_ . : / = + - @`.
static TAG_TEXT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$").expect("static regex"));

/// What is wrong with one tag (a cloud label), in words for the operator; empty when nothing is.
pub fn tag_problems(key: &str, value: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let key_chars = key.chars().count();
    if key_chars == 0 || key_chars > MAX_TAG_KEY_CHARS {
        problems.push(format!(
            "tag keys must be 1 to {MAX_TAG_KEY_CHARS} characters, found {key_chars}"
        ));
    }
    if !TAG_TEXT.is_match(key) {
        problems.push(
            "the key may hold only letters, numbers, spaces and _ . : / = + - @ (AWS's tag characters)".into(),
        );
    }
    let lower = key.to_lowercase();
    if RESERVED_TAG_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        problems
            .push("is reserved for AWS or Ballast's own ownership tags: choose another key".into());
    }
    let value_chars = value.chars().count();
    if value_chars > MAX_TAG_VALUE_CHARS {
        problems.push(format!(
            "tag values must be at most {MAX_TAG_VALUE_CHARS} characters, found {value_chars}"
        ));
    }
    if !TAG_TEXT.is_match(value) {
        problems.push(
            "the value may hold only letters, numbers, spaces and _ . : / = + - @ (AWS's tag characters)"
                .into(),
        );
    }
    problems
}

/// At most this many labels of one map are reported wrong, so 2,000 bad labels make a readable message.
const MAX_LABEL_ERRORS: usize = 10;

/// Problems with the cloud labels at `path` (`spec.cloudLabels`), as (field path, message): too many of them,
/// and what is wrong with each label.
pub fn cloud_label_problems(
    path: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    if labels.len() > MAX_CLOUD_LABELS {
        problems.push((path.to_string(), too_many_labels(labels.len())));
    }
    let mut wrong_labels = 0;
    for (key, value) in labels {
        let label_problems = tag_problems(key, value);
        if label_problems.is_empty() {
            continue;
        }
        wrong_labels += 1;
        if wrong_labels > MAX_LABEL_ERRORS {
            continue;
        }
        let field = path_key(path, key);
        problems.extend(label_problems.into_iter().map(|p| (field.clone(), p)));
    }
    if wrong_labels > MAX_LABEL_ERRORS {
        problems.push((
            path.to_string(),
            format!(
                "{} more labels are wrong in the same ways (the first {MAX_LABEL_ERRORS} are shown)",
                wrong_labels - MAX_LABEL_ERRORS
            ),
        ));
    }
    problems
}

/// A group's instances carry the cluster's labels and the group's together (the group's win on the same key):
/// a problem when each map is within the limit but both together are not.
pub fn merged_cloud_labels_problem(
    cluster: &BTreeMap<String, String>,
    group: &BTreeMap<String, String>,
) -> Option<String> {
    if cluster.len() > MAX_CLOUD_LABELS || group.len() > MAX_CLOUD_LABELS {
        return None; // Each is reported on its own.
    }
    let merged = cluster
        .keys()
        .chain(group.keys())
        .collect::<std::collections::BTreeSet<_>>();
    (merged.len() > MAX_CLOUD_LABELS).then(|| {
        format!(
            "together with the cluster's spec.cloudLabels makes {}",
            too_many_labels(merged.len())
        )
    })
}

fn too_many_labels(count: usize) -> String {
    format!(
        "{count} labels, more than {MAX_CLOUD_LABELS}: AWS allows {AWS_MAX_TAGS_PER_RESOURCE} tags on a \
         resource and Ballast adds up to {BALLAST_TAGS_PER_RESOURCE} of its own"
    )
}

/// Keys longer than this are cut short where a path shows them.
const MAX_KEY_SHOWN_CHARS: usize = 64;

/// The path of `key` in the mapping at `map_path`: `spec.cloudLabels.team`, or `spec.cloudLabels["a\nb"]`
/// when the key would not read as one path segment (spaces, control characters, quotes, brackets; empty).
/// Long keys are cut short, so a hostile key cannot make every error a page long.
pub fn path_key(map_path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key.chars().count() <= MAX_KEY_SHOWN_CHARS
        && !key
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "\"'[]".contains(c));
    let segment = if plain {
        key.to_string()
    } else {
        let mut shown: String = key.chars().take(MAX_KEY_SHOWN_CHARS).collect();
        if shown.len() < key.len() {
            shown.push_str("...");
        }
        format!("[{shown:?}]")
    };
    match (map_path.is_empty(), plain) {
        (true, _) | (false, false) => format!("{map_path}{segment}"),
        (false, true) => format!("{map_path}.{segment}"),
    }
}

/// Why a text is refused before it is parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextLimitError {
    TooLarge {
        bytes: usize,
        limit: usize,
    },
    TooDeep {
        line: usize,
        limit: usize,
    },
    /// More nodes, with its aliases expanded, than the alias budget allows ([`MAX_ALIAS_NODES`]).
    TooManyNodes {
        limit: usize,
    },
}

impl std::fmt::Display for TextLimitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // `bytes` may be only what was read before giving up, so the message says "larger", not how much.
            TextLimitError::TooLarge { limit, .. } => write!(
                f,
                "is larger than the limit of {limit} bytes: a cluster's spec is a few KiB"
            ),
            TextLimitError::TooDeep { line, limit } => write!(
                f,
                "nests deeper than {limit} levels at line {line}: a spec needs a handful, so this is not one"
            ),
            TextLimitError::TooManyNodes { limit } => write!(
                f,
                "expands through its YAML aliases (*name) to more than {limit} values, the alias budget for a \
                 text of its size ({MAX_YAML_NODES_PER_BYTE} per byte and {MAX_ALIAS_NODES}): aliases that repeat \
                 aliases multiply, and no spec needs that; write the repeated parts out"
            ),
        }
    }
}

/// Refuses a text longer than `limit` bytes or nested deeper than [`MAX_NESTING_DEPTH`], in one pass.
///
/// The depth is over-estimated, never under: every `[` or `{` counts, even in a quoted string or a comment,
/// and block levels are counted from indentation and leading `- ` (or `? `) markers. Reading quotes and
/// comments as YAML does would take a YAML scanner, whose mistakes here would let a deep text through; a
/// real spec is nowhere near the limit either way.
pub fn check_text(text: &str, limit: usize) -> Result<(), TextLimitError> {
    if text.len() > limit {
        return Err(TextLimitError::TooLarge {
            bytes: text.len(),
            limit,
        });
    }
    let mut brackets: usize = 0;
    // Columns where enclosing block collections start, innermost last.
    let mut indents: Vec<usize> = Vec::new();
    // YAML breaks lines at `\r` as well as `\n`; lines are numbered by `\n` as editors do.
    let lines = text
        .split('\n')
        .enumerate()
        .flat_map(|(index, line)| line.split('\r').map(move |part| (index, part)));
    for (index, line) in lines {
        let too_deep = || TextLimitError::TooDeep {
            line: index + 1,
            limit: MAX_NESTING_DEPTH,
        };
        let content = line.trim_start_matches([' ', '\t']);
        if !content.is_empty() && !content.starts_with('#') {
            let mut column = line.len() - content.len();
            while indents.last().is_some_and(|&top| top >= column) {
                indents.pop();
            }
            indents.push(column);
            // `- - - x` opens a collection per marker on one line.
            let mut rest = content;
            while let Some(after) = rest
                .strip_prefix("- ")
                .or_else(|| rest.strip_prefix("? "))
                .or_else(|| rest.strip_prefix("-\t"))
            {
                let trimmed = after.trim_start_matches([' ', '\t']);
                column += rest.len() - trimmed.len();
                indents.push(column);
                rest = trimmed;
                if indents.len() > MAX_NESTING_DEPTH {
                    return Err(too_deep());
                }
            }
            if indents.len() > MAX_NESTING_DEPTH {
                return Err(too_deep());
            }
        }
        for byte in line.bytes() {
            match byte {
                b'[' | b'{' => {
                    brackets += 1;
                    if brackets > MAX_NESTING_DEPTH {
                        return Err(too_deep());
                    }
                }
                b']' | b'}' => brackets = brackets.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// The alias budget of a text of `bytes` bytes: [`MAX_ALIAS_NODES`].
pub fn yaml_node_budget(bytes: usize) -> usize {
    bytes
        .saturating_mul(MAX_YAML_NODES_PER_BYTE)
        .saturating_add(MAX_ALIAS_NODES)
}

/// Refuses a YAML text whose nodes, with every alias expanded, are more than [`yaml_node_budget`] allows.
///
/// The parser's own events are walked (every document of the stream, sharing one budget) and counted without
/// building anything, stopping at the first node past the budget: a "billion laughs" text is refused after
/// at most the budget's worth of work. A text the parser cannot read passes here; parsing it for real then
/// reports where it is wrong.
pub fn check_aliases(text: &str) -> Result<(), TextLimitError> {
    use serde::de::DeserializeSeed;
    let limit = yaml_node_budget(text.len());
    let counter = NodeCounter {
        left: &std::cell::Cell::new(limit),
        exceeded: &std::cell::Cell::new(false),
    };
    for document in yaml_serde::Deserializer::from_str(text) {
        if counter.deserialize(document).is_err() {
            if counter.exceeded.get() {
                return Err(TextLimitError::TooManyNodes { limit });
            }
            // Not a budget problem: the real parse says what it is.
            break;
        }
    }
    Ok(())
}

/// Counts the nodes a deserializer yields (an alias's nodes each time it is used), and fails past the budget.
#[derive(Clone, Copy)]
struct NodeCounter<'a> {
    left: &'a std::cell::Cell<usize>,
    exceeded: &'a std::cell::Cell<bool>,
}

impl NodeCounter<'_> {
    fn count<E: serde::de::Error>(self) -> Result<(), E> {
        match self.left.get().checked_sub(1) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => {
                self.exceeded.set(true);
                Err(E::custom("over the alias budget"))
            }
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for NodeCounter<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for NodeCounter<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.count()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.count()
    }
    fn visit_i128<E: serde::de::Error>(self, _: i128) -> Result<(), E> {
        self.count()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.count()
    }
    fn visit_u128<E: serde::de::Error>(self, _: u128) -> Result<(), E> {
        self.count()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.count()
    }
    fn visit_char<E: serde::de::Error>(self, _: char) -> Result<(), E> {
        self.count()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.count()
    }
    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<(), E> {
        self.count()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.count()
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.count()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.count()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use serde::de::VariantAccess;
        // A tagged value (`!tag value`): the tag names the variant, the value is its content.
        let (_, variant) = data.variant::<serde::de::IgnoredAny>()?;
        variant.newtype_variant_seed(self)
    }
}

/// Reads at most `limit + 1` bytes of a stream (standard input), so an endless one such as /dev/zero costs no
/// more than the limit before [`check_text`] refuses it. Fails, as `read_to_string` does, on text that is not
/// UTF-8. A file named by path is read with `ballast_store::local_file::read_file_bounded` instead.
pub fn read_bounded(reader: impl Read, limit: usize) -> std::io::Result<String> {
    let mut text = String::new();
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader.take(cap).read_to_string(&mut text)?;
    Ok(text)
}

/// A spec file (`create -f`, `replace -f`, the file `edit` opens in the editor): [`MAX_SPEC_FILE_BYTES`].
pub const MAX_SPEC_FILE: ReadLimit = ReadLimit {
    bytes: MAX_SPEC_FILE_BYTES as u64,
    what: "a spec file",
};
/// A CA's certificate or private key (`create secret keypair --cert --key`): a PEM certificate chain or key
/// is a few KiB, so 1 MiB is no real file's limit.
pub const MAX_PEM_FILE: ReadLimit = ReadLimit {
    bytes: 1024 * 1024,
    what: "a PEM certificate or key",
};
/// An SSH public key (`create secret sshpublickey --pubkey`): the longest accepted key (RSA 16384 bits) is
/// about 2.8 KiB of text.
pub const MAX_SSH_PUBLIC_KEY_FILE: ReadLimit = ReadLimit {
    bytes: crate::ssh_key::MAX_FILE_BYTES,
    what: "an OpenSSH public key",
};
/// `terraform output -json` (`create cluster --shared-from`): a VPC id, a CIDR and a subnet per zone, among
/// whatever else the workspace outputs.
pub const MAX_TERRAFORM_OUTPUTS_FILE: ReadLimit = ReadLimit {
    bytes: 4 * 1024 * 1024,
    what: "`terraform output -json`",
};
/// A kubeconfig `export kubeconfig` merges into (`--kubeconfig`, `KUBECONFIG`, `~/.kube/config`): a few KiB
/// per cluster; 16 MiB holds thousands of them.
pub const MAX_KUBECONFIG_FILE: ReadLimit = ReadLimit {
    bytes: 16 * 1024 * 1024,
    what: "a kubeconfig",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_spec_is_well_within_the_depth_limit() {
        let spec = "apiVersion: v\nkind: Cluster\nspec:\n  subnets:\n  - name: a\n    cidr: 10.0.0.0/24\n  \
                    etcd:\n    members:\n    - {instanceGroup: a}\n  cloudLabels: {a: \"[x\"}\n";
        assert_eq!(check_text(spec, MAX_SPEC_FILE_BYTES), Ok(()));
    }

    #[test]
    fn deep_brackets_indentation_and_dashes_are_refused() {
        let brackets = format!("a: {}{}", "[".repeat(65), "]".repeat(65));
        assert!(matches!(
            check_text(&brackets, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 1, .. })
        ));
        let mut indented = String::new();
        for level in 0..70 {
            indented.push_str(&format!("{}a:\n", " ".repeat(level)));
        }
        assert!(matches!(
            check_text(&indented, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 65, .. })
        ));
        let dashes = format!("a:\n{}x\n", "- ".repeat(70));
        assert!(matches!(
            check_text(&dashes, MAX_SPEC_FILE_BYTES),
            Err(TextLimitError::TooDeep { line: 2, .. })
        ));
        // Sixty-four levels are allowed.
        let at_limit = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert_eq!(check_text(&at_limit, MAX_SPEC_FILE_BYTES), Ok(()));
    }

    /// Nine levels of ten aliases each: 10^9 strings from about 800 bytes.
    fn billion_laughs() -> String {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..=9 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        text
    }

    #[test]
    fn the_billion_laughs_are_refused_by_the_alias_budget() {
        let text = billion_laughs();
        assert_eq!(
            check_aliases(&text),
            Err(TextLimitError::TooManyNodes {
                limit: text.len() * MAX_YAML_NODES_PER_BYTE + MAX_ALIAS_NODES
            })
        );
        // The same shape with only a few aliases in use is well within it.
        let modest = "a: &a [x, y, z]\nb: [*a, *a]\nc: {k: *a}\n";
        assert_eq!(check_aliases(modest), Ok(()));
    }

    /// Without aliases no text comes near the budget, however densely it packs its values.
    #[test]
    fn dense_texts_without_aliases_are_within_the_budget() {
        let flow = format!("[{}a]", "a,".repeat(400_000));
        let empty_lists = format!("[{}[]]", "[],".repeat(300_000));
        let dashes = "-\n".repeat(400_000);
        let pairs = format!("{{{}a}}", "a,".repeat(400_000));
        for text in [flow, empty_lists, dashes, pairs] {
            assert_eq!(check_aliases(&text), Ok(()), "{}", &text[..20]);
        }
    }

    #[test]
    fn size_is_checked_first() {
        assert_eq!(
            check_text("abcd", 3),
            Err(TextLimitError::TooLarge { bytes: 4, limit: 3 })
        );
    }

    #[test]
    fn bounded_reads_stop_after_the_limit() {
        let endless = std::io::repeat(b'a');
        assert_eq!(read_bounded(endless, 10).expect("reads").len(), 11);
    }

    #[test]
    fn tags_follow_aws_rules() {
        assert!(tag_problems("team", "platform").is_empty());
        assert!(tag_problems("cost center", "a+b=c@d:e/f_g.h-i").is_empty());
        assert!(tag_problems("équipe", "données").is_empty());
        assert!(!tag_problems("a\nb", "").is_empty());
        assert!(!tag_problems("a", "x\ny").is_empty());
        assert!(!tag_problems("AWS:thing", "").is_empty());
        assert!(!tag_problems("", "").is_empty());
        assert!(!tag_problems(&"k".repeat(129), "").is_empty());
        assert!(tag_problems(&"é".repeat(128), &"é".repeat(256)).is_empty());
        assert!(!tag_problems("k", &"v".repeat(257)).is_empty());
    }

    #[test]
    fn path_keys_quote_keys_that_are_not_plain() {
        assert_eq!(
            path_key("spec.cloudLabels", "team"),
            "spec.cloudLabels.team"
        );
        assert_eq!(path_key("", "spec"), "spec");
        assert_eq!(
            path_key("spec.cloudLabels", "a\nb"),
            "spec.cloudLabels[\"a\\nb\"]"
        );
        assert_eq!(
            path_key("m", &"k".repeat(100)),
            format!("m[\"{}...\"]", "k".repeat(64))
        );
    }
}
