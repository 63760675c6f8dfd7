//! `ballast delete cluster` end to end on the local cloud, with IAM enforced: the real binary deletes a cluster
//! in a shared VPC; the VPC and subnets survive without its tag, and a scan of every kind Ballast creates, by tag
//! and by name, finds nothing of it.

use std::collections::BTreeMap;
use std::time::Duration;

use assert_cmd::Command;
use ballast_e2e::localcloud::{LocalCloud, Network};

const STATE: &str = "s3://ballast-state/clusters";
const SHARED: &str = "tenant.example.com";

fn ballast(cloud: &LocalCloud) -> Command {
    let mut cmd = Command::new(&ballast_e2e::localcloud::binaries().ballast);
    cmd.env_clear()
        .envs(cloud.operator_env(STATE))
        .timeout(Duration::from_secs(600));
    cmd
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tag_map(tags: &[aws_sdk_ec2::types::Tag]) -> BTreeMap<String, String> {
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
async fn scan(cloud: &LocalCloud, cluster: &str) -> Vec<String> {
    let ec2 = cloud.ec2();
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
    let asg = cloud.autoscaling();
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
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(&cloud.sdk_config());
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
        if named(tg.target_group_name().unwrap_or(""), cluster) {
            add("target-group", tg.target_group_arn().unwrap_or_default());
        }
    }
    let iam = cloud.iam();
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

/// The store's objects under `cluster/`, with their content.
async fn store_objects(cloud: &LocalCloud, cluster: &str) -> BTreeMap<String, Vec<u8>> {
    let s3 = cloud.s3();
    let mut objects = BTreeMap::new();
    let listed = s3
        .list_objects_v2()
        .bucket("ballast-state")
        .prefix(format!("clusters/{cluster}/"))
        .send()
        .await
        .expect("list objects");
    for o in listed.contents() {
        let key = o.key().unwrap_or_default().to_string();
        let body = s3
            .get_object()
            .bucket("ballast-state")
            .key(&key)
            .send()
            .await
            .expect("get object")
            .body
            .collect()
            .await
            .expect("body")
            .into_bytes()
            .to_vec();
        objects.insert(key, body);
    }
    objects
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_in_a_shared_vpc_leaves_the_vpc_and_subnets_without_its_tag() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast("ballast-state").await;
    let octet: u8 = cloud
        .record
        .network_cidr
        .split('.')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("127.X.0.0/16");
    let network = Network::create(&cloud.ec2(), octet, &["us-west-2a", "us-west-2b"]).await;
    let subnets = network.subnet_ids().join(",");
    ballast(&cloud)
        .args([
            "create",
            "cluster",
            SHARED,
            "--zones",
            "us-west-2a,us-west-2b",
        ])
        .args(["--network-id", &network.vpc_id, "--subnets", &subnets])
        .args(["--node-count", "1", "--control-plane-count", "1", "--yes"])
        .assert()
        .success();
    cloud.wait_for_booted(2, Duration::from_secs(180)).await;
    let key = format!("kubernetes.io/cluster/{SHARED}");
    let vpc = cloud
        .ec2()
        .describe_vpcs()
        .vpc_ids(&network.vpc_id)
        .send()
        .await
        .expect("vpc");
    assert_eq!(
        tag_map(vpc.vpcs()[0].tags()).get(&key).map(String::as_str),
        Some("shared")
    );

    let preview = ballast(&cloud)
        .args(["delete", "cluster", SHARED])
        .assert()
        .success();
    let preview = stdout_of(preview.get_output());
    assert!(
        preview.contains(&format!("Vpc {}: shared", network.vpc_id)),
        "{preview}"
    );

    ballast(&cloud)
        .args(["delete", "cluster", SHARED, "--delete-backups", "--yes"])
        .assert()
        .success();
    let ec2 = cloud.ec2();
    let vpcs = ec2
        .describe_vpcs()
        .vpc_ids(&network.vpc_id)
        .send()
        .await
        .expect("the shared VPC survives");
    assert_eq!(vpcs.vpcs().len(), 1);
    assert!(!tag_map(vpcs.vpcs()[0].tags()).contains_key(&key));
    let found = ec2
        .describe_subnets()
        .set_subnet_ids(Some(network.subnet_ids()))
        .send()
        .await
        .expect("the shared subnets survive");
    assert_eq!(found.subnets().len(), 2);
    for s in found.subnets() {
        assert!(!tag_map(s.tags()).contains_key(&key), "{s:?}");
    }
    assert_eq!(scan(&cloud, SHARED).await, Vec::<String>::new());
    assert_eq!(store_objects(&cloud, SHARED).await, BTreeMap::new());
}
