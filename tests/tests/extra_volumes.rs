//! A group's extra EBS volumes (`spec.volumes`, `spec.volumeMounts`; issue 32) on the local cloud with IAM
//! enforced, one cluster, driven as an operator would (`ballast create -f`, `update cluster --yes`, EC2
//! StopInstances/StartInstances):
//! - every instance the node group launches has both volumes (the launch template's block device mappings,
//!   encrypted, as EC2 made them) and nodeup mounted each at its path, formatting it once (a blank device);
//! - a second `update cluster` plans nothing (the mappings read back from EC2 are what was written);
//! - a file written through a mount is still there after the instance's second boot (stop, start: nodeup runs
//!   again on the same root), on the same volume, which nodeup did not format again.
//!
//! The local cloud's volumes are directories bind-mounted at their device path (`docs/local-cloud.md`): "blank"
//! is an empty directory, formatting writes nodeup's label file, a mount is a bind mount. Needs the emulator's
//! venv; fails (never skips) without it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aws_sdk_ec2::types::Filter;
use ballast_e2e::localcloud::LocalCloud;
use ballast_e2e::operator::{ballast_cli_on, STATE_BUCKET};

const CLUSTER: &str = "extravolumes.example.com";
const GROUP_TAG: &str = "ballast.dev/instance-group";
/// nodeup's label file in a directory volume it formatted (`nodeup::volume::attach::DIRECTORY_LABEL_FILE`).
const LABEL: &str = ".ballast-volume";
const BOOT: Duration = Duration::from_secs(180);
/// The two mounts: device -> (path, filesystem).
const MOUNTS: [(&str, &str, &str); 2] = [
    ("/dev/sdf", "/mnt/scratch", "ext4"),
    ("/dev/xvdg", "/data/db", "xfs"),
];

fn spec() -> String {
    format!(
        "apiVersion: ballast.dev/v1alpha1
kind: Cluster
metadata:
  name: {CLUSTER}
spec:
  kubernetesVersion: 1.33.4
  subnets:
  - {{name: us-west-2a, zone: us-west-2a}}
---
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
  maxSize: 2
  volumes:
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

/// The node group's running instances: id -> (device -> volume id), from EC2's block device mappings.
async fn node_instances(cloud: &LocalCloud) -> BTreeMap<String, BTreeMap<String, String>> {
    let out = cloud
        .ec2()
        .describe_instances()
        .filters(
            Filter::builder()
                .name(format!("tag:{GROUP_TAG}"))
                .values("nodes")
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
        .flat_map(|r| r.instances())
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_volumes_are_mounted_on_every_instance_and_kept_across_a_second_boot() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, spec()).expect("spec file");
    ballast(&cloud, &["create", "-f"], Some(&file));
    let plan = ballast(&cloud, &["update", "cluster", "--yes"], None);
    assert!(
        plan.contains("volumes: 20 GiB gp3 encrypted on /dev/sdf, 30 GiB gp3 4000 IOPS encrypted on /dev/xvdg"),
        "the plan shows the launch template's volumes:\n{plan}"
    );

    // Every instance of the group: both volumes attached by EC2 from the launch template, encrypted, and
    // mounted by nodeup at their paths, formatted once.
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
        for (device, _, filesystem) in MOUNTS {
            let volume_dir = cloud.dir().join("volumes").join(&devices[device]);
            assert_eq!(
                std::fs::read_to_string(volume_dir.join(LABEL)).expect("the label file"),
                format!("{filesystem}\n"),
                "{id}'s {device} formatted as its mount says, on its own volume"
            );
            assert!(paths.contains_key(device));
        }
        mounted.insert(id.clone(), paths);
    }

    // The mappings read back from EC2 are what was written: nothing to do.
    let again = ballast(&cloud, &["update", "cluster"], None);
    assert!(
        again.contains("No changes"),
        "a second update plans nothing:\n{again}"
    );

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
}
