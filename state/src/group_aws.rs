//! An instance group's AWS settings beyond its one launch template: a mixed instances policy and spot
//! instances (`mixedInstancesPolicy`, `maxPrice`), scale-in protection and a maximum instance lifetime
//! (`instanceProtection`, `maxInstanceLifetime`), security groups beside the cluster's own
//! (`additionalSecurityGroups`), load balancers the operator owns (`externalLoadBalancers`) and a public IP
//! (`associatePublicIp`). The types, their bounds and their rules, each error naming its field; called by
//! [`crate::validate::validate`]. What `update cluster` makes of them is `ctl/src/cloud/model.rs`'s.

use std::collections::BTreeSet;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::FieldError;
use crate::spec::{ClusterConfig, InstanceGroupSpec, Role, SubnetType, KIND_INSTANCE_GROUP};

/// Instance types one mixed instances policy may list: Auto Scaling's limit on a policy's launch template
/// overrides (40, the CreateAutoScalingGroup API reference's `LaunchTemplateOverrides`).
pub const MAX_MIXED_INSTANCE_TYPES: usize = 40;
/// Spot pools the `lowest-price` strategy spreads over: Auto Scaling accepts 1 to 20.
pub const SPOT_INSTANCE_POOLS: std::ops::RangeInclusive<u32> = 1..=20;
/// The share of on-demand instances above the base, in percent.
pub const ON_DEMAND_ABOVE_BASE_PERCENT: std::ops::RangeInclusive<u32> = 0..=100;
/// A group's maximum instance lifetime in seconds, besides 0 (none): Auto Scaling's bounds, one day to one
/// year (the `MaxInstanceLifetime` of CreateAutoScalingGroup's API reference).
pub const MAX_INSTANCE_LIFETIME_SECS: std::ops::RangeInclusive<u64> = 86_400..=31_536_000;
/// Security groups a group's instances may have besides the cluster's own: an instance's network interface
/// holds at most 16 (EC2's highest quota; the default quota is 5, so past 4 here the quota must be raised).
pub const MAX_ADDITIONAL_SECURITY_GROUPS: usize = 15;
/// Classic load balancers, and target groups, one Auto Scaling group may name: 10 each per
/// CreateAutoScalingGroup call (its API reference); a control-plane group's own API target group is one of
/// its ten.
pub const MAX_EXTERNAL_LOAD_BALANCERS: usize = 10;

static INSTANCE_TYPE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$").expect("static regex"));
static SECURITY_GROUP_ID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^sg-([0-9a-f]{8}|[0-9a-f]{17})$").expect("static regex")
});
/// A classic load balancer's name: at most 32 alphanumerics and hyphens, not starting or ending with one.
static CLASSIC_LB_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$").expect("static regex")
});
/// A target group's ARN (any partition, kops's tests use `aws-test`).
static TARGET_GROUP_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:[0-9]{12}:targetgroup/[A-Za-z0-9-]{1,32}/[0-9a-f]+$",
    )
    .expect("static regex")
});
/// A spot price in US dollars an hour: digits with at most 6 decimals (`0.05`).
static MAX_PRICE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9]{1,5}(\.[0-9]{1,6})?$").expect("static regex"));

/// `spec.mixedInstancesPolicy`: the Auto Scaling group's MixedInstancesPolicy, with the group's launch template
/// as its base and each instance type an override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MixedInstancesPolicySpec {
    /// Instance types the group may launch, in priority order (the launch template's `machineType` is the
    /// template's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instances: Vec<String>,
    /// On-demand instances before any spot one (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand_base: Option<u32>,
    /// Percent of the instances above the base that are on-demand, the rest spot (default 100: no spot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_demand_above_base: Option<u32>,
    /// How spot instances are chosen (AWS's default, `lowest-price`, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_allocation_strategy: Option<SpotAllocationStrategy>,
    /// Spot pools to spread over (`lowest-price` only; AWS's default, 2, when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_instance_pools: Option<u32>,
}

/// Auto Scaling's `SpotAllocationStrategy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SpotAllocationStrategy {
    LowestPrice,
    CapacityOptimized,
    CapacityOptimizedPrioritized,
    PriceCapacityOptimized,
}

impl SpotAllocationStrategy {
    /// AWS's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SpotAllocationStrategy::LowestPrice => "lowest-price",
            SpotAllocationStrategy::CapacityOptimized => "capacity-optimized",
            SpotAllocationStrategy::CapacityOptimizedPrioritized => {
                "capacity-optimized-prioritized"
            }
            SpotAllocationStrategy::PriceCapacityOptimized => "price-capacity-optimized",
        }
    }

    /// Reads AWS's spelling.
    pub fn parse(text: &str) -> Option<Self> {
        [
            SpotAllocationStrategy::LowestPrice,
            SpotAllocationStrategy::CapacityOptimized,
            SpotAllocationStrategy::CapacityOptimizedPrioritized,
            SpotAllocationStrategy::PriceCapacityOptimized,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

/// One entry of `spec.externalLoadBalancers`: a classic load balancer or a target group the operator owns.
/// Ballast attaches the group to it and never deletes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExternalLoadBalancer {
    /// A classic load balancer's name (the group's `LoadBalancerNames`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer_name: Option<String>,
    /// A target group's ARN (the group's `TargetGroupARNs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_group_arn: Option<String>,
}

/// The classic load balancers' names and the target groups' ARNs of a group's external load balancers, each
/// sorted and without repeats.
pub fn external_load_balancers(spec: &InstanceGroupSpec) -> (Vec<String>, Vec<String>) {
    let names: BTreeSet<String> = spec
        .external_load_balancers
        .iter()
        .filter_map(|l| l.load_balancer_name.clone())
        .collect();
    let arns: BTreeSet<String> = spec
        .external_load_balancers
        .iter()
        .filter_map(|l| l.target_group_arn.clone())
        .collect();
    (names.into_iter().collect(), arns.into_iter().collect())
}

/// A group's `maxInstanceLifetime` in seconds: 0 when unset or `0`. Only meaningful on a validated spec.
pub fn max_instance_lifetime_secs(spec: &InstanceGroupSpec) -> u64 {
    spec.max_instance_lifetime
        .as_deref()
        .and_then(|t| crate::duration::parse_duration_or_zero(t).ok())
        .map_or(0, |d| d.as_secs())
}

/// Whether a group's instances get a public IP: `associatePublicIp`, or by default (as kops) when every subnet
/// of the group is public.
pub fn associate_public_ip(config: &ClusterConfig, spec: &InstanceGroupSpec) -> bool {
    spec.associate_public_ip
        .unwrap_or_else(|| all_public(config, spec))
}

fn all_public(config: &ClusterConfig, spec: &InstanceGroupSpec) -> bool {
    !spec.subnets.is_empty()
        && spec.subnets.iter().all(|name| {
            config
                .cluster
                .spec
                .subnets
                .iter()
                .any(|s| &s.name == name && s.subnet_type == Some(SubnetType::Public))
        })
}

/// Go's duration (`48h20m`, `1h0m0s`, `0`: kops writes a `metav1.Duration`) as Ballast's (`48h20m`, `0`); None for
/// what is not whole seconds of hours, minutes and seconds.
pub fn from_go_duration(text: &str) -> Option<String> {
    if text == "0" || text == "0s" {
        return Some("0".to_string());
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        let n: u64 = number.parse().ok()?;
        number.clear();
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    if !number.is_empty() || total == 0 {
        return None;
    }
    Some(crate::duration::human_duration(Duration::from_secs(total)))
}

/// Checks every group's AWS settings; errors name the group and the field.
pub fn check(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    for ig in &config.instance_groups {
        let object = format!("{KIND_INSTANCE_GROUP}/{}", ig.metadata.name);
        let mut error = |path: &str, message: String| {
            errors.push(FieldError::new(&object, path, message));
        };
        let spec = &ig.spec;
        if let Some(policy) = &spec.mixed_instances_policy {
            check_policy(&mut error, policy, spec);
        }
        if let Some(price) = &spec.max_price {
            let positive = price.chars().any(|c| c.is_ascii_digit() && c != '0');
            if !MAX_PRICE.is_match(price) || !positive {
                error(
                    "spec.maxPrice",
                    format!("{price:?} is not a spot price: US dollars an hour, e.g. \"0.05\""),
                );
            }
        }
        if let Some(lifetime) = &spec.max_instance_lifetime {
            match crate::duration::parse_duration_or_zero(lifetime) {
                Err(e) => error("spec.maxInstanceLifetime", e.to_string()),
                Ok(d) if !d.is_zero() && !MAX_INSTANCE_LIFETIME_SECS.contains(&d.as_secs()) => error(
                    "spec.maxInstanceLifetime",
                    format!(
                        "{lifetime:?} is outside what Auto Scaling accepts: 0 (no maximum) or 1d to 365d"
                    ),
                ),
                Ok(_) => {}
            }
        }
        check_security_groups(&mut error, &spec.additional_security_groups);
        check_external_load_balancers(&mut error, spec);
        if spec.associate_public_ip == Some(true) && !all_public(config, spec) {
            error(
                "spec.associatePublicIp",
                "is true but the group has private subnets, whose instances reach out through the NAT gateway: a \
                 public IP there is unreachable; remove the field or use public subnets only"
                    .to_string(),
            );
        }
    }
}

fn check_policy(
    error: &mut impl FnMut(&str, String),
    policy: &MixedInstancesPolicySpec,
    spec: &InstanceGroupSpec,
) {
    let path = "spec.mixedInstancesPolicy";
    if policy.instances.is_empty() {
        error(
            &format!("{path}.instances"),
            "is empty: list the instance types the group may launch (e.g. [m5.large, m5a.large])".into(),
        );
    }
    if policy.instances.len() > MAX_MIXED_INSTANCE_TYPES {
        error(
            &format!("{path}.instances"),
            format!(
                "lists {} instance types, more than Auto Scaling's {MAX_MIXED_INSTANCE_TYPES}",
                policy.instances.len()
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, t) in policy.instances.iter().enumerate() {
        if !INSTANCE_TYPE.is_match(t) {
            error(
                &format!("{path}.instances[{i}]"),
                format!("{t:?} is not an EC2 instance type (e.g. m5.large)"),
            );
        } else if !seen.insert(t) {
            error(
                &format!("{path}.instances[{i}]"),
                format!("{t:?} is listed twice"),
            );
        }
    }
    if let Some(base) = policy.on_demand_base {
        if base > crate::limits::MAX_GROUP_SIZE {
            error(
                &format!("{path}.onDemandBase"),
                format!("{base} is larger than {}", crate::limits::MAX_GROUP_SIZE),
            );
        }
    }
    if let Some(percent) = policy.on_demand_above_base {
        if !ON_DEMAND_ABOVE_BASE_PERCENT.contains(&percent) {
            error(
                &format!("{path}.onDemandAboveBase"),
                format!("{percent} is not a percentage (0 to 100)"),
            );
        }
    }
    if let Some(pools) = policy.spot_instance_pools {
        if !SPOT_INSTANCE_POOLS.contains(&pools) {
            error(
                &format!("{path}.spotInstancePools"),
                format!(
                    "{pools} is outside {}..{}",
                    SPOT_INSTANCE_POOLS.start(),
                    SPOT_INSTANCE_POOLS.end()
                ),
            );
        }
        let strategy = policy
            .spot_allocation_strategy
            .unwrap_or(SpotAllocationStrategy::LowestPrice);
        if strategy != SpotAllocationStrategy::LowestPrice {
            error(
                &format!("{path}.spotInstancePools"),
                format!(
                    "applies to the lowest-price strategy only, not {}: remove it",
                    strategy.as_str()
                ),
            );
        }
    }
    if spec.role == Role::ControlPlane {
        error(
            path,
            "a control-plane group runs one etcd member on one on-demand instance: remove the policy (spot \
             interruptions would take etcd members away)"
                .into(),
        );
    }
}

fn check_security_groups(error: &mut impl FnMut(&str, String), groups: &[String]) {
    let path = "spec.additionalSecurityGroups";
    if groups.len() > MAX_ADDITIONAL_SECURITY_GROUPS {
        error(
            path,
            format!(
                "lists {} security groups; an instance has at most 16, the cluster's own included",
                groups.len()
            ),
        );
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, id) in groups.iter().enumerate() {
        if !SECURITY_GROUP_ID.is_match(id) {
            error(
                &format!("{path}[{i}]"),
                format!("{id:?} is not a security group id (sg-...)"),
            );
        } else if !seen.insert(id) {
            error(&format!("{path}[{i}]"), format!("{id:?} is listed twice"));
        }
    }
}

fn check_external_load_balancers(error: &mut impl FnMut(&str, String), spec: &InstanceGroupSpec) {
    let path = "spec.externalLoadBalancers";
    for (i, lb) in spec.external_load_balancers.iter().enumerate() {
        let at = format!("{path}[{i}]");
        match (&lb.load_balancer_name, &lb.target_group_arn) {
            (Some(_), Some(_)) | (None, None) => error(
                &at,
                "needs exactly one of loadBalancerName (a classic load balancer) and targetGroupArn".into(),
            ),
            (Some(name), None) if !CLASSIC_LB_NAME.is_match(name) => error(
                &format!("{at}.loadBalancerName"),
                format!("{name:?} is not a classic load balancer's name (1-32 letters, digits and hyphens)"),
            ),
            (None, Some(arn)) if !TARGET_GROUP_ARN.is_match(arn) => error(
                &format!("{at}.targetGroupArn"),
                format!(
                    "{arn:?} is not a target group ARN (arn:aws:elasticloadbalancing:REGION:ACCOUNT:targetgroup/NAME/ID)"
                ),
            ),
            _ => {}
        }
    }
    let (names, arns) = external_load_balancers(spec);
    // A control-plane group is also in the cluster's own API target group.
    let own = usize::from(spec.role == Role::ControlPlane);
    if names.len() > MAX_EXTERNAL_LOAD_BALANCERS {
        error(
            path,
            format!(
                "names {} classic load balancers, more than Auto Scaling's {MAX_EXTERNAL_LOAD_BALANCERS}",
                names.len()
            ),
        );
    }
    if arns.len() + own > MAX_EXTERNAL_LOAD_BALANCERS {
        error(
            path,
            format!(
                "names {} target groups; a group may be in {MAX_EXTERNAL_LOAD_BALANCERS}{}",
                arns.len(),
                if own == 1 {
                    ", the cluster's API target group included"
                } else {
                    ""
                }
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_become_ballast_s() {
        assert_eq!(from_go_duration("48h20m").as_deref(), Some("48h20m"));
        assert_eq!(from_go_duration("24h0m0s").as_deref(), Some("24h"));
        assert_eq!(from_go_duration("0").as_deref(), Some("0"));
        assert_eq!(from_go_duration("1.5h"), None);
        assert_eq!(from_go_duration("10ms"), None);
        assert_eq!(from_go_duration("5"), None);
        assert_eq!(from_go_duration("99999999999999999999h"), None);
    }

    #[test]
    fn spot_strategies_read_as_aws_writes_them() {
        for s in [
            "lowest-price",
            "capacity-optimized",
            "capacity-optimized-prioritized",
            "price-capacity-optimized",
        ] {
            assert_eq!(SpotAllocationStrategy::parse(s).map(|v| v.as_str()), Some(s));
        }
        assert_eq!(SpotAllocationStrategy::parse("cheapest"), None);
    }
}
