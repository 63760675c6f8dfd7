//! `ballast import kops` on kops's own integration cases (kubernetes/kops, tests/integration/update_cluster/<case>/,
//! commit 268927e26409f861634e18f3632c9dd483c350cf): `tests/data/kops/<case>/in.yaml` holds the case's fields and
//! values, `expected.yaml` the facts read from kops's `kubernetes.tf` for that case. Each case either imports,
//! passes Ballast's validation and plans, and its completed spec and plan model agree with kops's Terraform field
//! by field (with the documented differences each asserted as such), or is refused naming its kops fields. The
//! real binary is run on one importing and one refused case against a file store: a refusal writes nothing.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ballast::cloud::model::{cluster_model, StateLocation, VpcModel};
use ballast::cloud::to_terraform::render_terraform;
use ballast::import::kops::{import, parse_documents, Choices, Fate, Import};
use ballast_state::defaults::complete;
use ballast_state::keyset::NodeKeys;
use ballast_state::spec::Networking;
use ballast_state::validate::validate;
use serde::Deserialize;

/// The choices a kops user makes on the command line for every case: the CNI where kops says `cni: {}`, Ballast's
/// image, and no public IPs (Ballast sets none). Each shows as `replaced` in the fate table.
const CHOICES: Choices = Choices {
    networking: Some(Networking::Cilium),
    ballast_images: true,
    no_public_ips: false,
};

/// Every case's outcome: imported, or refused with these kops fields (object and path) among the refusals.
fn outcomes() -> BTreeMap<&'static str, Option<Vec<&'static str>>> {
    let refused = |fields: &[&'static str]| Some(fields.to_vec());
    BTreeMap::from([
        ("minimal-1.33", None),
        ("minimal-dns-none", None),
        ("ha", None),
        ("shared_vpc", None),
        ("shared_subnet", None),
        ("containerd", None),
        ("minimal-aws", None),
        ("minimal-gp3", None),
        (
            "complex",
            refused(&[
                "Cluster/complex.example.com spec.subnets[1].egress",
                "Cluster/complex.example.com spec.additionalNetworkCIDRs",
                // Its `volumes` map since extra volumes are built (docs/kops.md); validation then refuses their
                // device /dev/xvdd, an instance store's name.
                "InstanceGroup/nodes spec.additionalUserData",
            ]),
        ),
        ("privatecilium", None),
        ("privatecalico", None),
        (
            "existing_iam",
            refused(&["InstanceGroup/master-us-test-1a spec.iam.profile"]),
        ),
        (
            "irsa",
            refused(&["Cluster/minimal.example.com spec.certManager"]),
        ),
        ("mixed_instances", None),
        (
            "many-addons",
            refused(&[
                "Cluster/many-addons.example.com spec.nonMasqueradeCIDR",
                "Cluster/many-addons.example.com spec.clusterAutoscaler.podAnnotations",
            ]),
        ),
        (
            "aws-lb-controller",
            refused(&["Cluster/minimal.example.com spec.awsLoadBalancerController"]),
        ),
        ("cluster-autoscaler-priority-expander", None),
        ("nth-imds-processor", None),
        (
            "minimal-ipv6",
            refused(&["Cluster/minimal-ipv6.example.com spec.subnets[0].ipv6CIDR"]),
        ),
        (
            "privateflannel",
            refused(&["Cluster/privateflannel.example.com spec.networking.flannel"]),
        ),
        ("externallb", None),
        ("apiservernodes", None),
    ])
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Expected {
    source: Source,
    #[serde(rename = "vpcCIDR")]
    vpc_cidr: Option<String>,
    subnets: Vec<ExpectedSubnet>,
    groups: Vec<ExpectedGroup>,
    api_load_balancer: Option<ExpectedLoadBalancer>,
    etcd_main_volumes: Vec<ExpectedVolume>,
}

#[derive(Debug, Deserialize)]
struct Source {
    repository: String,
    path: String,
    commit: String,
}

#[derive(Debug, Deserialize)]
struct ExpectedSubnet {
    name: String,
    cidr: String,
    zone: String,
    #[serde(rename = "type")]
    subnet_type: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExpectedGroup {
    name: String,
    min_size: i32,
    max_size: i32,
    instance_type: String,
    root_volume_size: i32,
    root_volume_type: String,
    root_volume_encrypted: bool,
    /// The root volume's IOPS and throughput kops renders (compared where listed).
    #[serde(default)]
    root_volume_iops: Option<u32>,
    #[serde(default)]
    root_volume_throughput: Option<u32>,
    http_tokens: String,
    associate_public_ip: bool,
    /// kops's `k8s.io/cluster-autoscaler/*` tags on the group's Auto Scaling group (compared where listed), and
    /// whether kops's autoscaler sizes it (its add-on's `--nodes` flags).
    #[serde(default)]
    autoscaler_tags: Option<BTreeMap<String, String>>,
    #[serde(default)]
    autoscaled: bool,
    /// The Auto Scaling group's mixed instances policy, where kops writes one.
    #[serde(default)]
    mixed_instances_policy: Option<ExpectedPolicy>,
    #[serde(default)]
    protect_from_scale_in: bool,
    /// Seconds (kops's `max_instance_lifetime`); 0 where kops writes none.
    #[serde(default)]
    max_instance_lifetime: i32,
    /// Classic load balancers (`load_balancers`) and the operator's target groups (`target_group_arns`).
    #[serde(default)]
    load_balancers: Vec<String>,
    #[serde(default)]
    target_group_arns: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExpectedPolicy {
    instance_types: Vec<String>,
    on_demand_above_base: i32,
    spot_instance_pools: i32,
}

#[derive(Debug, Deserialize)]
struct ExpectedLoadBalancer {
    #[serde(rename = "type")]
    lb_type: String,
    internal: bool,
}

#[derive(Debug, Deserialize)]
struct ExpectedVolume {
    encrypted: bool,
    size: u32,
    #[serde(rename = "type")]
    volume_type: String,
    /// The IOPS and throughput kops renders (compared where listed).
    #[serde(default)]
    iops: Option<u32>,
    #[serde(default)]
    throughput: Option<u32>,
}

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kops")
}

fn import_case(case: &str, choices: Choices) -> Import {
    let path = data().join(case).join("in.yaml");
    let text = std::fs::read_to_string(&path).expect("in.yaml");
    let documents = parse_documents(&path.display().to_string(), &text).expect("parses");
    import(&documents, choices)
}

/// The refused fields of a case, as `object path`: the mapping's refusals, or Ballast's validation errors of the
/// mapped spec (the same gate `import kops` passes before writing).
fn refusals(imported: &Import) -> Vec<String> {
    match &imported.config {
        None => imported
            .refused()
            .map(|f| format!("{} {}", f.object, f.path))
            .collect(),
        Some(config) => validate(&complete(config))
            .iter()
            .map(|e| format!("{} {}", e.object, e.path))
            .collect(),
    }
}

#[test]
fn every_case_imports_and_agrees_with_kops_or_is_refused_by_field() {
    let outcomes = outcomes();
    let mut cases: Vec<String> = std::fs::read_dir(data())
        .expect("tests/data/kops")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    assert_eq!(cases.len(), 22, "the 22 cases of issue 30");
    let mut imported_count = 0;
    let mut failures = Vec::new();
    for case in &cases {
        let expected_outcome = outcomes
            .get(case.as_str())
            .unwrap_or_else(|| panic!("{case}: no outcome listed"));
        let imported = import_case(case, CHOICES);
        let refused = refusals(&imported);
        match expected_outcome {
            Some(fields) => {
                if refused.is_empty() {
                    failures.push(format!("{case}: imported, but it is listed as refused"));
                }
                for field in fields {
                    if !refused.iter().any(|r| r == field) {
                        failures.push(format!("{case}: {field} not refused; refused: {refused:?}"));
                    }
                }
                for fate in imported.refused() {
                    if fate.path.is_empty() || fate.fate.detail().is_empty() {
                        failures.push(format!(
                            "{case}: a refusal without a field or a reason: {fate:?}"
                        ));
                    }
                }
            }
            None => {
                if !refused.is_empty() {
                    failures.push(format!("{case}: refused {refused:?}"));
                    continue;
                }
                imported_count += 1;
                failures.extend(
                    compare(case, &imported)
                        .into_iter()
                        .map(|d| format!("{case}: {d}")),
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        imported_count,
        outcomes.values().filter(|o| o.is_none()).count()
    );
}

/// Compares a case's completed spec and plan model with kops's Terraform facts. Returns the disagreements.
/// Records a disagreement between kops's value and Ballast's.
/// IOPS and throughput as a volume has them: what Ballast sets, or where it sets none, what AWS gives the type
/// (gp3's baseline), which kops writes out.
fn performance(volume_type: &str, iops: Option<u32>, throughput: Option<u32>) -> String {
    format!(
        "{:?}",
        ballast_state::ebs::effective(volume_type, iops, throughput)
    )
}

/// A number read back from Terraform's JSON, if any.
fn tf_number(value: Option<&serde_json::Value>) -> Option<u32> {
    value
        .and_then(|v| v.as_u64())
        .and_then(|v| u32::try_from(v).ok())
}

fn differ(out: &mut Vec<String>, what: String, kops: String, ballast: String) {
    if kops != ballast {
        out.push(format!("{what}: kops {kops}, Ballast {ballast}"));
    }
}

fn compare(case: &str, imported: &Import) -> Vec<String> {
    let text =
        std::fs::read_to_string(data().join(case).join("expected.yaml")).expect("expected.yaml");
    let expected: Expected = yaml_serde::from_str(&text).expect("expected.yaml parses");
    assert_eq!(expected.source.repository, "kubernetes/kops");
    assert_eq!(
        expected.source.commit,
        "268927e26409f861634e18f3632c9dd483c350cf"
    );
    assert!(expected
        .source
        .path
        .ends_with(&format!("{case}/kubernetes.tf")));
    let config = imported.config.as_ref().expect("imported");
    let completed = complete(config);
    let model = cluster_model(
        &completed,
        &StateLocation::from_url("s3://state/clusters").expect("s3 url"),
    );
    let mut out = Vec::new();
    // The VPC either makes: kops's Terraform has none for a shared VPC, and Ballast's model shares it then.
    let vpc = match &model.vpc {
        VpcModel::Owned { cidr } => Some(cidr.clone()),
        VpcModel::Shared { .. } => None,
    };
    differ(
        &mut out,
        "VPC CIDR".into(),
        format!("{:?}", expected.vpc_cidr),
        format!("{vpc:?}"),
    );
    // The subnets each makes (shared ones are in neither's resources).
    let ours: BTreeMap<String, (String, String, bool)> = model
        .subnets
        .iter()
        .filter(|s| s.shared_id.is_none())
        .map(|s| {
            (
                s.name.clone(),
                (s.cidr.clone().unwrap_or_default(), s.zone.clone(), s.public),
            )
        })
        .collect();
    let theirs: BTreeMap<String, (String, String, bool)> = expected
        .subnets
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                (s.cidr.clone(), s.zone.clone(), s.subnet_type != "Private"),
            )
        })
        .collect();
    differ(
        &mut out,
        "subnets (cidr, zone, public)".into(),
        format!("{theirs:?}"),
        format!("{ours:?}"),
    );
    // Each group.
    for group in &expected.groups {
        let Some(ours) = model.groups.iter().find(|g| g.name == group.name) else {
            out.push(format!("group {}: not in Ballast's plan", group.name));
            continue;
        };
        let g = &group.name;
        compare_autoscaler_tags(&mut out, g, group, ours);
        differ(
            &mut out,
            format!("{g} instance type"),
            group.instance_type.clone(),
            ours.machine_type.clone(),
        );
        differ(
            &mut out,
            format!("{g} min size"),
            group.min_size.to_string(),
            ours.min_size.to_string(),
        );
        differ(
            &mut out,
            format!("{g} max size"),
            group.max_size.to_string(),
            ours.max_size.to_string(),
        );
        differ(
            &mut out,
            format!("{g} root volume size"),
            group.root_volume_size.to_string(),
            ours.root_volume_size.to_string(),
        );
        differ(
            &mut out,
            format!("{g} root volume type"),
            group.root_volume_type.clone(),
            ours.root_volume_type.clone(),
        );
        differ(
            &mut out,
            format!("{g} root volume encrypted"),
            group.root_volume_encrypted.to_string(),
            ours.root_volume_encrypted.to_string(),
        );
        if group.root_volume_iops.is_some() || group.root_volume_throughput.is_some() {
            differ(
                &mut out,
                format!("{g} root volume (iops, throughput)"),
                format!(
                    "{:?}",
                    (group.root_volume_iops, group.root_volume_throughput)
                ),
                performance(
                    &ours.root_volume_type,
                    ours.root_volume_iops.map(|v| v as u32),
                    ours.root_volume_throughput.map(|v| v as u32),
                ),
            );
        }
        differ(
            &mut out,
            format!("{g} IMDSv2 http_tokens"),
            group.http_tokens.clone(),
            if ours.http_tokens_required {
                "required"
            } else {
                "optional"
            }
            .to_string(),
        );
        differ(
            &mut out,
            format!("{g} associate_public_ip_address"),
            group.associate_public_ip.to_string(),
            ours.aws.public_ip.to_string(),
        );
        differ(
            &mut out,
            format!("{g} mixed instances policy"),
            format!(
                "{:?}",
                group.mixed_instances_policy.as_ref().map(|p| (
                    p.instance_types.clone(),
                    p.on_demand_above_base,
                    p.spot_instance_pools
                ))
            ),
            format!(
                "{:?}",
                ours.aws.mixed.as_ref().map(|p| (
                    p.instance_types.clone(),
                    p.on_demand_above_base,
                    p.spot_instance_pools.unwrap_or(0)
                ))
            ),
        );
        differ(
            &mut out,
            format!("{g} protect_from_scale_in"),
            group.protect_from_scale_in.to_string(),
            ours.aws.protect_from_scale_in.to_string(),
        );
        differ(
            &mut out,
            format!("{g} max_instance_lifetime"),
            group.max_instance_lifetime.to_string(),
            ours.aws.max_instance_lifetime.to_string(),
        );
        let mut lbs = group.load_balancers.clone();
        lbs.sort();
        differ(
            &mut out,
            format!("{g} load_balancers"),
            format!("{lbs:?}"),
            format!("{:?}", ours.aws.load_balancer_names),
        );
        let mut tgs = group.target_group_arns.clone();
        tgs.sort();
        differ(
            &mut out,
            format!("{g} target_group_arns (the operator's)"),
            format!("{tgs:?}"),
            format!("{:?}", ours.aws.target_group_arns),
        );
    }
    let mut ours: Vec<&str> = model.groups.iter().map(|g| g.name.as_str()).collect();
    ours.sort();
    let mut theirs: Vec<&str> = expected.groups.iter().map(|g| g.name.as_str()).collect();
    theirs.sort();
    differ(
        &mut out,
        "groups".into(),
        format!("{theirs:?}"),
        format!("{ours:?}"),
    );
    // The API's load balancer: Ballast's is always a network load balancer. Where kops's Terraform has none (its
    // API by DNS records of the control-plane instances), that difference is documented and asserted as such.
    let ours_lb = ("network".to_string(), model.load_balancer.internal);
    match &expected.api_load_balancer {
        Some(lb) => differ(
            &mut out,
            "API load balancer (type, internal)".into(),
            format!("{:?}", (lb.lb_type.clone(), lb.internal)),
            format!("{ours_lb:?}"),
        ),
        None => {
            if ours_lb != ("network".to_string(), false) {
                out.push(format!("kops has no API load balancer; Ballast's should be a public NLB, is {ours_lb:?}"));
            }
        }
    }
    // etcd's main volumes: one per member, encrypted as kops made them, same size and type.
    let etcd = completed.cluster.spec.etcd.clone().unwrap_or_default();
    differ(
        &mut out,
        "etcd members".into(),
        expected.etcd_main_volumes.len().to_string(),
        etcd.members.len().to_string(),
    );
    for volume in &expected.etcd_main_volumes {
        differ(
            &mut out,
            "etcd volume encrypted".into(),
            volume.encrypted.to_string(),
            format!("{}", etcd.encrypted_volume.unwrap_or(true)),
        );
        differ(
            &mut out,
            "etcd volume size".into(),
            volume.size.to_string(),
            format!("{}", etcd.volume_size.unwrap_or(0)),
        );
        differ(
            &mut out,
            "etcd volume type".into(),
            volume.volume_type.clone(),
            etcd.volume_type.clone().unwrap_or_default(),
        );
        if volume.iops.is_some() || volume.throughput.is_some() {
            differ(
                &mut out,
                "etcd volume (iops, throughput)".into(),
                format!("{:?}", (volume.iops, volume.throughput)),
                performance(
                    etcd.volume_type.as_deref().unwrap_or_default(),
                    etcd.volume_iops,
                    etcd.volume_throughput,
                ),
            );
        }
    }
    out
}

/// Labels kops's own controllers put on its nodes (kops-controller's PKI label and the node-role labels it sets,
/// which a kubelet may not set on itself); Ballast's nodes carry none of them, so its node-template tags do not
/// either: the documented difference.
const KOPS_ONLY_LABELS: [&str; 4] = [
    "kops.k8s.io/kops-controller-pki",
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/node",
    "node.kubernetes.io/exclude-from-external-load-balancers",
];

/// The cluster autoscaler's tags of one group against kops's: kops names its autoscaled groups in the add-on's
/// `--nodes` flags and renders no discovery tag, Ballast's discovery tags must be on exactly those groups; every
/// node-template tag kops renders is Ballast's too with the same value, but for the labels only kops's own
/// controllers set.
fn compare_autoscaler_tags(
    out: &mut Vec<String>,
    g: &str,
    group: &ExpectedGroup,
    ours: &ballast::cloud::model::GroupModel,
) {
    let Some(kops) = &group.autoscaler_tags else {
        return;
    };
    let discovered = ours
        .autoscaler_tags
        .contains_key(ballast_state::autoscaler::ENABLED_TAG);
    differ(
        out,
        format!("{g} sized by the autoscaler"),
        group.autoscaled.to_string(),
        discovered.to_string(),
    );
    for (key, value) in kops {
        let label = key.strip_prefix(ballast_state::autoscaler::NODE_TEMPLATE_LABEL_PREFIX);
        if label.is_some_and(|l| KOPS_ONLY_LABELS.contains(&l)) {
            if ours.autoscaler_tags.contains_key(key) {
                out.push(format!(
                    "{g}: Ballast's nodes do not carry kops's {key}, yet it is tagged"
                ));
            }
            continue;
        }
        differ(
            out,
            format!("{g} tag {key}"),
            value.clone(),
            ours.autoscaler_tags
                .get(key)
                .cloned()
                .unwrap_or_else(|| "(none)".into()),
        );
    }
}

#[test]
fn irsa_s_issuer_discovery_and_service_account_permissions_are_mapped() {
    let imported = import_case("irsa", CHOICES);
    for path in [
        "spec.serviceAccountIssuerDiscovery",
        "spec.iam.serviceAccountExternalPermissions",
        "spec.podIdentityWebhook.enabled",
    ] {
        let fate = imported
            .fields
            .iter()
            .find(|f| f.path == path)
            .unwrap_or_else(|| panic!("{path}: no fate"));
        assert!(matches!(fate.fate, Fate::Mapped(_)), "{path}: {fate:?}");
    }
}

#[test]
fn without_the_choices_kops_leaves_open_the_import_is_refused_naming_them() {
    let imported = import_case("minimal-1.33", Choices::default());
    assert!(imported.config.is_none());
    let refused: Vec<String> = imported
        .refused()
        .map(|f| format!("{} {}", f.object, f.path))
        .collect();
    for field in [
        "Cluster/minimal.example.com spec.networking.cni",
        "InstanceGroup/nodes spec.image",
        "InstanceGroup/master-us-test-1a spec.image",
    ] {
        assert!(
            refused.iter().any(|r| r == field),
            "{field} not in {refused:?}"
        );
    }
}

#[test]
fn a_refused_import_writes_nothing_and_an_accepted_one_stores_the_cluster() {
    let env = common::TempStore::new();
    let refused = data().join("privateflannel/in.yaml");
    let before = env.snapshot();
    env.ballast()
        .args([
            "import",
            "kops",
            "--ballast-images",
            "--no-public-ips",
            "-f",
        ])
        .arg(&refused)
        .assert()
        .code(3)
        .stderr(predicates::str::contains(
            "Cluster/privateflannel.example.com: spec.networking.flannel",
        ));
    assert_eq!(env.snapshot(), before, "a refused import changed the store");

    let accepted = data().join("ha/in.yaml");
    env.ballast()
        .args([
            "import",
            "kops",
            "--networking",
            "calico",
            "--ballast-images",
            "--no-public-ips",
            "-f",
        ])
        .arg(&accepted)
        .assert()
        .success();
    env.ballast()
        .args(["get", "ig", "--name", "ha.example.com"])
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "master-us-test-1c   ControlPlane   m3.medium     1     1     us-test-1c",
        ));
}

#[test]
fn dry_run_prints_the_spec_and_every_fields_fate_and_writes_nothing() {
    let env = common::TempStore::new();
    let before = env.snapshot();
    let output = env
        .ballast()
        .args([
            "import",
            "kops",
            "--dry-run",
            "--networking",
            "cilium",
            "--ballast-images",
            "--no-public-ips",
            "-f",
        ])
        .arg(data().join("minimal-1.33/in.yaml"))
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in [
        "apiVersion: ballast.dev/v1alpha1",
        "kubernetesVersion: 1.33.4",
        "spec.channel",
        "dropped",
        "replaced",
        "spec.etcdClusters[1].name",
    ] {
        assert!(stdout.contains(line), "{line:?} not in\n{stdout}");
    }
    assert_eq!(env.snapshot(), before);
}

/// The importing cases rendered as Terraform (`update cluster --target terraform`'s render: no AWS call) and read
/// back from the HCL text, compared with kops's `kubernetes.tf` facts: what the issue asks to compare.
#[tokio::test]
async fn the_imported_cases_terraform_agrees_with_kops_s() {
    let mut failures = Vec::new();
    for (case, outcome) in outcomes() {
        if outcome.is_some() {
            continue;
        }
        let imported = import_case(case, CHOICES);
        let completed = complete(imported.config.as_ref().expect("imports"));
        let model = cluster_model(
            &completed,
            &StateLocation::from_url("s3://state/clusters").expect("s3 url"),
        );
        // The API's DNS name is what Terraform learns once it has made the load balancer; the launch templates
        // wait for it otherwise.
        let rendered = render_terraform(
            &model,
            &completed,
            Some("api.example.invalid"),
            &NodeKeys::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
        let resources = read_resources(&rendered.files);
        failures.extend(
            compare_terraform(case, &resources)
                .into_iter()
                .map(|d| format!("{case} (Terraform): {d}")),
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every resource body of the rendered files, by type.
fn read_resources(files: &[(String, String)]) -> BTreeMap<String, Vec<serde_json::Value>> {
    let mut out: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
    for (name, text) in files {
        let value: serde_json::Value =
            hcl::from_str(text).unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
        let Some(resources) = value.get("resource").and_then(|r| r.as_object()) else {
            continue;
        };
        for (kind, by_name) in resources {
            for body in by_name.as_object().into_iter().flat_map(|m| m.values()) {
                out.entry(kind.clone()).or_default().push(body.clone());
            }
        }
    }
    out
}

fn text(value: Option<&serde_json::Value>) -> String {
    match value {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => "(unset)".into(),
    }
}

/// The first object of a nested block (HCL blocks read back as an object, or a list of them when repeated).
fn block<'a>(value: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    match value.get(name)? {
        serde_json::Value::Array(items) => items.first(),
        other => Some(other),
    }
}

fn compare_terraform(
    case: &str,
    resources: &BTreeMap<String, Vec<serde_json::Value>>,
) -> Vec<String> {
    let text_of =
        std::fs::read_to_string(data().join(case).join("expected.yaml")).expect("expected.yaml");
    let expected: Expected = yaml_serde::from_str(&text_of).expect("expected.yaml parses");
    let none = Vec::new();
    let of = |kind: &str| resources.get(kind).unwrap_or(&none);
    let mut out = Vec::new();
    let vpcs: Vec<String> = of("aws_vpc")
        .iter()
        .map(|v| text(v.get("cidr_block")))
        .collect();
    let kops_vpcs: Vec<String> = expected.vpc_cidr.iter().cloned().collect();
    differ(
        &mut out,
        "VPC CIDRs".into(),
        format!("{kops_vpcs:?}"),
        format!("{vpcs:?}"),
    );
    let mut subnets: Vec<(String, String, bool)> = of("aws_subnet")
        .iter()
        .map(|s| {
            let public = s
                .get("tags")
                .and_then(|t| t.get("kubernetes.io/role/elb"))
                .is_some();
            (
                text(s.get("cidr_block")),
                text(s.get("availability_zone")),
                public,
            )
        })
        .collect();
    subnets.sort();
    let mut kops_subnets: Vec<(String, String, bool)> = expected
        .subnets
        .iter()
        .map(|s| (s.cidr.clone(), s.zone.clone(), s.subnet_type != "Private"))
        .collect();
    kops_subnets.sort();
    differ(
        &mut out,
        "subnets (cidr, zone, public)".into(),
        format!("{kops_subnets:?}"),
        format!("{subnets:?}"),
    );
    for group in &expected.groups {
        let g = &group.name;
        let tagged = |body: &&serde_json::Value| {
            body.get("tags")
                .and_then(|t| t.get("ballast.dev/instance-group"))
                .and_then(|v| v.as_str())
                == Some(g.as_str())
        };
        let Some(template) = of("aws_launch_template").iter().find(tagged) else {
            out.push(format!("{g}: no launch template"));
            continue;
        };
        differ(
            &mut out,
            format!("{g} instance type"),
            group.instance_type.clone(),
            text(template.get("instance_type")),
        );
        let ebs = block(template, "block_device_mappings").and_then(|b| block(b, "ebs"));
        differ(
            &mut out,
            format!("{g} root volume size"),
            group.root_volume_size.to_string(),
            text(ebs.and_then(|e| e.get("volume_size"))),
        );
        differ(
            &mut out,
            format!("{g} root volume type"),
            group.root_volume_type.clone(),
            text(ebs.and_then(|e| e.get("volume_type"))),
        );
        differ(
            &mut out,
            format!("{g} root volume encrypted"),
            group.root_volume_encrypted.to_string(),
            text(ebs.and_then(|e| e.get("encrypted"))),
        );
        if group.root_volume_iops.is_some() || group.root_volume_throughput.is_some() {
            differ(
                &mut out,
                format!("{g} root volume (iops, throughput)"),
                format!(
                    "{:?}",
                    (group.root_volume_iops, group.root_volume_throughput)
                ),
                performance(
                    &text(ebs.and_then(|e| e.get("volume_type"))),
                    tf_number(ebs.and_then(|e| e.get("iops"))),
                    tf_number(ebs.and_then(|e| e.get("throughput"))),
                ),
            );
        }
        let interface = block(template, "network_interfaces");
        differ(
            &mut out,
            format!("{g} associate_public_ip_address"),
            group.associate_public_ip.to_string(),
            text(interface.and_then(|n| n.get("associate_public_ip_address"))),
        );
        let metadata = block(template, "metadata_options");
        differ(
            &mut out,
            format!("{g} http_tokens"),
            group.http_tokens.clone(),
            text(metadata.and_then(|m| m.get("http_tokens"))),
        );
        let asg = of("aws_autoscaling_group").iter().find(|a| {
            text(a.get("name")).starts_with(&format!("{g}."))
                || a.get("tag").and_then(|t| t.as_array()).is_some_and(|tags| {
                    tags.iter().any(|t| {
                        text(t.get("key")) == "ballast.dev/instance-group"
                            && text(t.get("value")) == *g
                    })
                })
        });
        match asg {
            Some(asg) => {
                differ(
                    &mut out,
                    format!("{g} min size"),
                    group.min_size.to_string(),
                    text(asg.get("min_size")),
                );
                differ(
                    &mut out,
                    format!("{g} max size"),
                    group.max_size.to_string(),
                    text(asg.get("max_size")),
                );
                differ(
                    &mut out,
                    format!("{g} protect_from_scale_in"),
                    if group.protect_from_scale_in {
                        "true"
                    } else {
                        "(unset)"
                    }
                    .to_string(),
                    text(asg.get("protect_from_scale_in")),
                );
                let distribution = block(asg, "mixed_instances_policy")
                    .and_then(|p| block(p, "instances_distribution"));
                differ(
                    &mut out,
                    format!("{g} on_demand_percentage_above_base_capacity"),
                    group
                        .mixed_instances_policy
                        .as_ref()
                        .map_or("(unset)".to_string(), |p| {
                            p.on_demand_above_base.to_string()
                        }),
                    text(
                        distribution
                            .and_then(|d| d.get("on_demand_percentage_above_base_capacity")),
                    ),
                );
                differ(
                    &mut out,
                    format!("{g} load_balancers"),
                    if group.load_balancers.is_empty() {
                        "(unset)".to_string()
                    } else {
                        let mut lbs = group.load_balancers.clone();
                        lbs.sort();
                        serde_json::to_string(&lbs).unwrap_or_default()
                    },
                    text(asg.get("load_balancers")),
                );
            }
            None => out.push(format!("{g}: no Auto Scaling group")),
        }
    }
    let lbs: Vec<(String, String)> = of("aws_lb")
        .iter()
        .map(|lb| (text(lb.get("load_balancer_type")), text(lb.get("internal"))))
        .collect();
    // Where kops has no API load balancer (DNS records instead), Ballast's public NLB is the documented difference.
    let kops_lbs = match &expected.api_load_balancer {
        Some(lb) => vec![(lb.lb_type.clone(), lb.internal.to_string())],
        None => vec![("network".to_string(), "false".to_string())],
    };
    differ(
        &mut out,
        "API load balancer (type, internal)".into(),
        format!("{kops_lbs:?}"),
        format!("{lbs:?}"),
    );
    // IOPS and throughput are compared where expected.yaml lists them (as kops renders them).
    let listed = expected
        .etcd_main_volumes
        .iter()
        .any(|v| v.iops.is_some() || v.throughput.is_some());
    let mut volumes: Vec<(String, String, String, String)> = of("aws_ebs_volume")
        .iter()
        .map(|v| {
            let volume_type = text(v.get("type"));
            let performance = if listed {
                performance(
                    &volume_type,
                    tf_number(v.get("iops")),
                    tf_number(v.get("throughput")),
                )
            } else {
                String::new()
            };
            (
                text(v.get("encrypted")),
                text(v.get("size")),
                volume_type,
                performance,
            )
        })
        .collect();
    volumes.sort();
    let mut kops_volumes: Vec<(String, String, String, String)> = expected
        .etcd_main_volumes
        .iter()
        .map(|v| {
            (
                v.encrypted.to_string(),
                v.size.to_string(),
                v.volume_type.clone(),
                if listed {
                    format!("{:?}", (v.iops, v.throughput))
                } else {
                    String::new()
                },
            )
        })
        .collect();
    kops_volumes.sort();
    differ(
        &mut out,
        "etcd volumes (encrypted, size, type, (iops, throughput))".into(),
        format!("{kops_volumes:?}"),
        format!("{volumes:?}"),
    );
    out
}

#[test]
fn the_cluster_and_its_groups_may_come_in_separate_files() {
    let env = common::TempStore::new();
    let text = std::fs::read_to_string(data().join("ha/in.yaml")).expect("in.yaml");
    let (cluster, groups) = text.split_once("\n---\n").expect("several documents");
    let cluster = env.write("cluster.yaml", cluster);
    let groups = env.write("groups.yaml", groups);
    env.ballast()
        .args([
            "import",
            "kops",
            "--dry-run",
            "--networking",
            "cilium",
            "--ballast-images",
            "--no-public-ips",
            "-f",
        ])
        .arg(&cluster)
        .arg("-f")
        .arg(&groups)
        .assert()
        .success()
        .stdout(predicates::str::contains("name: master-us-test-1c"));
    // The groups alone name no cluster: refused, nothing written.
    let before = env.snapshot();
    env.ballast()
        .args([
            "import",
            "kops",
            "--ballast-images",
            "--no-public-ips",
            "-f",
        ])
        .arg(&groups)
        .assert()
        .code(3)
        .stderr(predicates::str::contains("no kops Cluster"));
    assert_eq!(env.snapshot(), before);
}

/// Terminal escape sequences in kops's field names and label keys (a title change, a screen clear, a colour) reach
/// neither the fate table nor the errors raw: each is printed escaped (`\u{1b}`), and no ESC or BEL byte is
/// written at all, on stdout or stderr.
#[test]
fn escape_sequences_in_kops_names_are_printed_escaped() {
    let env = common::TempStore::new();
    let text = std::fs::read_to_string(data().join("minimal-1.33/in.yaml")).expect("in.yaml");
    let hostile = text
        .replacen(
            "  channel: stable\n",
            "  channel: stable\n  \"evil\\e]0;pwned\\a\": 1\n",
            1,
        )
        .replacen(
            "    kops.k8s.io/cluster: minimal.example.com\n  name: nodes\n",
            "    kops.k8s.io/cluster: minimal.example.com\n    \"team\\e[2J\": core\n  name: nodes\n",
            1,
        );
    assert_ne!(hostile, text, "the hostile keys were inserted");
    let file = env.write("hostile.yaml", &hostile);
    let before = env.snapshot();
    for dry_run in [true, false] {
        let mut cmd = env.ballast();
        cmd.args([
            "import",
            "kops",
            "--networking",
            "cilium",
            "--ballast-images",
        ]);
        if dry_run {
            cmd.arg("--dry-run");
        }
        let output = cmd.arg("-f").arg(&file).output().expect("runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{stderr}");
        for (name, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
            assert!(
                !bytes.iter().any(|b| *b == 0x1b || *b == 0x07),
                "dry run {dry_run}: a raw escape byte on {name}:\n{}",
                String::from_utf8_lossy(bytes).escape_debug()
            );
        }
        assert!(
            stderr.contains(r"Cluster/minimal.example.com: spec.evil\u{1b}]0;pwned\u{7}:"),
            "dry run {dry_run}: {stderr}"
        );
        if dry_run {
            assert!(
                stdout.contains(r"spec.evil\u{1b}]0;pwned\u{7}"),
                "the fate table: {stdout}"
            );
        }
    }
    assert_eq!(env.snapshot(), before, "a refused import changed the store");
}

/// `import kops --dry-run` runs the same checks as the import up to the write: a kops spec every field of which
/// maps, but whose Ballast spec breaks Ballast's rules (a group name, an API access CIDR, a label), fails the dry
/// run with the same exit code and errors as the import, and `--name` naming another cluster is refused by both.
#[test]
fn the_dry_run_refuses_what_the_import_refuses() {
    let env = common::TempStore::new();
    let text = std::fs::read_to_string(data().join("minimal-1.33/in.yaml")).expect("in.yaml");
    let cases = [
        ("a bad group name", text.replacen("  name: nodes\n", "  name: Nodes_1\n", 1)),
        (
            "a bad label",
            text.replacen(
                "    kops.k8s.io/cluster: minimal.example.com\n  name: nodes\n",
                "    kops.k8s.io/cluster: minimal.example.com\n    \"two words\": x\n  name: nodes\n",
                1,
            ),
        ),
    ];
    let before = env.snapshot();
    for (what, spec) in &cases {
        assert_ne!(spec, &text, "{what}: the change was made");
        let file = env.write("case.yaml", spec);
        let run = |dry_run: bool| {
            let mut cmd = env.ballast();
            cmd.args([
                "import",
                "kops",
                "--networking",
                "cilium",
                "--ballast-images",
            ]);
            if dry_run {
                cmd.arg("--dry-run");
            }
            cmd.arg("-f").arg(&file).output().expect("runs")
        };
        let (dry, real) = (run(true), run(false));
        let (dry_err, real_err) = (
            String::from_utf8_lossy(&dry.stderr),
            String::from_utf8_lossy(&real.stderr),
        );
        assert_eq!(
            real.status.code(),
            Some(3),
            "{what}: the import: {real_err}"
        );
        assert_eq!(dry.status.code(), Some(3), "{what}: the dry run: {dry_err}");
        let error = |stderr: &str| {
            stderr
                .lines()
                .skip_while(|l| !l.starts_with("error: "))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(error(&dry_err), error(&real_err), "{what}");
    }
    let mismatched = env.write("case.yaml", &text);
    for dry_run in [true, false] {
        let mut cmd = env.ballast();
        cmd.args([
            "import",
            "kops",
            "--networking",
            "cilium",
            "--ballast-images",
        ]);
        if dry_run {
            cmd.arg("--dry-run");
        }
        cmd.args(["--name", "other.example.com", "-f"])
            .arg(&mismatched)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(
                "--name \"other.example.com\" differs from the kops cluster's name",
            ));
    }
    assert_eq!(env.snapshot(), before, "a refused import changed the store");
}
