//! An instance group's AWS settings beyond its one launch template: a mixed instances policy and spot
//! instances (`mixedInstancesPolicy`, `maxPrice`), scale-in protection and a maximum instance lifetime
//! (`instanceProtection`, `maxInstanceLifetime`), security groups beside the cluster's own
//! (`additionalSecurityGroups`), load balancers the operator owns (`externalLoadBalancers`) and a public IP
//! (`associatePublicIp`): the types and their bounds (a leaf: `spec` uses it); their rules are
//! [`crate::group_aws_rules`]'s. What `update cluster` makes of them is `ctl/src/cloud/group_aws.rs`'s.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

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
/// Security groups the API's network load balancer may carry (`spec.api.loadBalancer.additionalSecurityGroups`):
/// Elastic Load Balancing's quota of security groups per load balancer, 5.
pub const MAX_API_SECURITY_GROUPS: usize = 5;
/// Classic load balancers, and target groups, one Auto Scaling group may name: 10 each per
/// CreateAutoScalingGroup call (its API reference); a control-plane group's own API target group is one of
/// its ten.
pub const MAX_EXTERNAL_LOAD_BALANCERS: usize = 10;

pub(crate) static INSTANCE_TYPE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9-]*\.[a-z0-9]+$").expect("static regex"));
pub(crate) static SECURITY_GROUP_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^sg-([0-9a-f]{8}|[0-9a-f]{17})$").expect("static regex"));
/// A classic load balancer's name: at most 32 alphanumerics and hyphens, not starting or ending with one.
pub(crate) static CLASSIC_LB_NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?$").expect("static regex")
});
/// A target group's ARN (any partition, kops's tests use `aws-test`).
pub(crate) static TARGET_GROUP_ARN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^arn:aws[a-z-]*:elasticloadbalancing:[a-z0-9-]+:[0-9]{12}:targetgroup/[A-Za-z0-9-]{1,32}/[0-9a-f]+$",
    )
    .expect("static regex")
});
/// A spot price in US dollars an hour: digits with at most 6 decimals (`0.05`).
pub(crate) static MAX_PRICE: LazyLock<Regex> =
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
            assert_eq!(
                SpotAllocationStrategy::parse(s).map(|v| v.as_str()),
                Some(s)
            );
        }
        assert_eq!(SpotAllocationStrategy::parse("cheapest"), None);
    }
}
