//! Resources a running cluster makes in AWS by itself, made here by a test with the same API calls and tags:
//! the cloud controller manager's for a Service of type LoadBalancer (a classic ELB with its `k8s-elb-...`
//! security group and the rule admitting that group into the nodes' group; an NLB with its target group
//! `k8s-...` and listener), the EBS CSI driver's volume (run with `--extra-tags=kubernetes.io/cluster/NAME=owned`)
//! and the VPC CNI's network interface (tagged `cluster.k8s.amazonaws.com/name`). `ctl_delete_cluster` makes them
//! in a cluster's VPC and checks that `delete cluster` leaves none of them, and none of a neighbour's.

use aws_sdk_ec2::types as ec2;
use sha2::{Digest, Sha256};

/// What was made for one cluster, by id (classic load balancers are known by name).
#[derive(Debug, Clone)]
pub struct Made {
    pub classic_load_balancer: String,
    pub classic_security_group: String,
    /// The nodes' group the classic load balancer's group was admitted into.
    pub nodes_security_group: String,
    pub network_load_balancer: String,
    pub target_group: String,
    pub volume: String,
    pub network_interface: String,
}

/// `a` and 31 hex digits, as the cloud controller manager names a Service's load balancer (from its UID).
fn load_balancer_name(cluster: &str, service: &str) -> String {
    let digest = hex::encode(Sha256::digest(format!("{cluster}/{service}").as_bytes()));
    format!("a{}", &digest[..31])
}

fn tag(key: &str, value: &str) -> ec2::Tag {
    ec2::Tag::builder().key(key).value(value).build()
}

fn tags_for(kind: ec2::ResourceType, tags: Vec<ec2::Tag>) -> ec2::TagSpecification {
    ec2::TagSpecification::builder()
        .resource_type(kind)
        .set_tags(Some(tags))
        .build()
}

/// The cluster's VPC (tagged `owned`), its subnets, its nodes' security group and one of its running instances
/// not in the control plane.
async fn cluster_network(
    ec2c: &aws_sdk_ec2::Client,
    cluster: &str,
) -> (String, Vec<String>, String, String) {
    let owner = format!("tag:kubernetes.io/cluster/{cluster}");
    let vpc = ec2c
        .describe_vpcs()
        .filters(ec2::Filter::builder().name(&owner).values("owned").build())
        .send()
        .await
        .expect("the cluster's VPC");
    let vpc_id = vpc.vpcs()[0].vpc_id().expect("a VPC id").to_string();
    let subnets: Vec<String> = ec2c
        .describe_subnets()
        .filters(
            ec2::Filter::builder()
                .name("vpc-id")
                .values(&vpc_id)
                .build(),
        )
        .send()
        .await
        .expect("subnets")
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id().map(str::to_string))
        .collect();
    let nodes = ec2c
        .describe_security_groups()
        .filters(
            ec2::Filter::builder()
                .name("vpc-id")
                .values(&vpc_id)
                .build(),
        )
        .filters(
            ec2::Filter::builder()
                .name("group-name")
                .values(format!("nodes.{cluster}"))
                .build(),
        )
        .send()
        .await
        .expect("the nodes' security group");
    let nodes_sg = nodes.security_groups()[0]
        .group_id()
        .expect("a group id")
        .to_string();
    let instance = ec2c
        .describe_instances()
        .filters(ec2::Filter::builder().name(&owner).values("owned").build())
        .filters(
            ec2::Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("instances")
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .find(|i| {
            i.tags().iter().any(|t| {
                t.key() == Some("aws:autoscaling:groupName")
                    && t.value().is_some_and(|v| v.starts_with("nodes"))
            })
        })
        .and_then(|i| i.instance_id().map(str::to_string))
        .expect("a running node of the cluster");
    (vpc_id, subnets, nodes_sg, instance)
}

/// Makes, in `cluster`'s VPC, what its cloud controller manager, EBS CSI driver and VPC CNI would: see the
/// module's documentation. The network interface is attached to one of the cluster's nodes, as the CNI attaches
/// it (device 1, deleted on termination).
pub async fn make(config: &aws_config::SdkConfig, cluster: &str) -> Made {
    let ec2c = aws_sdk_ec2::Client::new(config);
    let classic = aws_sdk_elasticloadbalancing::Client::new(config);
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(config);
    let (vpc_id, subnets, nodes_sg, instance) = cluster_network(&ec2c, cluster).await;
    let owned = format!("kubernetes.io/cluster/{cluster}");

    // A Service `default/web` of type LoadBalancer: the classic ELB (the CCM's default).
    let lb_name = load_balancer_name(cluster, "default/web");
    let sg_name = format!("k8s-elb-{lb_name}");
    let sg = ec2c
        .create_security_group()
        .group_name(&sg_name)
        .description(format!(
            "Security group for Kubernetes ELB {lb_name} (default/web)"
        ))
        .vpc_id(&vpc_id)
        .send()
        .await
        .expect("the load balancer's security group")
        .group_id()
        .expect("a group id")
        .to_string();
    ec2c.create_tags()
        .resources(&sg)
        .tags(tag(&owned, "owned"))
        .send()
        .await
        .expect("tag the load balancer's group");
    ec2c.authorize_security_group_ingress()
        .group_id(&sg)
        .ip_permissions(
            ec2::IpPermission::builder()
                .ip_protocol("tcp")
                .from_port(80)
                .to_port(80)
                .ip_ranges(ec2::IpRange::builder().cidr_ip("0.0.0.0/0").build())
                .build(),
        )
        .send()
        .await
        .expect("the load balancer's ingress");
    let elb_tag = |key: &str, value: &str| {
        aws_sdk_elasticloadbalancing::types::Tag::builder()
            .key(key)
            .value(value)
            .build()
            .expect("a tag")
    };
    classic
        .create_load_balancer()
        .load_balancer_name(&lb_name)
        .listeners(
            aws_sdk_elasticloadbalancing::types::Listener::builder()
                .protocol("TCP")
                .load_balancer_port(80)
                .instance_protocol("TCP")
                .instance_port(30080)
                .build()
                .expect("a listener"),
        )
        .subnets(&subnets[0])
        .security_groups(&sg)
        .tags(elb_tag("kubernetes.io/service-name", "default/web"))
        .tags(elb_tag(&owned, "owned"))
        .send()
        .await
        .expect("the classic load balancer");
    // The nodes admit everything from the load balancer's group (the CCM's
    // updateInstanceSecurityGroupsForLoadBalancer): the rule that holds that group's deletion.
    ec2c.authorize_security_group_ingress()
        .group_id(&nodes_sg)
        .ip_permissions(
            ec2::IpPermission::builder()
                .ip_protocol("-1")
                .user_id_group_pairs(ec2::UserIdGroupPair::builder().group_id(&sg).build())
                .build(),
        )
        .send()
        .await
        .expect("the nodes admit the load balancer");

    // A Service `default/api` with `service.beta.kubernetes.io/aws-load-balancer-type: nlb`.
    let v2_tag = |key: &str, value: &str| {
        aws_sdk_elasticloadbalancingv2::types::Tag::builder()
            .key(key)
            .value(value)
            .build()
    };
    let nlb = elb
        .create_load_balancer()
        .name(load_balancer_name(cluster, "default/api"))
        .r#type(aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum::Network)
        .scheme(aws_sdk_elasticloadbalancingv2::types::LoadBalancerSchemeEnum::InternetFacing)
        .subnets(&subnets[0])
        .tags(v2_tag("kubernetes.io/service-name", "default/api"))
        .tags(v2_tag(&owned, "owned"))
        .send()
        .await
        .expect("the network load balancer");
    let nlb_arn = nlb.load_balancers()[0]
        .load_balancer_arn()
        .expect("an ARN")
        .to_string();
    let hash = &hex::encode(Sha256::digest(format!("{cluster}/api/443").as_bytes()))[..10];
    let tg = elb
        .create_target_group()
        .name(format!("k8s-default-api-{hash}"))
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .port(30443)
        .vpc_id(&vpc_id)
        .target_type(aws_sdk_elasticloadbalancingv2::types::TargetTypeEnum::Instance)
        .tags(v2_tag("kubernetes.io/service-name", "default/api"))
        .tags(v2_tag("kubernetes.io/service-port", "443"))
        .tags(v2_tag(&owned, "owned"))
        .send()
        .await
        .expect("the target group");
    let tg_arn = tg.target_groups()[0]
        .target_group_arn()
        .expect("an ARN")
        .to_string();
    elb.create_listener()
        .load_balancer_arn(&nlb_arn)
        .protocol(aws_sdk_elasticloadbalancingv2::types::ProtocolEnum::Tcp)
        .port(443)
        .default_actions(
            aws_sdk_elasticloadbalancingv2::types::Action::builder()
                .r#type(aws_sdk_elasticloadbalancingv2::types::ActionTypeEnum::Forward)
                .target_group_arn(&tg_arn)
                .build(),
        )
        .send()
        .await
        .expect("the listener");

    // A PersistentVolumeClaim `default/data`: the EBS CSI driver's volume.
    let pv = format!(
        "pvc-{}",
        &hex::encode(Sha256::digest(cluster.as_bytes()))[..12]
    );
    let volume = ec2c
        .create_volume()
        .availability_zone("us-west-2a")
        .size(1)
        .volume_type(ec2::VolumeType::Gp3)
        .tag_specifications(tags_for(
            ec2::ResourceType::Volume,
            vec![
                tag("CSIVolumeName", &pv),
                tag("ebs.csi.aws.com/cluster", "true"),
                tag("kubernetes.io/created-for/pv/name", &pv),
                tag("kubernetes.io/created-for/pvc/name", "data"),
                tag("kubernetes.io/created-for/pvc/namespace", "default"),
                tag(&owned, "owned"),
            ],
        ))
        .send()
        .await
        .expect("the CSI driver's volume")
        .volume_id()
        .expect("a volume id")
        .to_string();

    // The VPC CNI's secondary interface of a node, attached as the CNI attaches it.
    let eni = ec2c
        .create_network_interface()
        .subnet_id(&subnets[0])
        .description(format!("aws-K8S-{instance}"))
        .groups(&nodes_sg)
        .tag_specifications(tags_for(
            ec2::ResourceType::NetworkInterface,
            vec![
                tag("cluster.k8s.amazonaws.com/name", cluster),
                tag("node.k8s.amazonaws.com/instance_id", &instance),
                tag("node.k8s.amazonaws.com/createdAt", "2026-12-02T00:00:00Z"),
            ],
        ))
        .send()
        .await
        .expect("the CNI's network interface")
        .network_interface()
        .and_then(|n| n.network_interface_id())
        .expect("an interface id")
        .to_string();
    let attachment = ec2c
        .attach_network_interface()
        .network_interface_id(&eni)
        .instance_id(&instance)
        .device_index(1)
        .send()
        .await
        .expect("attach the CNI's interface")
        .attachment_id()
        .expect("an attachment id")
        .to_string();
    ec2c.modify_network_interface_attribute()
        .network_interface_id(&eni)
        .attachment(
            ec2::NetworkInterfaceAttachmentChanges::builder()
                .attachment_id(attachment)
                .delete_on_termination(true)
                .build(),
        )
        .send()
        .await
        .expect("delete on termination");

    Made {
        classic_load_balancer: lb_name,
        classic_security_group: sg,
        nodes_security_group: nodes_sg,
        network_load_balancer: nlb_arn,
        target_group: tg_arn,
        volume,
        network_interface: eni,
    }
}

/// Which of `made` still exist, as `kind id`, each looked up by its id (not by tag: this must see them even if
/// a delete removed only their tags). The nodes' group is left out: it is the cluster's own.
pub async fn still_there(config: &aws_config::SdkConfig, made: &Made) -> Vec<String> {
    let ec2c = aws_sdk_ec2::Client::new(config);
    let classic = aws_sdk_elasticloadbalancing::Client::new(config);
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(config);
    let mut left = Vec::new();
    let classic_lbs = classic
        .describe_load_balancers()
        .send()
        .await
        .expect("classic load balancers");
    if classic_lbs
        .load_balancer_descriptions()
        .iter()
        .any(|lb| lb.load_balancer_name() == Some(made.classic_load_balancer.as_str()))
    {
        left.push(format!(
            "classic-load-balancer {}",
            made.classic_load_balancer
        ));
    }
    let groups = ec2c
        .describe_security_groups()
        .send()
        .await
        .expect("security groups");
    if groups
        .security_groups()
        .iter()
        .any(|g| g.group_id() == Some(made.classic_security_group.as_str()))
    {
        left.push(format!("security-group {}", made.classic_security_group));
    }
    let lbs = elb.describe_load_balancers().send().await.expect("lbs");
    if lbs
        .load_balancers()
        .iter()
        .any(|lb| lb.load_balancer_arn() == Some(made.network_load_balancer.as_str()))
    {
        left.push(format!("load-balancer {}", made.network_load_balancer));
    }
    let tgs = elb.describe_target_groups().send().await.expect("tgs");
    if tgs
        .target_groups()
        .iter()
        .any(|tg| tg.target_group_arn() == Some(made.target_group.as_str()))
    {
        left.push(format!("target-group {}", made.target_group));
    }
    let volumes = ec2c.describe_volumes().send().await.expect("volumes");
    if volumes
        .volumes()
        .iter()
        .any(|v| v.volume_id() == Some(made.volume.as_str()))
    {
        left.push(format!("volume {}", made.volume));
    }
    let enis = ec2c
        .describe_network_interfaces()
        .send()
        .await
        .expect("network interfaces");
    if enis
        .network_interfaces()
        .iter()
        .any(|n| n.network_interface_id() == Some(made.network_interface.as_str()))
    {
        left.push(format!("network-interface {}", made.network_interface));
    }
    left
}

/// Whether the nodes' group of `made` still admits its load balancer's group (a neighbour's must).
pub async fn nodes_admit_load_balancer(config: &aws_config::SdkConfig, made: &Made) -> bool {
    let ec2c = aws_sdk_ec2::Client::new(config);
    let groups = ec2c
        .describe_security_groups()
        .group_ids(&made.nodes_security_group)
        .send()
        .await
        .expect("the nodes' group");
    groups
        .security_groups()
        .iter()
        .flat_map(|g| g.ip_permissions())
        .flat_map(|p| p.user_id_group_pairs())
        .any(|pair| pair.group_id() == Some(made.classic_security_group.as_str()))
}

/// The `kubernetes.io/role/...` tags of `cluster`'s own subnets (tagged `owned`), by their `Name`: what the cloud
/// controller manager reads to choose where a load balancer goes.
pub async fn subnet_roles(
    config: &aws_config::SdkConfig,
    cluster: &str,
) -> std::collections::BTreeMap<String, Vec<String>> {
    let ec2c = aws_sdk_ec2::Client::new(config);
    let owned = format!("kubernetes.io/cluster/{cluster}");
    let subnets = ec2c.describe_subnets().send().await.expect("subnets");
    subnets
        .subnets()
        .iter()
        .filter(|s| {
            s.tags()
                .iter()
                .any(|t| t.key() == Some(owned.as_str()) && t.value() == Some("owned"))
        })
        .map(|s| {
            let name = s
                .tags()
                .iter()
                .find(|t| t.key() == Some("Name"))
                .and_then(|t| t.value())
                .unwrap_or_default()
                .to_string();
            let roles = s
                .tags()
                .iter()
                .filter(|t| {
                    t.key()
                        .is_some_and(|k| k.starts_with("kubernetes.io/role/"))
                })
                .map(|t| format!("{}={}", t.key().unwrap_or(""), t.value().unwrap_or("")))
                .collect();
            (name, roles)
        })
        .collect()
}

/// A network interface the VPC CNI of `cluster` would make in `subnet` (not attached), by id.
pub async fn cni_network_interface(
    config: &aws_config::SdkConfig,
    cluster: &str,
    subnet: &str,
) -> String {
    aws_sdk_ec2::Client::new(config)
        .create_network_interface()
        .subnet_id(subnet)
        .description("aws-K8S-i-0123456789abcdef0")
        .tag_specifications(tags_for(
            ec2::ResourceType::NetworkInterface,
            vec![
                tag("cluster.k8s.amazonaws.com/name", cluster),
                tag("node.k8s.amazonaws.com/instance_id", "i-0123456789abcdef0"),
            ],
        ))
        .send()
        .await
        .expect("a CNI network interface")
        .network_interface()
        .and_then(|n| n.network_interface_id())
        .expect("an interface id")
        .to_string()
}

/// Which of `ids` are network interfaces that still exist.
pub async fn network_interfaces_there(config: &aws_config::SdkConfig, ids: &[&str]) -> Vec<String> {
    aws_sdk_ec2::Client::new(config)
        .describe_network_interfaces()
        .send()
        .await
        .expect("network interfaces")
        .network_interfaces()
        .iter()
        .filter_map(|n| n.network_interface_id())
        .filter(|id| ids.contains(id))
        .map(str::to_string)
        .collect()
}
