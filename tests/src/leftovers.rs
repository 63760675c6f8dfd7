//! What is left of a cluster in AWS: every resource of every kind Ballast creates that belongs to a cluster by tag
//! or by name. Used after a delete by `ctl_delete_cluster` and by `tools/demo` (the `leftovers` binary); it lists
//! without filters and matches here, so an emulator that ignored a filter could not hide anything, and it shares
//! no code with `ballast`'s own teardown, so it can catch what the teardown misses. It also looks for what a
//! cluster makes by itself, by the tags Kubernetes puts on it: the cloud controller manager's classic and v2 load
//! balancers, target groups and security groups (`kubernetes.io/cluster/NAME`), the EBS CSI driver's volumes
//! (the same tag) and the VPC CNI's network interfaces (`cluster.k8s.amazonaws.com/name=NAME`, a tag value that
//! is the cluster's name).

use std::collections::BTreeMap;

pub fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or("").to_string())))
        .collect()
}

/// Whether tags tie a resource to `cluster`: its ownership tag (either value), its cluster tag, or a `Name`
/// that is the cluster's or ends with it.
fn mentions(tags: &BTreeMap<String, String>, cluster: &str) -> bool {
    tags.contains_key(&format!("kubernetes.io/cluster/{cluster}"))
        || tags
            .values()
            .any(|v| v == cluster || v.ends_with(&format!(".{cluster}")))
}

fn named(name: &str, cluster: &str) -> bool {
    name == cluster
        || name.ends_with(&format!(".{cluster}"))
        || name.contains(&cluster.replace('.', "-"))
}

/// Every resource of every kind Ballast creates that belongs to `cluster` by tag or by name (instances not
/// terminated, NAT gateways not deleted), as `kind id`. Listed without filters and matched here, so an
/// emulator that ignored a filter could not hide anything.
pub async fn scan(config: &aws_config::SdkConfig, cluster: &str) -> Vec<String> {
    let ec2 = aws_sdk_ec2::Client::new(config);
    let mut found = Vec::new();
    let mut add = |kind: &str, id: &str| found.push(format!("{kind} {id}"));
    for v in ec2.describe_vpcs().send().await.expect("vpcs").vpcs() {
        if mentions(&tag_map(v.tags()), cluster) {
            add("vpc", v.vpc_id().unwrap_or_default());
        }
    }
    for s in ec2
        .describe_subnets()
        .send()
        .await
        .expect("subnets")
        .subnets()
    {
        if mentions(&tag_map(s.tags()), cluster) {
            add("subnet", s.subnet_id().unwrap_or_default());
        }
    }
    for t in ec2
        .describe_route_tables()
        .send()
        .await
        .expect("rt")
        .route_tables()
    {
        if mentions(&tag_map(t.tags()), cluster) {
            add("route-table", t.route_table_id().unwrap_or_default());
        }
    }
    for g in ec2
        .describe_internet_gateways()
        .send()
        .await
        .expect("igw")
        .internet_gateways()
    {
        if mentions(&tag_map(g.tags()), cluster) {
            add(
                "internet-gateway",
                g.internet_gateway_id().unwrap_or_default(),
            );
        }
    }
    for g in ec2
        .describe_nat_gateways()
        .send()
        .await
        .expect("nat")
        .nat_gateways()
    {
        let state = g.state().map(|s| s.as_str()).unwrap_or("");
        if state != "deleted" && mentions(&tag_map(g.tags()), cluster) {
            add("nat-gateway", g.nat_gateway_id().unwrap_or_default());
        }
    }
    for a in ec2
        .describe_addresses()
        .send()
        .await
        .expect("eip")
        .addresses()
    {
        if mentions(&tag_map(a.tags()), cluster) {
            add("elastic-ip", a.allocation_id().unwrap_or_default());
        }
    }
    for g in ec2
        .describe_security_groups()
        .send()
        .await
        .expect("sg")
        .security_groups()
    {
        if mentions(&tag_map(g.tags()), cluster) || named(g.group_name().unwrap_or(""), cluster) {
            add("security-group", g.group_id().unwrap_or_default());
        }
    }
    for t in ec2
        .describe_launch_templates()
        .max_results(200)
        .send()
        .await
        .expect("lt")
        .launch_templates()
    {
        if mentions(&tag_map(t.tags()), cluster)
            || named(t.launch_template_name().unwrap_or(""), cluster)
        {
            add(
                "launch-template",
                t.launch_template_id().unwrap_or_default(),
            );
        }
    }
    for i in ec2
        .describe_instances()
        .send()
        .await
        .expect("instances")
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
    {
        let state = i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str())
            .unwrap_or("");
        if state != "terminated" && mentions(&tag_map(i.tags()), cluster) {
            add("instance", i.instance_id().unwrap_or_default());
        }
    }
    for n in ec2
        .describe_network_interfaces()
        .send()
        .await
        .expect("eni")
        .network_interfaces()
    {
        if mentions(&tag_map(n.tag_set()), cluster) {
            add(
                "network-interface",
                n.network_interface_id().unwrap_or_default(),
            );
        }
    }
    for v in ec2
        .describe_volumes()
        .send()
        .await
        .expect("volumes")
        .volumes()
    {
        if mentions(&tag_map(v.tags()), cluster) {
            add("volume", v.volume_id().unwrap_or_default());
        }
    }
    let asg = aws_sdk_autoscaling::Client::new(config);
    for g in asg
        .describe_auto_scaling_groups()
        .send()
        .await
        .expect("asgs")
        .auto_scaling_groups()
    {
        let name = g.auto_scaling_group_name().unwrap_or_default();
        let key = format!("kubernetes.io/cluster/{cluster}");
        let tagged = g
            .tags()
            .iter()
            .any(|t| t.key() == Some(key.as_str()) || t.value() == Some(cluster));
        if tagged || named(name, cluster) {
            add("auto-scaling-group", name);
        }
    }
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(config);
    for lb in elb
        .describe_load_balancers()
        .send()
        .await
        .expect("lbs")
        .load_balancers()
    {
        let arn = lb.load_balancer_arn().unwrap_or_default();
        let tags = elb
            .describe_tags()
            .resource_arns(arn)
            .send()
            .await
            .expect("lb tags");
        let key = format!("kubernetes.io/cluster/{cluster}");
        let tagged = tags
            .tag_descriptions()
            .iter()
            .flat_map(|d| d.tags())
            .any(|t| t.key() == Some(key.as_str()) || t.value() == Some(cluster));
        if tagged || named(lb.load_balancer_name().unwrap_or(""), cluster) {
            add("load-balancer", arn);
        }
        for l in elb
            .describe_listeners()
            .load_balancer_arn(arn)
            .send()
            .await
            .expect("listeners")
            .listeners()
        {
            if named(lb.load_balancer_name().unwrap_or(""), cluster) {
                add("listener", l.listener_arn().unwrap_or_default());
            }
        }
    }
    for tg in elb
        .describe_target_groups()
        .send()
        .await
        .expect("tgs")
        .target_groups()
    {
        let arn = tg.target_group_arn().unwrap_or_default();
        let tags = elb
            .describe_tags()
            .resource_arns(arn)
            .send()
            .await
            .expect("target group tags");
        let key = format!("kubernetes.io/cluster/{cluster}");
        let tagged = tags
            .tag_descriptions()
            .iter()
            .flat_map(|d| d.tags())
            .any(|t| t.key() == Some(key.as_str()) || t.value() == Some(cluster));
        if tagged || named(tg.target_group_name().unwrap_or(""), cluster) {
            add("target-group", arn);
        }
    }
    // Classic load balancers: Ballast makes none; a cluster's cloud controller manager does.
    let classic = aws_sdk_elasticloadbalancing::Client::new(config);
    for lb in classic
        .describe_load_balancers()
        .send()
        .await
        .expect("classic lbs")
        .load_balancer_descriptions()
    {
        let name = lb.load_balancer_name().unwrap_or_default();
        let tags = classic
            .describe_tags()
            .load_balancer_names(name)
            .send()
            .await
            .expect("classic lb tags");
        let key = format!("kubernetes.io/cluster/{cluster}");
        let tagged = tags
            .tag_descriptions()
            .iter()
            .flat_map(|d| d.tags())
            .any(|t| t.key() == key || t.value() == Some(cluster));
        if tagged || named(name, cluster) {
            add("classic-load-balancer", name);
        }
    }
    let iam = aws_sdk_iam::Client::new(config);
    for r in iam.list_roles().send().await.expect("roles").roles() {
        if named(r.role_name(), cluster) {
            add("iam-role", r.role_name());
        }
    }
    for p in iam
        .list_instance_profiles()
        .send()
        .await
        .expect("profiles")
        .instance_profiles()
    {
        if named(p.instance_profile_name(), cluster) {
            add("instance-profile", p.instance_profile_name());
        }
    }
    // IRSA's OIDC providers: by the cluster in the issuer's path or by its ownership tag.
    for p in iam
        .list_open_id_connect_providers()
        .send()
        .await
        .expect("OIDC providers")
        .open_id_connect_provider_list()
    {
        let arn = p.arn().unwrap_or_default();
        let tagged = iam
            .get_open_id_connect_provider()
            .open_id_connect_provider_arn(arn)
            .send()
            .await
            .map(|o| {
                o.tags()
                    .iter()
                    .any(|t| t.key() == format!("kubernetes.io/cluster/{cluster}"))
            })
            .unwrap_or(false);
        if tagged || arn.contains(cluster) {
            add("oidc-provider", arn);
        }
    }
    for p in iam
        .list_policies()
        .send()
        .await
        .expect("policies")
        .policies()
    {
        if named(p.policy_name().unwrap_or(""), cluster) {
            add("iam-policy", p.policy_name().unwrap_or_default());
        }
    }
    found.sort();
    found
}
