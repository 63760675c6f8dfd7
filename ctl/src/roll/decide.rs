//! The roll's decisions, pure: which instances need replacing and why, in which order the groups go, when a
//! control-plane member may be taken down, and the next step of a node group's surge, all judged from what AWS
//! and the state store show now. Nothing here remembers anything between calls: a roll killed anywhere and run
//! again decides from the same facts, which is what makes it resumable.

use std::collections::BTreeSet;

use ballast_state::rolling_update::Pace;
use ballast_state::spec::Role;
use serde::{Deserialize, Serialize};

/// An instance of a group, as AWS and the state store show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceView {
    pub id: String,
    /// In service (not pending, not terminating, not detached).
    pub in_service: bool,
    /// Its lifecycle in AWS's words, for the table (`InService`, `Pending`, `Terminating`, ...).
    pub lifecycle: String,
    /// The `ballast.dev/node-spec-hash` tag it was launched with.
    pub node_spec_hash: Option<String>,
    /// The launch template version it was launched from, and the group's current one (when both are known).
    pub template_version: Option<String>,
    /// Its launch time, RFC 3339.
    pub launched: Option<String>,
    /// Its nodeup report says Configured with this node spec sha256 (None: no such report yet).
    pub configured_hash: Option<String>,
    /// Its private DNS name: the Kubernetes node's name.
    pub node_name: Option<String>,
}

/// One group as found: its Auto Scaling Group, its instances, its current node spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub name: String,
    pub role: Role,
    pub sizes: Sizes,
    /// The sha256 of the group's current node spec (None: `update cluster` has not written one).
    pub want_hash: Option<String>,
    /// The launch template's default version (None: not known).
    pub want_template_version: Option<String>,
    pub instances: Vec<InstanceView>,
    /// The roll in progress on this group, as recorded on its Auto Scaling Group.
    pub marker: Option<RollMarker>,
}

/// An Auto Scaling Group's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sizes {
    pub min: i32,
    pub max: i32,
    pub desired: i32,
}

/// What a roll records on a group's Auto Scaling Group (a tag) before it changes anything, so that a roll killed
/// anywhere can be finished by the next one: the sizes to put back, and when it began (with `--force`, what
/// launched after that is already replaced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollMarker {
    pub min: i32,
    pub max: i32,
    pub desired: i32,
    /// RFC 3339, UTC, to the second (sorts as text).
    pub started: String,
    /// The roll was forced: replace instances launched before `started` whatever their spec.
    #[serde(default)]
    pub force: bool,
}

impl RollMarker {
    pub fn new(sizes: Sizes, started: &str, force: bool) -> Self {
        RollMarker {
            min: sizes.min,
            max: sizes.max,
            desired: sizes.desired,
            started: started.to_string(),
            force,
        }
    }

    pub fn sizes(&self) -> Sizes {
        Sizes {
            min: self.min,
            max: self.max,
            desired: self.desired,
        }
    }

    /// The tag value (compact JSON, well under AWS's 256 characters).
    pub fn to_tag(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the tag back; a value that is not this JSON fails with what serde_json found wrong.
    pub fn from_tag(value: &str) -> Result<Self, RollMarkerError> {
        serde_json::from_str(value).map_err(|json| RollMarkerError { json })
    }
}

/// A `ballast.dev/rolling-update` tag value that is not a [`RollMarker`] (edited by hand, or written by another
/// version). Transparent: its message is serde_json's (what and where in the value), which is all there is to say.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct RollMarkerError {
    json: serde_json::Error,
}

/// Why an instance is replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// It booted with another node spec than its group's current one.
    SpecChanged { have: String, want: String },
    /// It carries no node-spec tag (launched by hand, or by an older Ballast).
    NoSpecTag,
    /// It was launched from an older launch template version.
    TemplateVersion { have: String, want: String },
    /// `--force`.
    Forced,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::SpecChanged { have, want } => {
                write!(f, "node spec changed ({} -> {})", short(have), short(want))
            }
            Reason::NoSpecTag => write!(f, "no node-spec tag"),
            Reason::TemplateVersion { have, want } => {
                write!(f, "launch template version {have}, current {want}")
            }
            Reason::Forced => write!(f, "--force"),
        }
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

/// Why `instance` of `group` needs replacing, or `None`. With `force`, every instance launched before the roll
/// began (`started`): an instance the forced roll launched itself is never replaced again.
pub fn needs_update(
    group: &GroupView,
    instance: &InstanceView,
    force: Option<&str>,
) -> Option<Reason> {
    if let Some(started) = force {
        let launched_before = instance
            .launched
            .as_deref()
            .is_none_or(|launched| launched < started);
        return launched_before.then_some(Reason::Forced);
    }
    let want = group.want_hash.as_deref()?;
    match instance.node_spec_hash.as_deref() {
        None => return Some(Reason::NoSpecTag),
        Some(have) if have != want => {
            return Some(Reason::SpecChanged {
                have: have.to_string(),
                want: want.to_string(),
            })
        }
        Some(_) => {}
    }
    match (&instance.template_version, &group.want_template_version) {
        (Some(have), Some(want)) if have != want => Some(Reason::TemplateVersion {
            have: have.clone(),
            want: want.clone(),
        }),
        _ => None,
    }
}

/// The instances of a group still to replace (in service or pending: one already terminating is done), oldest
/// first, with their reasons. `force`: the forced roll's start (see [`needs_update`]).
pub fn outdated(group: &GroupView, force: Option<&str>) -> Vec<(InstanceView, Reason)> {
    let mut found: Vec<(InstanceView, Reason)> = group
        .instances
        .iter()
        .filter(|i| i.lifecycle != "Terminating" && !i.lifecycle.starts_with("Terminat"))
        .filter_map(|i| needs_update(group, i, force).map(|r| (i.clone(), r)))
        .collect();
    found.sort_by(|(a, _), (b, _)| (&a.launched, &a.id).cmp(&(&b.launched, &b.id)));
    found
}

/// The groups to roll and their order: control-plane groups first, then node groups, each by name. `selected`
/// (from `--instance-group`, empty: all) and `roles` (empty: all) narrow them; a name that is no group is an
/// error naming it and the groups there are.
pub fn order(
    groups: &[(String, Role)],
    selected: &[String],
    roles: &[Role],
) -> Result<Vec<String>, RollOrderError> {
    let known: BTreeSet<&str> = groups.iter().map(|(n, _)| n.as_str()).collect();
    let unknown: Vec<&str> = selected
        .iter()
        .map(String::as_str)
        .filter(|s| !known.contains(s))
        .collect();
    if !unknown.is_empty() {
        return Err(RollOrderError::UnknownGroups {
            unknown: unknown.into_iter().map(str::to_string).collect(),
            known: known.iter().map(|k| k.to_string()).collect(),
        });
    }
    let mut chosen: Vec<&(String, Role)> = groups
        .iter()
        .filter(|(n, _)| selected.is_empty() || selected.contains(n))
        .filter(|(_, r)| roles.is_empty() || roles.contains(r))
        .collect();
    chosen
        .sort_by(|a, b| (a.1 != Role::ControlPlane, &a.0).cmp(&(b.1 != Role::ControlPlane, &b.0)));
    Ok(chosen.into_iter().map(|(n, _)| n.clone()).collect())
}

/// Why the groups to roll could not be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RollOrderError {
    /// `--instance-group` named groups the cluster does not have; `known` is every group it has, by name.
    #[error(
        "no instance group named {}: the cluster's groups are {}",
        .unknown.join(", "),
        .known.join(", ")
    )]
    UnknownGroups {
        unknown: Vec<String>,
        known: Vec<String>,
    },
}

/// etcd as the supervisors' reports and AWS show it, for the control-plane gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdView {
    /// The reports agree that etcd is healthy.
    pub healthy: bool,
    /// Its voting members (instance ids).
    pub voters: BTreeSet<String>,
    /// Members it should have: one per control-plane group.
    pub expected: usize,
    /// The control-plane instances in service.
    pub in_service: BTreeSet<String>,
    /// What the reports say is wrong, in words.
    pub problems: Vec<String>,
}

/// Whether a control-plane member may be taken down now: only when etcd is healthy with every expected member
/// voting and those are exactly the control-plane instances in service, so that losing this one member keeps
/// a quorum. `Err` says what is missing.
pub fn control_plane_gate(etcd: &EtcdView) -> Result<(), EtcdGateError> {
    // Membership first: an instance that is gone or not yet voting is what an operator must hear about.
    if etcd.voters.len() < etcd.expected {
        return Err(EtcdGateError::MissingMember {
            expected: etcd.expected,
            voters: etcd.voters.iter().cloned().collect(),
        });
    }
    let not_voting: Vec<&str> = etcd
        .in_service
        .iter()
        .filter(|i| !etcd.voters.contains(*i))
        .map(String::as_str)
        .collect();
    let gone: Vec<&str> = etcd
        .voters
        .iter()
        .filter(|v| !etcd.in_service.contains(*v))
        .map(String::as_str)
        .collect();
    if !not_voting.is_empty() || !gone.is_empty() {
        return Err(EtcdGateError::VotersNotInService {
            not_voting: not_voting.into_iter().map(str::to_string).collect(),
            gone: gone.into_iter().map(str::to_string).collect(),
        });
    }
    if !etcd.healthy {
        return Err(EtcdGateError::Unhealthy {
            problems: etcd.problems.clone(),
        });
    }
    Ok(())
}

/// Why a control-plane member may not be taken down now ([`control_plane_gate`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EtcdGateError {
    /// Fewer voting members than control-plane groups; `voters` are the instance ids that do vote.
    #[error(
        "etcd is missing a member: {} of {expected} voting ({}); taking another down could lose quorum",
        .voters.len(),
        .voters.join(", ")
    )]
    MissingMember {
        expected: usize,
        voters: Vec<String>,
    },
    /// The voters are not the control-plane instances in service: a member is mid-replacement.
    #[error(
        "etcd is missing a member: its voters are not the control-plane instances in service (not yet \
         voting: [{}], voting but not in service: [{}]); a member is being replaced",
        .not_voting.join(", "),
        .gone.join(", ")
    )]
    VotersNotInService {
        not_voting: Vec<String>,
        gone: Vec<String>,
    },
    /// Every member votes, but the reports do not agree etcd is healthy; `problems` are the reports' own words.
    #[error("etcd is not healthy: {}", unhealthy_reasons(.problems))]
    Unhealthy { problems: Vec<String> },
}

/// The reports' problems, or a plain sentence when they name none.
fn unhealthy_reasons(problems: &[String]) -> String {
    if problems.is_empty() {
        "its members' reports do not agree it is healthy".to_string()
    } else {
        problems.join("; ")
    }
}

/// The next step of a control-plane group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlPlaneStep {
    /// Every instance is current, configured, and etcd is whole again.
    Done,
    /// Not yet safe; why.
    Wait(String),
    /// Terminate this instance (the group launches its replacement).
    Replace(String),
}

/// What to do next in a control-plane group: replace its outdated instance only when the group holds its one
/// instance and etcd passes [`control_plane_gate`]; after a replacement, wait until the new instance is
/// configured with the current spec and etcd is whole again.
pub fn control_plane_step(
    group: &GroupView,
    force: Option<&str>,
    etcd: &EtcdView,
) -> ControlPlaneStep {
    let live: Vec<&InstanceView> = group
        .instances
        .iter()
        .filter(|i| !i.lifecycle.starts_with("Terminat"))
        .collect();
    let not_ready: Vec<&str> = live
        .iter()
        .filter(|i| !i.in_service || !configured_current(group, i))
        .filter(|i| needs_update(group, i, force).is_none())
        .map(|i| i.id.as_str())
        .collect();
    let pending = outdated(group, force);
    if live.len() < group.sizes.desired.max(0) as usize {
        return ControlPlaneStep::Wait(format!(
            "{} of {} instances launched",
            live.len(),
            group.sizes.desired
        ));
    }
    if !not_ready.is_empty() {
        return ControlPlaneStep::Wait(format!(
            "waiting for {} to be configured with the current node spec",
            not_ready.join(", ")
        ));
    }
    if let Err(why) = control_plane_gate(etcd) {
        return ControlPlaneStep::Wait(why.to_string());
    }
    match pending.first() {
        None => ControlPlaneStep::Done,
        Some((instance, _)) => ControlPlaneStep::Replace(instance.id.clone()),
    }
}

/// Whether an instance's nodeup reported it Configured with its group's current node spec.
fn configured_current(group: &GroupView, instance: &InstanceView) -> bool {
    if group.role == Role::Bastion {
        // A bastion writes no report to the state store (it may not: docs/security.md, "Bastions"): launched
        // with the current node spec and in service is all there is to wait for.
        return instance.in_service
            && instance.node_spec_hash.is_some()
            && instance.node_spec_hash == group.want_hash;
    }
    instance.configured_hash.is_some() && instance.configured_hash == group.want_hash
}

/// The next step of a node group's surge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeStep {
    /// Set the Auto Scaling Group's sizes (surge, or put back).
    Resize(Sizes),
    /// New instances are not in service and configured yet; why.
    Wait(String),
    /// Drain and terminate these; the last `decrement` of them with should-decrement (the surge shrinks as the
    /// old instances run out), the others replaced by the group.
    Replace { ids: Vec<String>, decrement: usize },
    /// Nothing left to replace and the sizes are the original ones: remove the marker.
    Done,
}

/// What to do next in a node group of `original` sizes rolling at `pace`. Each call looks only at what AWS shows:
/// the desired capacity is always the original plus the surge still needed (never more than the old instances
/// left), so a roll resumed after a kill neither surges twice nor leaves the group surged.
pub fn node_step(group: &GroupView, original: Sizes, pace: Pace, force: Option<&str>) -> NodeStep {
    let remaining = outdated(group, force);
    let left = remaining.len() as i32;
    let surge = (pace.surge as i32).min(left);
    let target = Sizes {
        min: original.min,
        max: original.max.max(original.desired + surge),
        desired: original.desired + surge,
    };
    if group.sizes != target {
        return NodeStep::Resize(target);
    }
    if left == 0 {
        return NodeStep::Done;
    }
    let live: Vec<&InstanceView> = group
        .instances
        .iter()
        .filter(|i| !i.lifecycle.starts_with("Terminat"))
        .collect();
    // The surge is there once the group holds its target, and every new instance is configured with the
    // current spec (an old one keeps serving until it is drained).
    let not_ready: Vec<&str> = live
        .iter()
        .filter(|i| needs_update(group, i, force).is_none())
        .filter(|i| !i.in_service || !configured_current(group, i))
        .map(|i| i.id.as_str())
        .collect();
    if (live.len() as i32) < target.desired {
        return NodeStep::Wait(format!(
            "{} of {} instances launched",
            live.len(),
            target.desired
        ));
    }
    if !not_ready.is_empty() {
        return NodeStep::Wait(format!(
            "waiting for {} to be configured with the current node spec",
            not_ready.join(", ")
        ));
    }
    replace_batch(group, pace, force)
}

/// The next batch of old instances to drain and terminate (also what `--fail-on-validate-error=false` takes
/// when a wait runs out): the oldest `maxSurge + maxUnavailable`, and how many of them shrink the surge.
pub fn replace_batch(group: &GroupView, pace: Pace, force: Option<&str>) -> NodeStep {
    let remaining = outdated(group, force);
    let left = remaining.len() as i32;
    let surge = (pace.surge as i32).min(left);
    let batch = (pace.batch() as i32).min(left);
    let ids: Vec<String> = remaining
        .iter()
        .take(batch as usize)
        .map(|(i, _)| i.id.clone())
        .collect();
    // After this batch, the surge still needed is min(surge, left - batch): the difference goes with it.
    let decrement = (surge - (pace.surge as i32).min(left - batch)).max(0) as usize;
    NodeStep::Replace { ids, decrement }
}

/// A node batch's terminations, each `(id, decrement)`: the last `decrement` of `ids` shrink the surge (no
/// replacement is launched for them), the others are replaced. Instances in `undrained`, whose drain failed so
/// their nodes still hold pods, are left out: the roll terminates only what it drained, then stops. The others
/// keep the decrement they have in the whole batch: the stopped roll puts the group's sizes back from its marker
/// either way.
pub fn batch_terminations(
    ids: &[String],
    decrement: usize,
    undrained: &BTreeSet<String>,
) -> Vec<(String, bool)> {
    let keep = ids.len() - decrement.min(ids.len());
    ids.iter()
        .enumerate()
        .filter(|(_, id)| !undrained.contains(*id))
        .map(|(n, id)| (id.clone(), n >= keep))
        .collect()
}

#[cfg(test)]
mod tests;
