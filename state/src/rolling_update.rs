//! What paces a rolling update (`ballast rolling-update cluster`), and which Kubernetes version changes a roll can
//! carry out. Pure: the spec field an instance group may set (`rollingUpdate: {maxSurge, maxUnavailable}`, a
//! number or a percentage, as in kops), its bounds, its resolution against a group's size, and the rule that an
//! upgrade moves one minor at a time and never back (whether the embedded manifest pins a version is `validate`'s).

use serde::{Deserialize, Serialize};

use crate::limits::MAX_GROUP_SIZE;

/// Extra instances a node group launches before it takes old ones down, when its spec sets none: this
/// percentage of its desired capacity, rounded up (at least one), as a Kubernetes Deployment surges by default.
/// The new instances are configured before any old one is drained, so capacity never drops; the roll goes a
/// quarter of the group at a time (kops's AWS default of one at a time made a roll of 100 nodes take minutes),
/// at the cost of up to a quarter more instances while it runs. A group that cannot afford them sets `maxSurge`.
pub const DEFAULT_MAX_SURGE_PERCENT: u32 = 25;
/// Old instances a node group may be short of, when its spec sets none: with a surge, none.
pub const DEFAULT_MAX_UNAVAILABLE: IntOrPercent = IntOrPercent::Int(0);

/// A group's `rollingUpdate`: how many instances a roll may add (`maxSurge`) and take away (`maxUnavailable`)
/// at once. Control-plane groups roll one instance at a time behind etcd and refuse this field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RollingUpdateSpec {
    /// Instances launched above the group's desired capacity during the roll: a count, or a percentage of
    /// the group's desired capacity (rounded up). Default 25% (at least 1): [`DEFAULT_MAX_SURGE_PERCENT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrPercent>,
    /// Instances that may be missing from the group's desired capacity during the roll: a count, or a
    /// percentage (rounded down). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrPercent>,
}

/// `3` or `"25%"`, like Kubernetes' IntOrString. Kept as written so validation can name a bad value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IntOrPercent {
    Int(i64),
    /// `"25%"` (or a number in quotes); checked by [`IntOrPercent::problem`].
    Text(String),
}

/// What a roll of one group of `desired` instances may do at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Extra instances to launch above the group's desired capacity.
    pub surge: u32,
    /// Instances that may be missing below the desired capacity.
    pub unavailable: u32,
}

impl Pace {
    /// Old instances that may be taken down at once: the surge covers some, unavailability the rest.
    pub fn batch(self) -> u32 {
        self.surge.saturating_add(self.unavailable).max(1)
    }
}

/// Why a `maxSurge` or `maxUnavailable` value is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntOrPercentError {
    /// A count above [`MAX_GROUP_SIZE`] (or below 0), or a percentage above 100%; `value` as written.
    #[error("{value} is out of range: use a count from 0 to {MAX_GROUP_SIZE}, or a percentage from 0% to 100%")]
    OutOfRange { value: String },
    /// Text that is no number and no percentage.
    #[error("{text:?} is neither a count (e.g. 2) nor a percentage (e.g. \"25%\")")]
    NotANumber { text: String },
}

impl IntOrPercent {
    /// What is wrong with the value, in words; `None` when it is a count in 0..=MAX_GROUP_SIZE or a
    /// percentage in 0%..=100%.
    pub fn problem(&self) -> Option<String> {
        self.parsed().err().map(|e| e.to_string())
    }

    /// `Ok((value, is_percent))`.
    fn parsed(&self) -> Result<(u32, bool), IntOrPercentError> {
        let out_of_range = |v: &dyn std::fmt::Display| IntOrPercentError::OutOfRange {
            value: v.to_string(),
        };
        match self {
            IntOrPercent::Int(n) => match u32::try_from(*n) {
                Ok(n) if n <= MAX_GROUP_SIZE => Ok((n, false)),
                _ => Err(out_of_range(n)),
            },
            IntOrPercent::Text(text) => {
                let (digits, percent) = match text.strip_suffix('%') {
                    Some(d) => (d, true),
                    None => (text.as_str(), false),
                };
                let value: u32 = digits
                    .parse()
                    .ok()
                    .filter(|_| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or_else(|| IntOrPercentError::NotANumber { text: text.clone() })?;
                let limit = if percent { 100 } else { MAX_GROUP_SIZE };
                if value > limit {
                    return Err(out_of_range(text));
                }
                Ok((value, percent))
            }
        }
    }

    /// The count for a group of `desired` instances: a percentage of it, rounded up or down.
    fn resolve(&self, desired: u32, round_up: bool) -> Result<u32, IntOrPercentError> {
        let (value, percent) = self.parsed()?;
        if !percent {
            return Ok(value);
        }
        Ok(percent_of(value, desired, round_up))
    }
}

/// `percent`% of `desired`, rounded up or down; `percent` is at most 100 (checked by the caller).
fn percent_of(percent: u32, desired: u32, round_up: bool) -> u32 {
    let scaled = u64::from(percent) * u64::from(desired);
    let count = if round_up {
        scaled.div_ceil(100)
    } else {
        scaled / 100
    };
    // At most 100% of a u32, so it fits.
    u32::try_from(count).unwrap_or(u32::MAX)
}

impl RollingUpdateSpec {
    /// Problems with the field's values, as (path below `spec.rollingUpdate`, message).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        for (path, value) in [
            ("maxSurge", &self.max_surge),
            ("maxUnavailable", &self.max_unavailable),
        ] {
            if let Some(problem) = value.as_ref().and_then(IntOrPercent::problem) {
                problems.push((path, problem));
            }
        }
        problems
    }
}

/// The pace of a roll of a group of `desired` instances with this spec (None, or a field left out: the
/// defaults, [`DEFAULT_MAX_SURGE_PERCENT`] and [`DEFAULT_MAX_UNAVAILABLE`]); `surge_allowed` false
/// (`--surge=false`) rolls without surging. kops's rules: a percentage surge rounds up, a percentage
/// unavailability rounds down, and a pace of nothing at all becomes one instance unavailable at a time.
pub fn pace(
    spec: Option<&RollingUpdateSpec>,
    desired: u32,
    surge_allowed: bool,
) -> Result<Pace, IntOrPercentError> {
    let unavailable_value = spec
        .and_then(|s| s.max_unavailable.clone())
        .unwrap_or(DEFAULT_MAX_UNAVAILABLE);
    let surge = match (surge_allowed, spec.and_then(|s| s.max_surge.as_ref())) {
        (false, _) => 0,
        (true, Some(value)) => value.resolve(desired, true)?,
        // At least one: a group's roll surges even when a quarter of it rounds to nothing (an empty group is
        // held to nothing below).
        (true, None) => percent_of(DEFAULT_MAX_SURGE_PERCENT, desired, true).max(1),
    };
    // No more surge than instances to replace: surging beyond the group's size only launches spares.
    let surge = surge.min(desired);
    let mut unavailable = unavailable_value.resolve(desired, false)?.min(desired);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Ok(Pace { surge, unavailable })
}

/// `1.33.4` -> (1, 33, 4); `None` for anything else.
fn version_triple(version: &str) -> Option<(u64, u64, u64)> {
    let trimmed = version.strip_prefix('v').unwrap_or(version);
    let mut parts = trimmed.split('.').map(|p| p.parse::<u64>().ok());
    let triple = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(triple)
}

/// Whether `kubernetesVersion` may change from `old` to `new`: one minor at a time, never back (kubelets may
/// not be newer than the API server, and an API server skips no minor). `None` when allowed (or unchanged).
pub fn version_change_problem(old: &str, new: &str) -> Option<String> {
    let (Some(from), Some(to)) = (version_triple(old), version_triple(new)) else {
        // Not versions: validation reports them on their own.
        return None;
    };
    if to < from {
        return Some(format!(
            "{new:?} is older than the cluster's {old:?}: Kubernetes cannot be downgraded in place; keep {old} \
             (or restore an etcd backup taken before the upgrade onto a new cluster)"
        ));
    }
    if to.0 != from.0 || to.1 > from.1 + 1 {
        return Some(format!(
            "{new:?} skips a minor version from {old:?}: upgrade one minor at a time ({}.{}.x first), each with \
             `ballast update cluster --yes` and `ballast rolling-update cluster --yes`",
            from.0,
            from.1 + 1
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(surge: Option<IntOrPercent>, unavailable: Option<IntOrPercent>) -> RollingUpdateSpec {
        RollingUpdateSpec {
            max_surge: surge,
            max_unavailable: unavailable,
        }
    }

    fn text(s: &str) -> IntOrPercent {
        IntOrPercent::Text(s.to_string())
    }

    #[test]
    fn counts_and_percentages_are_bounded() {
        assert_eq!(IntOrPercent::Int(0).problem(), None);
        assert_eq!(IntOrPercent::Int(1000).problem(), None);
        assert_eq!(text("100%").problem(), None);
        assert_eq!(text("7").problem(), None);
        let too_big = IntOrPercent::Int(1001).problem().expect("refused");
        assert!(too_big.contains("from 0 to 1000"), "{too_big}");
        assert!(IntOrPercent::Int(-1).problem().is_some());
        assert!(text("101%")
            .problem()
            .expect("refused")
            .contains("0% to 100%"));
        assert!(text("-5%")
            .problem()
            .expect("refused")
            .contains("neither a count"));
        assert!(text("%").problem().is_some());
        assert!(text("1.5").problem().is_some());
        assert!(text("99999999999999999999%").problem().is_some());
        let both = spec(Some(text("x")), Some(IntOrPercent::Int(5000))).problems();
        assert_eq!(both.len(), 2);
        assert_eq!(both[0].0, "maxSurge");
        assert_eq!(both[1].0, "maxUnavailable");
    }

    #[test]
    fn the_pace_follows_kops_rounding_and_defaults() {
        // Defaults: surge a quarter of the group, rounded up (at least one), none unavailable.
        let surge_of = |desired| pace(None, desired, true).map(|p| (p.surge, p.unavailable));
        assert_eq!(surge_of(4), Ok((1, 0)));
        assert_eq!(surge_of(1), Ok((1, 0)));
        assert_eq!(surge_of(5), Ok((2, 0)));
        assert_eq!(surge_of(10), Ok((3, 0)));
        assert_eq!(surge_of(100), Ok((25, 0)));
        assert_eq!(surge_of(1000), Ok((250, 0)));
        assert_eq!(pace(None, 100, true).map(Pace::batch), Ok(25));
        // An empty group has nothing to surge for.
        assert_eq!(surge_of(0), Ok((0, 1)));
        // A group that sets only one field keeps the other's default.
        let unavailable_only = spec(None, Some(IntOrPercent::Int(2)));
        assert_eq!(
            pace(Some(&unavailable_only), 10, true),
            Ok(Pace {
                surge: 3,
                unavailable: 2
            })
        );
        // A group that cannot afford a quarter more instances sets maxSurge 1.
        let one = spec(Some(IntOrPercent::Int(1)), None);
        assert_eq!(
            pace(Some(&one), 100, true),
            Ok(Pace {
                surge: 1,
                unavailable: 0
            })
        );
        // 25% of 10: surge rounds up to 3, unavailable rounds down to 2.
        let quarter = spec(Some(text("25%")), Some(text("25%")));
        assert_eq!(
            pace(Some(&quarter), 10, true),
            Ok(Pace {
                surge: 3,
                unavailable: 2
            })
        );
        assert_eq!(pace(Some(&quarter), 10, true).map(Pace::batch), Ok(5));
        // No surge and nothing unavailable would never finish: one at a time.
        let nothing = spec(Some(IntOrPercent::Int(0)), Some(IntOrPercent::Int(0)));
        assert_eq!(
            pace(Some(&nothing), 3, true),
            Ok(Pace {
                surge: 0,
                unavailable: 1
            })
        );
        // --surge=false.
        assert_eq!(
            pace(None, 4, false),
            Ok(Pace {
                surge: 0,
                unavailable: 1
            })
        );
        // Never more than the group holds.
        let huge = spec(Some(IntOrPercent::Int(50)), Some(IntOrPercent::Int(50)));
        assert_eq!(
            pace(Some(&huge), 4, true),
            Ok(Pace {
                surge: 4,
                unavailable: 4
            })
        );
        assert!(pace(Some(&spec(Some(text("x")), None)), 4, true).is_err());
    }

    #[test]
    fn a_version_moves_one_minor_at_a_time_and_never_back() {
        assert_eq!(version_change_problem("1.32.8", "1.33.4"), None);
        assert_eq!(version_change_problem("1.33.4", "1.34.0"), None);
        assert!(version_change_problem("1.34.0", "1.33.4").is_some());
        assert_eq!(version_change_problem("1.33.4", "1.33.4"), None);
        assert_eq!(version_change_problem("1.33.4", "1.33.5"), None);
        let back = version_change_problem("1.33.4", "1.32.8").expect("refused");
        assert!(back.contains("cannot be downgraded"), "{back}");
        assert!(version_change_problem("1.33.4", "1.33.3").is_some());
        let skip = version_change_problem("1.32.8", "1.34.0").expect("refused");
        assert!(
            skip.contains("skips a minor") && skip.contains("1.33.x first"),
            "{skip}"
        );
        assert!(version_change_problem("1.33.4", "2.0.0").is_some());
        assert_eq!(version_change_problem("garbage", "1.33.4"), None);
    }
}
