//! kops's `spec.rollingUpdate` (on the Cluster and on an InstanceGroup) to a Ballast group's `rollingUpdate`
//! (docs/kops.md, docs/upgrade.md).
//!
//! kops resolves a group's pace field by field (`pkg/instancegroups/settings.go`): the group's own value, else
//! the Cluster's, else its default: `maxSurge` 0, `maxUnavailable` 1 when the surge is 0 and 0 otherwise; a surge
//! and an unavailability that both come to 0 (a count of 0 unavailable and no surge) disable the group's rolling
//! update altogether. Ballast has no Cluster-level field and a different default surge (25%), so each node group
//! is written the pace kops would roll it with: its own fields or the Cluster's, and `maxSurge: 0` written out
//! where neither sets one. Control-plane groups take no `rollingUpdate` in Ballast (one instance at a time,
//! behind etcd's quorum): a kops value that rolls the group exactly so is dropped, any other refused.

use ballast_state::rolling_update::{IntOrPercent, RollingUpdateSpec};
use ballast_state::spec::Role;
use yaml_serde::Value;

use super::walk::{describe, Recorder};
use super::{Fate, FieldFate};

/// A `rollingUpdate` as kops's input sets it (Cluster or group): each field as written, once within Ballast's
/// bounds; `None` when absent or refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KopsRollingUpdate {
    pub max_surge: Option<IntOrPercent>,
    pub max_unavailable: Option<IntOrPercent>,
}

/// What the Cluster's `rollingUpdate` is, for the groups: its fields, and how its fates name the Cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterDefault {
    pub fields: KopsRollingUpdate,
    /// `Cluster/NAME`: a group's refusal that comes from the Cluster's field is recorded on the Cluster.
    pub object: String,
}

/// Reads the Cluster's `spec.rollingUpdate`, recording each field's fate.
pub fn cluster(r: &mut Recorder<'_>, value: Value) -> ClusterDefault {
    let fields = read(r, "spec.rollingUpdate", value);
    if fields.max_surge.is_some() {
        r.mapped(
            "spec.rollingUpdate.maxSurge",
            "spec.rollingUpdate.maxSurge of each node group that sets none (Ballast has no Cluster-level field); \
             ignored on control-plane groups, which never surge, in kops as in Ballast",
        );
    }
    if fields.max_unavailable.is_some() {
        r.mapped(
            "spec.rollingUpdate.maxUnavailable",
            "spec.rollingUpdate.maxUnavailable of each node group that sets none (Ballast has no Cluster-level \
             field), with maxSurge: 0 written out where neither sets maxSurge (kops's default; Ballast's is \
             25%); on a control-plane group it must mean one instance at a time, else it is refused naming the \
             group",
        );
    }
    ClusterDefault {
        fields,
        object: r.object.clone(),
    }
}

/// A group's pace in Ballast from its own `spec.rollingUpdate` (if any) and the Cluster's, recording the fates of
/// the group's fields (and, on the Cluster, a refusal its default earns on this group). `max_size`: the most
/// instances the group may have (its maxSize, else minSize, else 1). `None` for a control-plane group, or when
/// neither sets a pace (Ballast's defaults).
pub fn group(
    r: &mut Recorder<'_>,
    own: Option<Value>,
    role: Role,
    max_size: u32,
    cluster: &ClusterDefault,
) -> Option<RollingUpdateSpec> {
    let own = own.map(|v| read(r, PATH, v)).unwrap_or_default();
    match role {
        Role::ControlPlane => {
            control_plane(r, &own, max_size, cluster);
            None
        }
        Role::Node | Role::ApiServer | Role::Bastion => node(r, &own, cluster),
    }
}

const PATH: &str = "spec.rollingUpdate";
const SURGE: &str = "spec.rollingUpdate.maxSurge";
const UNAVAILABLE: &str = "spec.rollingUpdate.maxUnavailable";

/// Where a field's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Group,
    Cluster,
}

fn pick<'a>(
    own: &'a Option<IntOrPercent>,
    cluster: &'a Option<IntOrPercent>,
) -> Option<(&'a IntOrPercent, Source)> {
    own.as_ref()
        .map(|v| (v, Source::Group))
        .or_else(|| cluster.as_ref().map(|v| (v, Source::Cluster)))
}

fn node(
    r: &mut Recorder<'_>,
    own: &KopsRollingUpdate,
    cluster: &ClusterDefault,
) -> Option<RollingUpdateSpec> {
    let surge = pick(&own.max_surge, &cluster.fields.max_surge);
    let unavailable = pick(&own.max_unavailable, &cluster.fields.max_unavailable);
    if surge.is_none() && unavailable.is_none() {
        return None;
    }
    if let Some((_, Source::Group)) = surge {
        r.mapped(SURGE, SURGE);
    }
    if let Some((value, from)) = unavailable {
        if disables(value, surge.map(|(s, _)| s)) {
            let why = format!(
                "{}, with no surge, is kops's way to turn a group's rolling update off: kops never replaces its \
                 instances. Ballast has no such setting (it would roll the group one instance at a time): remove \
                 the field (a roll leaves a group out when `rolling-update cluster --instance-group` names only \
                 the others)",
                show(value)
            );
            refuse(r, from, UNAVAILABLE, cluster, why);
            return None;
        }
    }
    if let Some((_, Source::Group)) = unavailable {
        if surge.is_none() {
            r.mapped(
                UNAVAILABLE,
                "spec.rollingUpdate.maxUnavailable, with maxSurge: 0 written out (kops's default when unset; \
                 Ballast's is 25%)",
            );
        } else {
            r.mapped(UNAVAILABLE, UNAVAILABLE);
        }
    }
    Some(RollingUpdateSpec {
        // kops's default surge is none; left out, Ballast's would be 25%.
        max_surge: Some(surge.map_or(IntOrPercent::Int(0), |(v, _)| v.clone())),
        // Left out, Ballast's default is kops's: none when surging, else one (both rolls' "0 and 0 is 1").
        max_unavailable: unavailable.map(|(v, _)| v.clone()),
    })
}

fn control_plane(
    r: &mut Recorder<'_>,
    own: &KopsRollingUpdate,
    max_size: u32,
    cluster: &ClusterDefault,
) {
    // kops ignores the Cluster's surge on a control-plane group and refuses the group's own unless it is 0.
    if let Some(surge) = &own.max_surge {
        if is_zero(surge) {
            r.dropped(
                SURGE,
                format!(
                    "{}: a control-plane group never surges, in kops as in Ballast",
                    show(surge)
                ),
            );
        } else {
            r.refused(
                SURGE,
                format!(
                    "{}: a control-plane group cannot surge (kops's own validation refuses it too); Ballast rolls a \
                     control-plane group one instance at a time, behind etcd's quorum: remove the field",
                    show(surge)
                ),
            );
        }
    }
    let Some((value, from)) = pick(&own.max_unavailable, &cluster.fields.max_unavailable) else {
        // kops's default for a group that does not surge: one at a time, as Ballast rolls it.
        return;
    };
    let surge = pick(&own.max_surge, &cluster.fields.max_surge).map(|(s, _)| s);
    match control_plane_concurrency(value, surge, max_size) {
        Some(1) => {
            if from == Source::Group {
                r.dropped(
                    UNAVAILABLE,
                    format!(
                        "{}: kops rolls this control-plane group one instance at a time with it, as Ballast always \
                         rolls a control-plane group (behind etcd's quorum), where the field is refused",
                        show(value)
                    ),
                );
            }
        }
        None => refuse(
            r,
            from,
            UNAVAILABLE,
            cluster,
            format!(
                "{}, with no surge, turns kops's rolling update of the control-plane group off (kops never replaces \
                 its instances); Ballast rolls every control-plane group one instance at a time and has no such \
                 setting: remove the field, or set maxUnavailable: 1",
                show(value)
            ),
        ),
        Some(most) => refuse(
            r,
            from,
            UNAVAILABLE,
            cluster,
            format!(
                "{}: kops would take up to {most} of the control-plane group's instances (at most {max_size}) down \
                 at once; Ballast rolls a control-plane group one instance at a time, only while etcd has every \
                 member voting, and takes no rollingUpdate there: set maxUnavailable: 1 (on the group, to keep the \
                 Cluster's for the node groups) or remove the field",
                show(value)
            ),
        ),
    }
}

/// Refuses `path` on the object its value came from: the group's own field, or the Cluster's (naming the group).
fn refuse(r: &mut Recorder<'_>, from: Source, path: &str, cluster: &ClusterDefault, why: String) {
    match from {
        Source::Group => r.refused(path, why),
        Source::Cluster => {
            let group = r.object.clone();
            r.fates.push(FieldFate {
                object: cluster.object.clone(),
                path: path.to_string(),
                fate: Fate::Refused(format!("as the default of {group}: {why}")),
            });
        }
    }
}

/// Whether kops's rolling update of a group is off with this `maxUnavailable` and `maxSurge`: a count of 0
/// unavailable (a percentage comes to at least 1 in kops) with no surge at all.
fn disables(unavailable: &IntOrPercent, surge: Option<&IntOrPercent>) -> bool {
    count(unavailable) == Some(0) && surge.is_none_or(is_zero)
}

/// `0`, `"0"` or `"0%"`: nothing, at any size.
fn is_zero(value: &IntOrPercent) -> bool {
    count(value) == Some(0) || percent(value) == Some(0)
}

/// How many instances of a control-plane group of up to `max_size` kops replaces at once with this
/// `maxUnavailable` (kops's `rollingUpdateInstanceGroup`: no surge on a control plane; a percentage rounds down, to
/// at least 1; a count of 0 means 1 when kops's resolved surge was not 0, and off when it was); `None` when off.
/// Percentages grow with the group, so the most is at `max_size`; a count is capped there.
fn control_plane_concurrency(
    unavailable: &IntOrPercent,
    surge: Option<&IntOrPercent>,
    max_size: u32,
) -> Option<u32> {
    if disables(unavailable, surge) {
        return None;
    }
    let most = match (count(unavailable), percent(unavailable)) {
        (Some(n), _) => n,
        (_, Some(p)) => u32::try_from(u64::from(p) * u64::from(max_size) / 100).unwrap_or(u32::MAX),
        // Not a value Ballast's bounds accept: refused where it was read.
        (None, None) => return Some(1),
    };
    // No more at once than the group can hold: 2 unavailable on a group of one is one at a time.
    Some(most.min(max_size).max(1))
}

/// A count (`2`, or `"2"`), when the value is one.
fn count(value: &IntOrPercent) -> Option<u32> {
    match value {
        IntOrPercent::Int(n) => u32::try_from(*n).ok(),
        IntOrPercent::Text(t) if !t.ends_with('%') => t.parse().ok(),
        IntOrPercent::Text(_) => None,
    }
}

/// A percentage (`"25%"`), when the value is one.
fn percent(value: &IntOrPercent) -> Option<u32> {
    match value {
        IntOrPercent::Text(t) => t.strip_suffix('%').and_then(|d| d.parse().ok()),
        IntOrPercent::Int(_) => None,
    }
}

fn show(value: &IntOrPercent) -> String {
    match value {
        IntOrPercent::Int(n) => n.to_string(),
        IntOrPercent::Text(t) => format!("{t:?}"),
    }
}

/// Reads a `rollingUpdate` mapping at `path`: its two paces held to Ballast's bounds (a count 0 to 1000, a
/// percentage 0% to 100%), `drainAndTerminate: true` dropped (what every roll does), anything else refused.
fn read(r: &mut Recorder<'_>, path: &str, value: Value) -> KopsRollingUpdate {
    let mut out = KopsRollingUpdate::default();
    let Some(mut f) = r.fields(path, value) else {
        return out;
    };
    if let Some(v) = f.take("maxSurge") {
        out.max_surge = int_or_percent(r, &format!("{path}.maxSurge"), v);
    }
    if let Some(v) = f.take("maxUnavailable") {
        out.max_unavailable = int_or_percent(r, &format!("{path}.maxUnavailable"), v);
    }
    if let Some(v) = f.take("drainAndTerminate") {
        r.only_true(
            &format!("{path}.drainAndTerminate"),
            v,
            "true: a roll drains and terminates the instances it replaces, kops's default and Ballast's only way",
            "false: kops then only taints (and surges) and leaves the old instances running; Ballast's roll \
             always drains and terminates what it replaces: remove the field (a roll leaves a group out when \
             `rolling-update cluster --instance-group` names only the others)",
        );
    }
    // Its own words, not cluster's NO_EQUIVALENT: cluster uses this module, so this one may not use cluster.
    r.finish(
        f,
        "Ballast has no equivalent: its rollingUpdate holds maxSurge and maxUnavailable only (and kops's \
         drainAndTerminate is read here): remove the field, or keep this cluster on kops",
    );
    out
}

/// `2` or `"25%"` (kops's IntOrString), within Ballast's bounds; refused by its path otherwise.
fn int_or_percent(r: &mut Recorder<'_>, path: &str, value: Value) -> Option<IntOrPercent> {
    let parsed = match &value {
        Value::Number(n) => n.as_i64().map(IntOrPercent::Int),
        Value::String(s) => Some(IntOrPercent::Text(s.clone())),
        _ => None,
    };
    let Some(parsed) = parsed else {
        r.refused(
            path,
            format!(
                "is {}, not a whole number or a percentage (e.g. 2 or \"25%\")",
                describe(&value)
            ),
        );
        return None;
    };
    if let Some(problem) = parsed.problem() {
        r.refused(path, problem);
        return None;
    }
    Some(parsed)
}
