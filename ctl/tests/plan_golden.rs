//! Golden tests of `update cluster`'s plans, without AWS: each `tests/data/<case>/` holds a spec (`spec.yaml`,
//! a cluster and its groups as written), a recorded actual state (`actual.yaml`: what each kind's `find` would
//! return) and `plan.txt`, the exact plan (or `error: ...`) expected from the model diffed against it.
//! `BALLAST_BLESS=1 cargo test -p ballast --test plan_golden` rewrites the `plan.txt` files; a case without an
//! `actual.yaml` gets one written then: the state a successful apply of its spec leaves (ids made up), so an
//! in-sync case starts from it and a drifted case from a copy edited by hand.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast::cloud::aws::{ownership_tag, GROUP_TAG};
use ballast::cloud::engine::plan_recorded;
use ballast::cloud::kinds::{
    auto_scaling_groups, iam, launch_templates, load_balancer, network, node_specs, routes,
    security_groups, subnets, volumes, ActualState,
};
use ballast::cloud::model::{cluster_model, ClusterModel, Source, StateLocation, VpcModel};
use ballast::cloud::plan::Kind;
use ballast_state::defaults::complete;
use ballast_state::document::{config_from_objects, parse_objects};
use ballast_state::spec::{ClusterConfig, Role};
use ballast_testutil::{blessing, check};

const STATE: &str = "s3://state/clusters";

fn cases() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&root)
        .expect("tests/data")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("spec.yaml").exists())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no cases in {}", root.display());
    cases
}

fn load(case: &Path) -> (ClusterConfig, ClusterModel) {
    let path = case.join("spec.yaml");
    let text = std::fs::read_to_string(&path).expect("spec.yaml");
    let name = path.display().to_string();
    let objects = parse_objects(&name, &text).expect("spec parses");
    let config = config_from_objects(&name, objects).expect("spec is a cluster");
    let completed = complete(&config);
    let state = StateLocation::from_url(STATE).expect("s3 url");
    let model = cluster_model(&completed, &state);
    (completed, model)
}

#[tokio::test]
async fn plans_match_their_golden_files() {
    let mut failures = Vec::new();
    for case in cases() {
        let (completed, model) = load(&case);
        let actual_path = case.join("actual.yaml");
        // A new case's starting state is written once, when blessing; an existing one is kept (it is input).
        if blessing() && !actual_path.exists() {
            let applied = applied_state(&model, &completed).await;
            let yaml = yaml_serde::to_string(&applied).expect("serialize actual state");
            std::fs::write(&actual_path, yaml).expect("write actual.yaml");
        }
        let text = std::fs::read_to_string(&actual_path).expect("actual.yaml");
        let actual: ActualState = yaml_serde::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", actual_path.display()));
        let got = match plan_recorded(&model, &completed, &actual).await {
            Ok(plan) => plan.to_string(),
            Err(e) => format!("error: {e}\n"),
        };
        if let Err(e) = check(&case.join("plan.txt"), &got) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The state a successful apply of the spec leaves, with made-up ids: what an in-sync case starts from.
async fn applied_state(model: &ClusterModel, completed: &ClusterConfig) -> ActualState {
    let mut state = ActualState::default();
    let (vpc_id, subnet_ids) = applied_network(model, &mut state);
    applied_routes(model, &mut state, &vpc_id, &subnet_ids);
    applied_security_and_iam(model, &mut state);
    applied_etcd_volumes(model, completed, &mut state);
    let (dns, target_group) = applied_load_balancer(model, &mut state);
    let rendered =
        node_specs::render(completed, model, &dns, &Default::default()).expect("node specs render");
    for (group, spec) in model.groups.iter().zip(&rendered) {
        state.node_specs.specs.insert(
            group.name.clone(),
            node_specs::StoredSpec {
                sha256: spec.sha256.clone(),
                version: None,
                registration: Some(node_specs::Registration::of_spec(spec)),
            },
        );
    }
    for group in &model.groups {
        if !group.image.starts_with("ami-") {
            state
                .launch_templates
                .images
                .insert(group.image.clone(), "ami-0123456789abcdef0".into());
        }
        let id = if group.image.starts_with("ami-") {
            group.image.clone()
        } else {
            "ami-0123456789abcdef0".to_string()
        };
        state
            .launch_templates
            .root_devices
            .insert(id, Some("/dev/xvda".into()));
    }

    // A launch template's default version holds what its plan line creates: planned against the state so far.
    let plan = plan_recorded(model, completed, &state)
        .await
        .expect("plan of the applied state");
    for group in &model.groups {
        let created = plan
            .changes
            .iter()
            .find(|c| c.kind == Kind::LaunchTemplate && c.name == group.resource_name)
            .expect("a launch template to create");
        state.launch_templates.templates.insert(
            group.resource_name.clone(),
            launch_templates::Template {
                id: format!("lt-{}", group.name),
                tags: BTreeMap::from([(GROUP_TAG.to_string(), group.name.clone())]),
                default_version: created
                    .fields
                    .iter()
                    .map(|f| (f.field.clone(), f.to.clone()))
                    .collect(),
            },
        );
        state.auto_scaling_groups.groups.insert(
            group.resource_name.clone(),
            auto_scaling_groups::AutoScalingGroup {
                min_size: Some(group.min_size),
                max_size: Some(group.max_size),
                desired_capacity: Some(group.min_size),
                subnets: group
                    .subnets
                    .iter()
                    .map(|s| subnet_ids[s].clone())
                    .collect::<Vec<_>>()
                    .join(","),
                launch_template_id: Some(format!("lt-{}", group.name)),
                target_groups: match group.role {
                    Role::ControlPlane | Role::ApiServer => vec![target_group.clone()],
                    Role::Node | Role::Bastion => Vec::new(),
                },
                tags: group.tags.clone(),
                mixed_policy: group.aws.mixed.as_ref().map(|p| p.summary()),
                protected_from_scale_in: group.aws.protect_from_scale_in,
                max_instance_lifetime: group.aws.max_instance_lifetime,
                load_balancer_names: group.aws.load_balancer_names.clone(),
            },
        );
        state
            .auto_scaling_groups
            .groups
            .get_mut(&group.resource_name)
            .expect("just inserted")
            .target_groups
            .extend(group.aws.target_group_arns.iter().cloned());
    }
    state
}

/// The VPC and subnets; returns the VPC id and the subnet ids by spec name.
fn applied_network(
    model: &ClusterModel,
    state: &mut ActualState,
) -> (String, BTreeMap<String, String>) {
    let cluster = &model.cluster;
    let owned = |name: &str| {
        BTreeMap::from([
            ("Name".to_string(), name.to_string()),
            (ownership_tag(cluster), "owned".to_string()),
        ])
    };
    let shared = BTreeMap::from([(ownership_tag(cluster), "shared".to_string())]);
    let vpc_id = match &model.vpc {
        VpcModel::Owned { cidr } => {
            state.network.owned.push(network::Vpc {
                id: "vpc-1".into(),
                cidr: cidr.clone(),
                tags: owned(cluster),
            });
            "vpc-1".to_string()
        }
        VpcModel::Shared { id } => {
            state.network.shared = Some(network::Vpc {
                id: id.clone(),
                cidr: "10.0.0.0/16".into(),
                tags: shared.clone(),
            });
            id.clone()
        }
    };

    let mut subnet_ids = BTreeMap::new();
    for subnet in &model.subnets {
        let (id, found) = match &subnet.shared_id {
            Some(id) => (id.clone(), &mut state.subnets.shared),
            None => (format!("subnet-{}", subnet.name), &mut state.subnets.owned),
        };
        let key = subnet
            .shared_id
            .clone()
            .unwrap_or(subnet.resource_name.clone());
        found.insert(
            key,
            subnets::Subnet {
                id: id.clone(),
                cidr: subnet.cidr.clone().unwrap_or_default(),
                zone: subnet.zone.clone(),
                tags: if subnet.shared_id.is_some() {
                    shared.clone()
                } else {
                    owned(&subnet.resource_name)
                },
            },
        );
        subnet_ids.insert(subnet.name.clone(), id);
    }

    (vpc_id, subnet_ids)
}

/// The internet gateway, NAT gateways and route tables.
fn applied_routes(
    model: &ClusterModel,
    state: &mut ActualState,
    vpc_id: &str,
    subnet_ids: &BTreeMap<String, String>,
) {
    let cluster = &model.cluster;
    let owned = |name: &str| {
        BTreeMap::from([
            ("Name".to_string(), name.to_string()),
            (ownership_tag(cluster), "owned".to_string()),
        ])
    };
    let ids_of = |names: Vec<&String>| names.into_iter().map(|n| subnet_ids[n].clone()).collect();
    if model.internet_gateway {
        state
            .routes
            .internet_gateways
            .push(routes::InternetGateway {
                id: "igw-1".into(),
                attached_to: vec![vpc_id.to_string()],
            });
        let public = model
            .subnets
            .iter()
            .filter(|s| s.public && s.shared_id.is_none())
            .map(|s| &s.name)
            .collect();
        state.routes.route_tables.insert(
            format!("public.{cluster}"),
            routes::RouteTable {
                id: "rtb-public".into(),
                routes: vec![routes::Route {
                    destination: "0.0.0.0/0".into(),
                    gateway_id: Some("igw-1".into()),
                    nat_gateway_id: None,
                }],
                associated_subnets: ids_of(public),
            },
        );
    }
    for zone in model.nat_zones() {
        let nat = format!("nat-{zone}");
        state.routes.nat_gateways.push(routes::NatGateway {
            id: nat.clone(),
            tags: owned(&format!("{zone}.{cluster}")),
        });
        let private = model
            .subnets
            .iter()
            .filter(|s| !s.public && s.shared_id.is_none() && s.zone == zone)
            .map(|s| &s.name)
            .collect();
        state.routes.route_tables.insert(
            format!("private-{zone}.{cluster}"),
            routes::RouteTable {
                id: format!("rtb-{zone}"),
                routes: vec![routes::Route {
                    destination: "0.0.0.0/0".into(),
                    gateway_id: None,
                    nat_gateway_id: Some(nat),
                }],
                associated_subnets: ids_of(private),
            },
        );
    }
}

/// Security groups with their rules, IAM roles, policies and profiles.
fn applied_security_and_iam(model: &ClusterModel, state: &mut ActualState) {
    let group_id = |role: Role| format!("sg-{}", role.tag_value());
    for group in &model.security_groups {
        let rules = group
            .rules
            .iter()
            .map(|rule| {
                let ports = (rule.protocol != "-1").then_some((rule.from_port, rule.to_port));
                let (cidr, group) = match &rule.source {
                    Source::Cidr(cidr) => (Some(cidr.clone()), None),
                    Source::Group(role) => (None, Some(group_id(*role))),
                };
                security_groups::Rule {
                    protocol: rule.protocol.clone(),
                    from_port: ports.map(|p| p.0),
                    to_port: ports.map(|p| p.1),
                    cidr,
                    group,
                }
            })
            .collect();
        state.security_groups.groups.insert(
            group.name.clone(),
            security_groups::SecurityGroup {
                id: group_id(group.role),
                rules,
            },
        );
    }
    for role in &model.roles {
        state.iam.roles.insert(
            role.name.clone(),
            iam::RoleActual {
                exists: true,
                trust_policy: Some(role.assume_role_policy.clone()),
                policy: Some(role.policy.clone()),
                profile: Some(iam::Profile {
                    arn: format!("arn:aws:iam::123456789012:instance-profile/{}", role.name),
                    roles: vec![role.name.clone()],
                }),
            },
        );
    }
}

/// One volume per etcd member, as the spec wants it.
fn applied_etcd_volumes(model: &ClusterModel, completed: &ClusterConfig, state: &mut ActualState) {
    for want in volumes::wanted(completed, model).expect("etcd volumes") {
        state.etcd_volumes.volumes.insert(
            want.member.clone(),
            vec![volumes::Volume {
                id: format!("vol-{}", want.member),
                zone: want.zone.clone(),
                size_gib: want.size_gib,
                volume_type: want.volume_type.clone(),
                iops: want.iops,
                throughput: want.throughput,
                encrypted: want.encrypted,
                tags: want.tags.clone(),
            }],
        );
    }
}

/// The load balancer, target group and listener; returns its DNS name and the target group ARN.
fn applied_load_balancer(model: &ClusterModel, state: &mut ActualState) -> (String, String) {
    let lb = &model.load_balancer;
    let target_group = format!("arn:aws:elasticloadbalancing:tg/{}", lb.target_group_name);
    let dns = format!("{}.elb.amazonaws.com", lb.name);
    state.load_balancer = load_balancer::Actual {
        load_balancer: Some(load_balancer::LoadBalancer {
            arn: format!("arn:aws:elasticloadbalancing:lb/{}", lb.name),
            dns_name: dns.clone(),
            scheme: if lb.internal {
                "internal"
            } else {
                "internet-facing"
            }
            .into(),
            security_groups: lb.security_groups.clone(),
        }),
        target_group: Some(target_group.clone()),
        listeners: vec![load_balancer::Listener {
            arn: "arn:aws:elasticloadbalancing:listener/443".into(),
            port: 443,
            forwards_to: vec![target_group.clone()],
        }],
    };
    (dns, target_group)
}
