//! A node group's fields beyond one launch template (issue 32, item 1), on the local cloud with IAM enforced, one
//! cluster driven as an operator would (`ballast create -f`, `replace -f`, `update cluster`, `rolling-update
//! cluster`, EC2 StopInstances/StartInstances), every check through the real SDK against the emulator:
//! - a mixed instances policy (two types, on-demand base 0, 50% on-demand above it, `capacity-optimized` spot),
//!   node labels, taints and two extra EBS volumes: the Auto Scaling group (DescribeAutoScalingGroups) carries the
//!   policy and, with the cluster autoscaler on, its discovery tags and a node-template tag per label and taint;
//!   the launch template's default version (DescribeLaunchTemplateVersions) carries the volumes; every booted
//!   instance's kubelet registers with the labels (`--node-labels` in kubelet.env) and taints
//!   (`registerWithTaints` in its configuration), and the plan showed each;
//! - every instance the group launches has both volumes (encrypted, as EC2 made them) and nodeup mounted each at
//!   its path, formatting it once; a second `update cluster` plans nothing;
//! - the cluster autoscaler add-on: the control-plane node spec (exactly the one the instance booted with, by its
//!   hash) renders, through nodeup's own add-on code, a Deployment naming the pinned image by digest whose
//!   `--node-group-auto-discovery` tags are the tags `update cluster` put on the node group (and not on the
//!   control plane's);
//! - security groups the spec names beside the cluster's own are refused before any change unless they are in
//!   the cluster's VPC (not made yet, another VPC's, none at all), naming the field and the id;
//! - a change (a taint, and a security group made in the cluster's VPC) shows in the plan as the group's node
//!   spec and launch template changing, lands on the launch template, and `rolling-update cluster` lists the
//!   group's instances, and only them;
//! - a file written through a mount is still there after the instance's second boot (stop, start: nodeup runs
//!   again on the same root), on the same volume, which nodeup did not format again.
//!
//! The local cloud's volumes are directories bind-mounted at their device path (`docs/local-cloud.md`): "blank"
//! is an empty directory, formatting writes nodeup's label file, a mount is a bind mount. No API server runs
//! here, so the control-plane node's add-on applier waits for one: the add-on objects are rendered by the test
//! from the node's spec with the code the node runs. Needs the emulator's venv; fails (never skips) without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::operator::{ballast_cli_on, STATE_BUCKET};
use ballast_state::components::{ComponentManifest, ImageDigest};
use ballast_state::layout::ClusterPaths;
use ballast_state::node::NodeSpec;
use sha2::Digest;

const CLUSTER: &str = "groupfields.example.com";
const GROUP_TAG: &str = "ballast.dev/instance-group";
const NODE_SPEC_HASH_TAG: &str = "ballast.dev/node-spec-hash";
/// nodeup's label file in a directory volume it formatted (`nodeup::volume::attach::DIRECTORY_LABEL_FILE`).
const LABEL: &str = ".ballast-volume";
const BOOT: Duration = Duration::from_secs(180);
/// The two mounts: device -> (path, filesystem).
const MOUNTS: [(&str, &str, &str); 2] = [
    ("/dev/sdf", "/mnt/scratch", "ext4"),
    ("/dev/xvdg", "/data/db", "xfs"),
];
const FIRST_TAINT: &str = "dedicated=batch:NoSchedule";
const SECOND_TAINT: &str = "dedicated=batch:NoExecute";

/// The cluster's spec in `network` (the cloud's own CIDR inside 127.0.0.0/8, held against other clouds on the
/// machine): the node group's taint, the security groups it names beside the cluster's own, and the API load
/// balancer's.
fn spec(network: &str, taint: &str, group_sgs: &[&str], api_sgs: &[&str]) -> String {
    let api = if api_sgs.is_empty() {
        String::new()
    } else {
        format!(
            "  api:\n    loadBalancer: {{additionalSecurityGroups: [{}]}}\n",
            api_sgs.join(", ")
        )
    };
    let group_sgs = if group_sgs.is_empty() {
        String::new()
    } else {
        format!("  additionalSecurityGroups: [{}]\n", group_sgs.join(", "))
    };
    format!(
        "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata:
  name: {CLUSTER}
spec:
  kubernetesVersion: 1.36.4
  networkCIDR: {network}
  subnets:
  - {{name: us-west-2a, zone: us-west-2a}}
  clusterAutoscaler: {{enabled: true}}
{api}---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: control-plane}}
spec: {{role: ControlPlane}}
---
apiVersion: ballast.dev/v1alpha1
kind: InstanceGroup
metadata: {{name: nodes}}
spec:
  role: Node
  minSize: 2
  maxSize: 4
  machineType: t3.medium
  mixedInstancesPolicy:
    instances: [t3.medium, t3a.medium]
    onDemandBase: 0
    onDemandAboveBase: 50
    spotAllocationStrategy: capacity-optimized
  nodeLabels: {{workload: batch}}
  taints: [\"{taint}\"]
{group_sgs}  volumes:
  - {{device: /dev/sdf, size: 20}}
  - {{device: /dev/xvdg, size: 30, type: gp3, iops: 4000}}
  volumeMounts:
  - {{device: /dev/sdf, path: /mnt/scratch}}
  - {{device: /dev/xvdg, path: /data/db, filesystem: xfs, mountOptions: [noatime]}}
"
    )
}

fn ballast(cloud: &LocalCloud, args: &[&str], file: Option<&Path>) -> String {
    let mut cmd = ballast_cli_on(cloud, CLUSTER);
    cmd.args(args);
    if let Some(file) = file {
        cmd.arg(file);
    }
    let out = cmd.output().expect("ballast runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ballast {args:?}: {text}");
    text
}

/// The running EC2 instances of the cluster's instance group `group` (by its group tag).
async fn running_in_group(cloud: &LocalCloud, group: &str) -> Vec<aws_sdk_ec2::types::Instance> {
    let out = cloud
        .ec2()
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{GROUP_TAG}"))
                .values(group)
                .build(),
        )
        .filters(
            Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances().iter().cloned())
        .collect()
}

/// The node group's running instances: id -> (device -> volume id), from EC2's block device mappings.
async fn node_instances(cloud: &LocalCloud) -> BTreeMap<String, BTreeMap<String, String>> {
    running_in_group(cloud, "nodes")
        .await
        .iter()
        .map(|i| {
            let devices = i
                .block_device_mappings()
                .iter()
                .filter_map(|m| {
                    Some((
                        m.device_name()?.to_string(),
                        m.ebs()?.volume_id()?.to_string(),
                    ))
                })
                .collect();
            (i.instance_id().unwrap_or_default().to_string(), devices)
        })
        .collect()
}

/// Mount points of this process's namespace (the runner's and nodeup's mounts under instance roots show here:
/// the roots are shared mounts, `localcloud/src/namespace.rs`).
fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ")))
        .collect()
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Waits until every mount of the instance is a mount point under its root holding nodeup's label; returns
/// the mounted paths by device.
async fn wait_for_mounts(cloud: &LocalCloud, id: &str) -> BTreeMap<&'static str, PathBuf> {
    cloud
        .wait_for(&format!("{id}'s extra volumes mounted"), BOOT, |c| {
            let record = c.try_instance(id)?;
            if record.stopped_at.is_some() || record.nodeup.is_none() {
                return None;
            }
            let points = mount_points();
            let mut mounted = BTreeMap::new();
            for (device, path, _) in MOUNTS {
                let target = record.root.join(path.trim_start_matches('/'));
                let target = canonical(&target);
                if !points.contains(&target) || !target.join(LABEL).exists() {
                    return None;
                }
                mounted.insert(device, target);
            }
            Some(mounted)
        })
        .await
}

/// `ballast` expected to fail: its exit code and output.
fn ballast_fails(cloud: &LocalCloud, args: &[&str]) -> (Option<i32>, String) {
    let out = ballast_cli_on(cloud, CLUSTER)
        .args(args)
        .output()
        .expect("ballast runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "ballast {args:?} succeeded: {text}");
    (out.status.code(), text)
}

fn write_spec(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, text).expect("spec file");
    file
}

/// The cluster's own VPC, once `update cluster` made it.
async fn cluster_vpc(cloud: &LocalCloud) -> Option<String> {
    let out = cloud
        .ec2()
        .describe_vpcs()
        .filters(
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{CLUSTER}"))
                .values("owned")
                .build(),
        )
        .send()
        .await
        .expect("DescribeVpcs");
    out.vpcs()
        .first()
        .and_then(|v| v.vpc_id())
        .map(str::to_string)
}

/// A new security group in `vpc`.
async fn security_group_in(cloud: &LocalCloud, vpc: &str, name: &str) -> String {
    cloud
        .ec2()
        .create_security_group()
        .group_name(name)
        .description("made by the test")
        .vpc_id(vpc)
        .send()
        .await
        .expect("CreateSecurityGroup")
        .group_id()
        .expect("a group id")
        .to_string()
}

async fn auto_scaling_group(
    cloud: &LocalCloud,
    group: &str,
) -> aws_sdk_autoscaling::types::AutoScalingGroup {
    let out = cloud
        .autoscaling()
        .describe_auto_scaling_groups()
        .auto_scaling_group_names(format!("{group}.{CLUSTER}"))
        .send()
        .await
        .expect("DescribeAutoScalingGroups");
    out.auto_scaling_groups()
        .first()
        .cloned()
        .unwrap_or_else(|| panic!("no Auto Scaling group {group}.{CLUSTER}"))
}

/// The launch template's default version: its number and data.
async fn default_version(
    cloud: &LocalCloud,
    group: &str,
) -> (i64, aws_sdk_ec2::types::ResponseLaunchTemplateData) {
    let out = cloud
        .ec2()
        .describe_launch_template_versions()
        .launch_template_name(format!("{group}.{CLUSTER}"))
        .versions("$Default")
        .send()
        .await
        .expect("DescribeLaunchTemplateVersions");
    let version = out
        .launch_template_versions()
        .first()
        .expect("a default version")
        .clone();
    (
        version.version_number().expect("a version number"),
        version.launch_template_data().expect("its data").clone(),
    )
}

fn asg_tags(group: &aws_sdk_autoscaling::types::AutoScalingGroup) -> BTreeMap<String, String> {
    group
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

/// Asserts the booted instance's kubelet registers its node with the group's labels and `taint`, as nodeup
/// rendered them under the instance's root.
async fn assert_kubelet_registration(cloud: &LocalCloud, id: &str, taint: &str) {
    let root = cloud.instance(id).root;
    let env_path = root.join(nodeup::render::paths::KUBELET_ENV.trim_start_matches('/'));
    let config_path = root.join(nodeup::render::paths::KUBELET_CONFIG.trim_start_matches('/'));
    // Written after the mounts, before nodeup reports.
    let env = cloud
        .wait_for(&format!("{id}'s kubelet files"), BOOT, |_| {
            config_path.exists().then_some(())?;
            std::fs::read_to_string(&env_path).ok()
        })
        .await;
    let labels = env
        .split_whitespace()
        .find_map(|arg| arg.trim_matches('"').strip_prefix("--node-labels="))
        .unwrap_or_else(|| panic!("{id}: no --node-labels in {env}"));
    assert_eq!(
        labels, "ballast.dev/instance-group=nodes,workload=batch",
        "{id}'s kubelet labels"
    );
    let config: nodeup::render::types::KubeletConfiguration = yaml_serde::from_str(
        &std::fs::read_to_string(&config_path)
            .unwrap_or_else(|e| panic!("{}: {e}", config_path.display())),
    )
    .expect("the kubelet's configuration parses");
    let taints: Vec<String> = config
        .register_with_taints
        .iter()
        .map(|t| {
            format!(
                "{}={}:{}",
                t.key,
                t.value.clone().unwrap_or_default(),
                t.effect
            )
        })
        .collect();
    assert_eq!(taints, [taint], "{id}'s kubelet taints");
}

/// The cluster autoscaler's Deployment, rendered by nodeup's add-on code from the control-plane node spec the
/// control-plane instance booted with (read from the store, checked against the instance's hash tag).
async fn autoscaler_deployment(cloud: &LocalCloud) -> serde_json::Value {
    let instance = running_in_group(cloud, "control-plane")
        .await
        .into_iter()
        .next()
        .expect("a control-plane instance");
    let id = instance.instance_id().expect("an id").to_string();
    let booted_hash = instance
        .tags()
        .iter()
        .find(|t| t.key() == Some(NODE_SPEC_HASH_TAG))
        .and_then(|t| t.value())
        .expect("the node-spec hash tag")
        .to_string();
    let key = format!(
        "clusters/{}",
        ClusterPaths::new(CLUSTER).node_spec("control-plane")
    );
    let data = cloud
        .s3_object(STATE_BUCKET, &key)
        .await
        .expect("the control-plane node spec");
    assert_eq!(
        hex::encode(sha2::Sha256::digest(&data)),
        booted_hash,
        "the spec {id} booted with"
    );
    let spec: NodeSpec = yaml_serde::from_slice(&data).expect("the control-plane node spec parses");
    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (minor, release) = manifest
        .release_exact(&spec.kubernetes_version)
        .expect("a release for 1.36.4");
    // The node's CA certificate (the webhook's, not used with IRSA off), and no baked CNI manifest: Cilium is
    // rendered by Ballast.
    let ca_path = cloud.instance(&id).root.join("etc/kubernetes/pki/ca.crt");
    let ca = cloud
        .wait_for("the control plane's CA certificate", BOOT, |_| {
            std::fs::read_to_string(&ca_path).ok()
        })
        .await;
    // The add-on images of the release that no public record pins yet (images/manifest.yaml says why) get a
    // stand-in digest, as images/pin.sh pins them on a machine with internet: the render needs every image pinned.
    let mut release = release.clone();
    for image in release
        .addons
        .values_mut()
        .flat_map(|addon| addon.images.values_mut())
    {
        if image.digest == ImageDigest::Unpinned {
            image.digest = ImageDigest::Pinned(hex::encode(sha2::Sha256::digest(
                image.reference.as_bytes(),
            )));
        }
    }
    let release = &release;
    let set = nodeup::addons::render(&spec, release, minor, None).expect("the add-ons render");
    let (set, refused) = nodeup::addons::set::applied_set(set, &spec, release, minor, &ca);
    assert!(refused.is_empty(), "refused add-ons: {refused:?}");
    let pinned = release.addons["cluster-autoscaler"].images["cluster-autoscaler"]
        .pinned_reference()
        .expect("the cluster autoscaler's image is pinned");
    assert!(pinned.contains("@sha256:"), "{pinned}");
    let deployment = set
        .objects
        .iter()
        .find(|o| o.kind() == "Deployment" && o.name() == "cluster-autoscaler")
        .expect("the cluster autoscaler's Deployment")
        .value
        .clone();
    assert_eq!(
        deployment
            .pointer("/spec/template/spec/containers/0/image")
            .and_then(|v| v.as_str()),
        Some(pinned.as_str()),
        "the Deployment names the pinned image by digest"
    );
    deployment
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_s_fields_reach_its_launch_template_asg_and_kubelet_and_a_change_rolls() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    let dir = tempfile::tempdir().expect("tempdir");

    // A security group cannot be in a VPC that does not exist yet: refused before anything is made.
    let early = write_spec(
        dir.path(),
        "early.yaml",
        &spec(
            &cloud.record.network_cidr,
            FIRST_TAINT,
            &["sg-0123456789abcdef0"],
            &[],
        ),
    );
    ballast(&cloud, &["create", "-f"], Some(&early));
    let (code, out) = ballast_fails(&cloud, &["update", "cluster", "--yes"]);
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains(
            "InstanceGroup/nodes: spec.additionalSecurityGroups[0]: sg-0123456789abcdef0 cannot be in the \
             cluster's VPC, which does not exist yet"
        ),
        "{out}"
    );
    assert_eq!(cluster_vpc(&cloud).await, None, "nothing was made");

    let first = write_spec(
        dir.path(),
        "first.yaml",
        &spec(&cloud.record.network_cidr, FIRST_TAINT, &[], &[]),
    );
    ballast(&cloud, &["replace", "-f"], Some(&first));
    let plan = ballast(&cloud, &["update", "cluster", "--yes"], None);
    for shown in [
        "volumes: 20 GiB gp3 encrypted on /dev/sdf, 30 GiB gp3 4000 IOPS encrypted on /dev/xvdg",
        "mixedInstancesPolicy: types=t3.medium,t3a.medium onDemandBase=0 onDemandAboveBase=50% \
         spot=capacity-optimized",
        "nodeLabels: ballast.dev/instance-group=nodes, workload=batch",
        "taints: dedicated=batch:NoSchedule",
    ] {
        assert!(plan.contains(shown), "the plan shows {shown:?}:\n{plan}");
    }

    // The Auto Scaling group: the policy as written, and with the autoscaler on its discovery tags and a
    // node-template tag per label and taint; the control plane's group is not the autoscaler's.
    let nodes_asg = auto_scaling_group(&cloud, "nodes").await;
    let policy = nodes_asg
        .mixed_instances_policy()
        .expect("the group's mixed instances policy");
    let types: Vec<&str> = policy
        .launch_template()
        .map(|l| l.overrides())
        .unwrap_or_default()
        .iter()
        .filter_map(|o| o.instance_type())
        .collect();
    assert_eq!(types, ["t3.medium", "t3a.medium"]);
    let distribution = policy
        .instances_distribution()
        .expect("an instances distribution");
    assert_eq!(distribution.on_demand_base_capacity(), Some(0));
    assert_eq!(
        distribution.on_demand_percentage_above_base_capacity(),
        Some(50)
    );
    assert_eq!(
        distribution.spot_allocation_strategy(),
        Some("capacity-optimized")
    );
    let tags = asg_tags(&nodes_asg);
    for (key, value) in [
        ("k8s.io/cluster-autoscaler/enabled", "true"),
        (&*format!("k8s.io/cluster-autoscaler/{CLUSTER}"), "owned"),
        (
            "k8s.io/cluster-autoscaler/node-template/label/workload",
            "batch",
        ),
        (
            "k8s.io/cluster-autoscaler/node-template/taint/dedicated",
            "batch:NoSchedule",
        ),
    ] {
        assert_eq!(
            tags.get(key).map(String::as_str),
            Some(value),
            "{key}: {tags:?}"
        );
    }
    let control_plane_tags = asg_tags(&auto_scaling_group(&cloud, "control-plane").await);
    assert!(
        !control_plane_tags
            .keys()
            .any(|k| k.starts_with("k8s.io/cluster-autoscaler/")),
        "{control_plane_tags:?}"
    );

    // The launch template: the instance type, and the volumes after the root's.
    let (first_version, data) = default_version(&cloud, "nodes").await;
    assert_eq!(data.instance_type().map(|t| t.as_str()), Some("t3.medium"));
    let volumes: Vec<(String, i32, String, Option<i32>, bool)> = data
        .block_device_mappings()
        .iter()
        .skip(1)
        .filter_map(|m| {
            let ebs = m.ebs()?;
            Some((
                m.device_name()?.to_string(),
                ebs.volume_size()?,
                ebs.volume_type()?.as_str().to_string(),
                ebs.iops(),
                ebs.encrypted()?,
            ))
        })
        .collect();
    assert_eq!(
        volumes,
        [
            ("/dev/sdf".to_string(), 20, "gp3".to_string(), None, true),
            (
                "/dev/xvdg".to_string(),
                30,
                "gp3".to_string(),
                Some(4000),
                true
            ),
        ],
        "{data:?}"
    );
    let cluster_sg_only = data.network_interfaces().first().map(|n| n.groups().len());
    assert_eq!(cluster_sg_only, Some(1), "only the cluster's own group yet");

    // Every instance of the group: one of the policy's types, both volumes attached by EC2 from the launch
    // template, encrypted, and mounted by nodeup at their paths, formatted once; its kubelet registers with
    // the labels and the taint.
    let deadline = std::time::Instant::now() + BOOT;
    let nodes = loop {
        let nodes = node_instances(&cloud).await;
        if nodes.len() == 2 {
            break nodes;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "two running instances of the node group: {nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let mut mounted = BTreeMap::new();
    for (id, devices) in &nodes {
        for (device, _, _) in MOUNTS {
            let volume_id = devices
                .get(device)
                .unwrap_or_else(|| panic!("{id} has no volume on {device}: {devices:?}"));
            let volume = cloud
                .ec2()
                .describe_volumes()
                .volume_ids(volume_id)
                .send()
                .await
                .expect("DescribeVolumes");
            let volume = &volume.volumes()[0];
            assert_eq!(
                volume.encrypted(),
                Some(true),
                "{id}'s {device}: {volume:?}"
            );
        }
        let paths = wait_for_mounts(&cloud, id).await;
        let instance_type = cloud.instance(id).instance_type.unwrap_or_default();
        assert!(
            ["t3.medium", "t3a.medium"].contains(&instance_type.as_str()),
            "{id} runs {instance_type}"
        );
        for (device, _, filesystem) in MOUNTS {
            let volume_dir = cloud.dir().join("volumes").join(&devices[device]);
            assert_eq!(
                std::fs::read_to_string(volume_dir.join(LABEL)).expect("the label file"),
                format!("{filesystem}\n"),
                "{id}'s {device} formatted as its mount says, on its own volume"
            );
            assert!(paths.contains_key(device));
        }
        assert_kubelet_registration(&cloud, id, FIRST_TAINT).await;
        mounted.insert(id.clone(), paths);
    }

    // What was written reads back the same: nothing to do.
    let again = ballast(&cloud, &["update", "cluster"], None);
    assert!(
        again.contains("No changes"),
        "a second update plans nothing:\n{again}"
    );

    // The cluster autoscaler: the control-plane node renders its Deployment with the pinned image, finding
    // groups by exactly the tags the node group carries.
    let deployment = autoscaler_deployment(&cloud).await;
    let args: Vec<&str> = deployment
        .pointer("/spec/template/spec/containers/0/command")
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .chain(
            deployment
                .pointer("/spec/template/spec/containers/0/args")
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten(),
        )
        .filter_map(|v| v.as_str())
        .collect();
    let discovery = args
        .iter()
        .find_map(|a| a.strip_prefix("--node-group-auto-discovery=asg:tag="))
        .unwrap_or_else(|| panic!("no --node-group-auto-discovery in {args:?}"));
    for tag in discovery.split(',') {
        assert!(
            tags.contains_key(tag),
            "the autoscaler looks for {tag}, which the node group has not: {tags:?}"
        );
    }
    assert_eq!(discovery.split(',').count(), 2, "{discovery}");

    // A file written through each mount of one instance; then the instance boots again (stop, start: the same
    // root, the same volumes, nodeup runs again).
    let (id, paths) = mounted.iter().next().expect("an instance");
    for (device, path) in paths {
        std::fs::write(path.join("sentinel"), format!("written on {device}\n"))
            .expect("a file on the mount");
    }
    let first_log = std::fs::read_to_string(cloud.instance(id).log).unwrap_or_default();
    cloud
        .ec2()
        .stop_instances()
        .instance_ids(id)
        .send()
        .await
        .expect("StopInstances");
    cloud
        .wait_for(&format!("{id} powered off"), BOOT, |c| {
            c.try_instance(id)?.stopped_at.map(|_| ())
        })
        .await;
    for (_, path, _) in MOUNTS {
        let target = canonical(&cloud.instance(id).root.join(path.trim_start_matches('/')));
        assert!(
            !mount_points().contains(&target),
            "{path} is unmounted while {id} is off"
        );
    }
    cloud
        .ec2()
        .start_instances()
        .instance_ids(id)
        .send()
        .await
        .expect("StartInstances");
    let paths = wait_for_mounts(&cloud, id).await;
    let devices = &nodes[id];
    for (device, path) in &paths {
        assert_eq!(
            std::fs::read_to_string(path.join("sentinel")).expect("the file after the second boot"),
            format!("written on {device}\n"),
            "{id}'s {device}: the data survived the second boot"
        );
        let volume_dir = cloud.dir().join("volumes").join(&devices[*device]);
        assert!(
            volume_dir.join("sentinel").exists(),
            "on the same volume {}",
            devices[*device]
        );
    }
    // The second boot's nodeup kept both volumes (`formatted=false`), where the first formatted them.
    let log = cloud
        .wait_for(&format!("{id}'s second boot logs its volumes"), BOOT, |c| {
            let log = std::fs::read_to_string(c.instance(id).log).ok()?;
            let second = log.get(first_log.len()..)?.to_string();
            (second.matches("extra volume mounted").count() >= 2).then_some(second)
        })
        .await;
    assert!(
        !log.contains("formatting a blank extra volume"),
        "the second boot formatted nothing:\n{log}"
    );
    assert_eq!(
        first_log.matches("formatting a blank extra volume").count(),
        2,
        "the first boot formatted both (they were blank)"
    );

    // Security groups outside the cluster's VPC: refused before any change, each by its field and id.
    let vpc = cluster_vpc(&cloud).await.expect("the cluster's VPC");
    let elsewhere = cloud
        .ec2()
        .create_vpc()
        .cidr_block("10.99.0.0/16")
        .send()
        .await
        .expect("CreateVpc")
        .vpc()
        .and_then(|v| v.vpc_id())
        .expect("a VPC id")
        .to_string();
    let foreign = security_group_in(&cloud, &elsewhere, "elsewhere").await;
    let refused = write_spec(
        dir.path(),
        "refused.yaml",
        &spec(
            &cloud.record.network_cidr,
            SECOND_TAINT,
            &[&foreign],
            &["sg-0123456789abcdef0"],
        ),
    );
    ballast(&cloud, &["replace", "-f"], Some(&refused));
    let (code, out) = ballast_fails(&cloud, &["update", "cluster", "--yes"]);
    assert_eq!(code, Some(3), "{out}");
    for refusal in [
        format!(
            "InstanceGroup/nodes: spec.additionalSecurityGroups[0]: {foreign} is in VPC {elsewhere}, not in \
             the cluster's VPC {vpc}"
        ),
        format!(
            "Cluster/{CLUSTER}: spec.api.loadBalancer.additionalSecurityGroups[0]: sg-0123456789abcdef0 does \
             not exist"
        ),
    ] {
        assert!(out.contains(&refusal), "{refusal}\nin:\n{out}");
    }
    assert_eq!(
        default_version(&cloud, "nodes").await.0,
        first_version,
        "the refused update changed nothing"
    );

    // A change: the taint, and a security group made in the cluster's VPC. The plan shows the node spec and
    // the launch template changing; the template carries the group; the roll lists the group's instances.
    let own = security_group_in(&cloud, &vpc, "batch-extra").await;
    let second = write_spec(
        dir.path(),
        "second.yaml",
        &spec(&cloud.record.network_cidr, SECOND_TAINT, &[&own], &[]),
    );
    ballast(&cloud, &["replace", "-f"], Some(&second));
    let plan = ballast(&cloud, &["update", "cluster"], None);
    for shown in [
        "~ NodeSpec nodes".to_string(),
        format!("taints: {FIRST_TAINT} -> {SECOND_TAINT}"),
        format!("~ LaunchTemplate nodes.{CLUSTER}"),
        "nodeSpecSha256: ".to_string(),
        own.clone(),
        "k8s.io/cluster-autoscaler/node-template/taint/dedicated".to_string(),
    ] {
        assert!(plan.contains(&shown), "the plan shows {shown:?}:\n{plan}");
    }
    assert!(
        !plan.contains("NodeSpec control-plane"),
        "only the node group changes:\n{plan}"
    );
    ballast(&cloud, &["update", "cluster", "--yes"], None);
    let (version, data) = default_version(&cloud, "nodes").await;
    assert!(version > first_version, "a new default version");
    let groups: Vec<&str> = data
        .network_interfaces()
        .first()
        .map(|n| n.groups())
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    assert!(groups.contains(&own.as_str()), "{groups:?}");
    assert_eq!(
        groups.len(),
        2,
        "the cluster's own and the extra: {groups:?}"
    );
    assert_eq!(
        asg_tags(&auto_scaling_group(&cloud, "nodes").await)
            .get("k8s.io/cluster-autoscaler/node-template/taint/dedicated")
            .map(String::as_str),
        Some("batch:NoExecute")
    );
    let roll = ballast_cli_on(&cloud, CLUSTER)
        .args(["rolling-update", "cluster"])
        .output()
        .expect("ballast rolling-update");
    assert!(roll.status.success(), "{roll:?}");
    let table = String::from_utf8_lossy(&roll.stdout);
    for id in nodes.keys() {
        assert!(
            table.contains(id.as_str()),
            "{id} is to be rolled:\n{table}"
        );
    }
    let listed = table.lines().filter(|l| l.contains("i-")).count();
    assert_eq!(
        listed,
        nodes.len(),
        "only the node group's instances:\n{table}"
    );
}
