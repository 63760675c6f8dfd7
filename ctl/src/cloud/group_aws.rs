//! What a group's AWS settings (`ballast_state::group_aws`: mixed instances and spot, scale-in protection,
//! lifetime, extra security groups, external load balancers, a public IP) make of its launch template and its
//! Auto Scaling group: pure, built with the rest of the model (`ctl/src/cloud/model.rs`).
//!
//! A launch template change rolls the group's instances (a new default version); the Auto Scaling group's own
//! settings (policy, protection, lifetime, load balancers) change in place and roll nothing.

use ballast_state::group_aws::SpotAllocationStrategy;
use ballast_state::group_aws_rules::{
    associate_public_ip, external_load_balancers, max_instance_lifetime_secs,
};
use ballast_state::spec::{ClusterConfig, InstanceGroupSpec};

/// A group's mixed instances policy, as the Auto Scaling group holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MixedPolicy {
    /// The overrides' instance types, in the spec's order (the priority order).
    pub instance_types: Vec<String>,
    pub on_demand_base: i32,
    pub on_demand_above_base: i32,
    pub spot_allocation_strategy: SpotAllocationStrategy,
    /// Only with `lowest-price`.
    pub spot_instance_pools: Option<i32>,
    /// `maxPrice`: unset, AWS's default (the on-demand price).
    pub spot_max_price: Option<String>,
}

impl MixedPolicy {
    /// How a plan shows it, and how a found policy is compared with it: one line, every value AWS holds.
    pub fn summary(&self) -> String {
        let mut out = format!(
            "types={} onDemandBase={} onDemandAboveBase={}% spot={}",
            self.instance_types.join(","),
            self.on_demand_base,
            self.on_demand_above_base,
            self.spot_allocation_strategy.as_str()
        );
        if let Some(pools) = self.spot_instance_pools {
            out.push_str(&format!(" pools={pools}"));
        }
        if let Some(price) = &self.spot_max_price {
            out.push_str(&format!(" maxPrice={price}"));
        }
        out
    }
}

/// A group's AWS settings beyond the rest of its model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupAws {
    /// The launch template's network interface asks for a public IP.
    pub public_ip: bool,
    /// Security group ids the instances have besides the cluster's own.
    pub additional_security_groups: Vec<String>,
    /// Spot instances only, at most this price (the launch template's market options): `maxPrice` without a
    /// mixed instances policy.
    pub spot_max_price: Option<String>,
    pub mixed: Option<MixedPolicy>,
    pub protect_from_scale_in: bool,
    /// Seconds; 0: none.
    pub max_instance_lifetime: i32,
    /// The operator's classic load balancers and target groups (never Ballast's, never deleted by it).
    pub load_balancer_names: Vec<String>,
    pub target_group_arns: Vec<String>,
}

/// The settings of one group of a completed, validated config.
pub fn group_aws(config: &ClusterConfig, spec: &InstanceGroupSpec) -> GroupAws {
    let (load_balancer_names, target_group_arns) = external_load_balancers(spec);
    let mixed = spec.mixed_instances_policy.as_ref().map(|p| {
        let strategy = p
            .spot_allocation_strategy
            .unwrap_or(SpotAllocationStrategy::LowestPrice);
        MixedPolicy {
            instance_types: p.instances.clone(),
            on_demand_base: to_i32(p.on_demand_base.unwrap_or(0)),
            on_demand_above_base: to_i32(p.on_demand_above_base.unwrap_or(100)),
            spot_allocation_strategy: strategy,
            spot_instance_pools: (strategy == SpotAllocationStrategy::LowestPrice)
                .then(|| to_i32(p.spot_instance_pools.unwrap_or(2))),
            spot_max_price: spec.max_price.clone(),
        }
    });
    GroupAws {
        public_ip: associate_public_ip(config, spec),
        additional_security_groups: spec.additional_security_groups.clone(),
        spot_max_price: if mixed.is_none() {
            spec.max_price.clone()
        } else {
            None
        },
        mixed,
        protect_from_scale_in: spec.instance_protection.unwrap_or(false),
        max_instance_lifetime: i32::try_from(max_instance_lifetime_secs(spec)).unwrap_or(i32::MAX),
        load_balancer_names,
        target_group_arns,
    }
}

/// Validated values are far below `i32::MAX`.
fn to_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}
