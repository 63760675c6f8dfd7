//! Bastion groups in the plan model (`ballast::cloud::model::cluster_model`, `ctl/src/cloud/bastions.rs`): what
//! they open, where they go, and what their role may read.

use ballast::cloud::model::{cluster_model, IngressRule, Source, StateLocation};
use ballast_state::defaults::complete;
use ballast_state::generate::{generate, ClusterTemplate};
use ballast_state::spec::{
    ClusterConfig, InstanceGroup, InstanceGroupSpec, Role, SubnetType, Topology,
};
use ballast_state::validate::validate;

fn private_with_bastion() -> ClusterConfig {
    let mut config = generate(&ClusterTemplate {
        name: "demo.example.com".into(),
        zones: vec!["us-west-2a".into()],
        topology: Some(Topology::Private),
        ssh_access: vec!["203.0.113.0/24".into()],
        ..Default::default()
    })
    .expect("template");
    config.instance_groups.push(InstanceGroup::new(
        "bastion",
        InstanceGroupSpec::with_role(Role::Bastion),
    ));
    complete(&config)
}

fn ssh(source: Source) -> IngressRule {
    IngressRule {
        protocol: "tcp".into(),
        from_port: 22,
        to_port: 22,
        source,
    }
}

#[test]
fn ssh_access_opens_the_bastions_and_only_they_reach_the_instances() {
    let config = private_with_bastion();
    let errors = validate(&config);
    assert!(errors.is_empty(), "{errors:#?}");
    let state = StateLocation::from_url("s3://state/clusters").expect("s3");
    let model = cluster_model(&config, &state);
    let group = |role: Role| {
        model
            .security_groups
            .iter()
            .find(|g| g.role == role)
            .unwrap_or_else(|| panic!("{role:?}'s group"))
    };
    assert_eq!(group(Role::Bastion).name, "bastions.demo.example.com");
    assert_eq!(
        group(Role::Bastion).rules,
        vec![ssh(Source::Cidr("203.0.113.0/24".into()))]
    );
    for role in [Role::ControlPlane, Role::Node] {
        let open: Vec<&IngressRule> = group(role)
            .rules
            .iter()
            .filter(|r| r.protocol == "tcp" && r.from_port <= 22 && r.to_port >= 22)
            .filter(|r| matches!(r.source, Source::Cidr(_)))
            .collect();
        assert!(open.is_empty(), "{role:?} still open to {open:?}");
        assert!(
            group(role)
                .rules
                .contains(&ssh(Source::Group(Role::Bastion))),
            "{role:?}"
        );
    }
    // The bastion goes in the public subnets (the others stay private), small, with IMDSv2 and an encrypted root.
    let bastion = model
        .groups
        .iter()
        .find(|g| g.role == Role::Bastion)
        .expect("bastion group");
    assert!(!bastion.subnets.is_empty());
    for subnet in &bastion.subnets {
        let spec = config
            .cluster
            .spec
            .subnets
            .iter()
            .find(|s| &s.name == subnet)
            .expect("subnet");
        assert_eq!(spec.subnet_type, Some(SubnetType::Public), "{subnet}");
    }
    assert_eq!(
        (
            bastion.machine_type.as_str(),
            bastion.min_size,
            bastion.max_size
        ),
        ("t3.micro", 1, 1)
    );
    assert_eq!(bastion.root_volume_size, 32);
    assert!(bastion.http_tokens_required && bastion.root_volume_encrypted);
}

#[test]
fn the_bastion_role_reads_its_own_spec_and_nothing_else() {
    let config = private_with_bastion();
    let state = StateLocation::from_url("s3://state/clusters").expect("s3");
    let model = cluster_model(&config, &state);
    let role = model
        .roles
        .iter()
        .find(|r| r.role == Role::Bastion)
        .expect("bastion role");
    assert_eq!(role.name, "bastions.demo.example.com");
    let policy: serde_json::Value = serde_json::from_str(&role.policy).expect("JSON");
    assert_eq!(
        policy["Statement"],
        serde_json::json!([{"Sid": "ReadBastionSpecs", "Effect": "Allow", "Action": ["s3:GetObject"],
            "Resource": ["arn:aws:s3:::state/clusters/demo.example.com/nodes/bastion/*"]}])
    );
    // Without a bastion neither the role nor the group exists, and sshAccess opens the instances as before.
    let mut without = config.clone();
    without
        .instance_groups
        .retain(|ig| ig.spec.role != Role::Bastion);
    let model = cluster_model(&without, &state);
    assert!(model.roles.iter().all(|r| r.role != Role::Bastion));
    assert!(model
        .security_groups
        .iter()
        .all(|g| g.role != Role::Bastion));
    let nodes = model
        .security_groups
        .iter()
        .find(|g| g.role == Role::Node)
        .expect("nodes");
    assert!(nodes
        .rules
        .contains(&ssh(Source::Cidr("203.0.113.0/24".into()))));
}

#[test]
fn a_bastion_is_refused_where_it_makes_no_sense() {
    // A public topology: refused naming the role.
    let mut public = generate(&ClusterTemplate {
        name: "demo.example.com".into(),
        zones: vec!["us-west-2a".into()],
        ..Default::default()
    })
    .expect("template");
    let mut spec = InstanceGroupSpec::with_role(Role::Bastion);
    spec.max_size = Some(7);
    spec.min_size = Some(1);
    spec.taints = Some(vec!["a=b:NoSchedule".into()]);
    public
        .instance_groups
        .push(InstanceGroup::new("bastion", spec));
    let errors = validate(&complete(&public));
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    for wanted in [
        "InstanceGroup/bastion: spec.role: a Bastion group needs spec.topology Private",
        "InstanceGroup/bastion: spec.maxSize: 7 bastions, more than 6",
        "InstanceGroup/bastion: spec.taints: a bastion runs no kubelet",
    ] {
        assert!(
            text.iter().any(|t| t.starts_with(wanted)),
            "{wanted} not in {text:#?}"
        );
    }
    // A private subnet in a private topology: refused naming the subnet.
    let mut config = private_with_bastion();
    let private = config
        .cluster
        .spec
        .subnets
        .iter()
        .find(|s| s.subnet_type == Some(SubnetType::Private))
        .expect("private subnet")
        .name
        .clone();
    let bastion = config
        .instance_groups
        .iter_mut()
        .find(|ig| ig.spec.role == Role::Bastion)
        .expect("bastion");
    bastion.spec.subnets = vec![private.clone()];
    let errors = validate(&config);
    assert!(
        errors.iter().any(|e| e.to_string().starts_with(&format!(
            "InstanceGroup/bastion: spec.subnets[0]: {private:?} is a private subnet"
        ))),
        "{errors:#?}"
    );
}
