//! The rules of an instance group's AWS settings (`crate::group_aws`'s types) and of the API load balancer's
//! security groups, each error naming its field, and
//! what they mean for a group of a config (its public IP, its load balancers); called by
//! [`crate::validate::validate`].

use std::collections::BTreeSet;

use crate::error::FieldError;
use crate::group_aws::{
    MixedInstancesPolicySpec, SpotAllocationStrategy, CLASSIC_LB_NAME, INSTANCE_TYPE,
    MAX_ADDITIONAL_SECURITY_GROUPS, MAX_API_SECURITY_GROUPS, MAX_EXTERNAL_LOAD_BALANCERS,
    MAX_INSTANCE_LIFETIME_SECS, MAX_MIXED_INSTANCE_TYPES, MAX_PRICE, ON_DEMAND_ABOVE_BASE_PERCENT,
    SECURITY_GROUP_ID, SPOT_INSTANCE_POOLS, TARGET_GROUP_ARN,
};
use crate::spec::{
    ClusterConfig, InstanceGroupSpec, Role, SubnetType, KIND_CLUSTER, KIND_INSTANCE_GROUP,
};

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

/// Checks every group's AWS settings; errors name the group and the field.
pub fn check(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    check_api_security_groups(errors, config);
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
            if spec.role == Role::ControlPlane {
                error(
                    "spec.maxPrice",
                    "a control-plane group runs its etcd members on on-demand instances: remove it (spot \
                     interruptions would take etcd members away)"
                        .into(),
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
        check_security_groups(
            &mut error,
            "spec.additionalSecurityGroups",
            &spec.additional_security_groups,
            MAX_ADDITIONAL_SECURITY_GROUPS,
            "an instance has at most 16, the cluster's own included",
        );
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
            "is empty: list the instance types the group may launch (e.g. [m5.large, m5a.large])"
                .into(),
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

/// The API load balancer's security groups (`spec.api.loadBalancer.additionalSecurityGroups`): ids, each once,
/// at most Elastic Load Balancing's 5 per load balancer.
fn check_api_security_groups(errors: &mut Vec<FieldError>, config: &ClusterConfig) {
    let Some(lb) = config
        .cluster
        .spec
        .api
        .as_ref()
        .and_then(|a| a.load_balancer.as_ref())
    else {
        return;
    };
    let object = format!("{KIND_CLUSTER}/{}", config.cluster.metadata.name);
    let mut error = |path: &str, message: String| {
        errors.push(FieldError::new(&object, path, message));
    };
    check_security_groups(
        &mut error,
        "spec.api.loadBalancer.additionalSecurityGroups",
        &lb.additional_security_groups,
        MAX_API_SECURITY_GROUPS,
        "a load balancer has at most 5",
    );
}

fn check_security_groups(
    error: &mut impl FnMut(&str, String),
    path: &str,
    groups: &[String],
    max: usize,
    why: &str,
) {
    if groups.len() > max {
        error(
            path,
            format!("lists {} security groups; {why}", groups.len()),
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
