//! The local cloud boots what an Auto Scaling group launches: one nodeup per instance, each with its own IMDS,
//! root and process group; scale-in, scale-out and replacement start and kill exactly the right ones.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use aws_sdk_autoscaling::types::LaunchTemplateSpecification;
use aws_sdk_ec2::types::{
    Filter, InstanceType, LaunchTemplateIamInstanceProfileSpecificationRequest,
    RequestLaunchTemplateData,
};
use ballast_e2e::localcloud::{
    binaries, create_instance_role, endpoint_addr, instance_processes, LocalCloud, Network,
    Options, Termination,
};
use base64::Engine as _;

const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
const AMI: &str = "ami-12c6146b";
const NODE_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:DescribeInstances","Resource":"*"}]}"#;

/// Creates a launch template (user-data, instance profile) and an ASG over `network`'s subnets.
async fn create_group(
    cloud: &LocalCloud,
    network: &Network,
    name: &str,
    desired: i32,
    user_data: &str,
) {
    let profile = create_instance_role(&cloud.iam(), &format!("{name}-role"), NODE_POLICY).await;
    cloud
        .ec2()
        .create_launch_template()
        .launch_template_name(format!("{name}-lt"))
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id(AMI)
                .instance_type(InstanceType::T3Micro)
                .user_data(base64::engine::general_purpose::STANDARD.encode(user_data))
                .iam_instance_profile(
                    LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                        .name(profile)
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .expect("CreateLaunchTemplate");
    cloud
        .autoscaling()
        .create_auto_scaling_group()
        .auto_scaling_group_name(name)
        .launch_template(
            LaunchTemplateSpecification::builder()
                .launch_template_name(format!("{name}-lt"))
                .version("$Latest")
                .build(),
        )
        .min_size(0)
        .max_size(10)
        .desired_capacity(desired)
        .vpc_zone_identifier(network.subnet_ids().join(","))
        .send()
        .await
        .expect("CreateAutoScalingGroup");
}

async fn set_desired(cloud: &LocalCloud, name: &str, desired: i32) {
    cloud
        .autoscaling()
        .set_desired_capacity()
        .auto_scaling_group_name(name)
        .desired_capacity(desired)
        .send()
        .await
        .expect("SetDesiredCapacity");
}

/// Instance id -> (state, private IP, AZ) of a group's instances, as EC2 reports them.
async fn ec2_instances(cloud: &LocalCloud, group: &str) -> Vec<(String, String, String, String)> {
    let out = cloud
        .ec2()
        .describe_instances()
        .filters(
            Filter::builder()
                .name("tag:aws:autoscaling:groupName")
                .values(group)
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances");
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_owned(),
                i.state()
                    .and_then(|s| s.name())
                    .map(|n| n.as_str().to_owned())
                    .unwrap_or_default(),
                i.private_ip_address().unwrap_or_default().to_owned(),
                i.placement()
                    .and_then(|p| p.availability_zone())
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asg_of_three_boots_one_nodeup_per_az_that_reads_its_own_imds() {
    let cloud = LocalCloud::start();
    let network = Network::create(
        &cloud.ec2(),
        16,
        &["us-west-2a", "us-west-2b", "us-west-2c"],
    )
    .await;
    let user_data = "apiVersion: ballast.dev/v1alpha1\nkind: BootConfig\ncluster: c1\n";
    create_group(&cloud, &network, "nodes", 3, user_data).await;

    let booted = cloud.wait_for_booted(3, BOOT_TIMEOUT).await;
    let ec2 = ec2_instances(&cloud, "nodes").await;
    let azs: BTreeSet<&str> = booted
        .iter()
        .map(|(r, _)| r.availability_zone.as_str())
        .collect();
    assert_eq!(
        azs,
        BTreeSet::from(["us-west-2a", "us-west-2b", "us-west-2c"]),
        "one instance per AZ"
    );
    for (record, report) in &booted {
        let id = &record.instance_id;
        let (_, state, ip, az) = ec2
            .iter()
            .find(|i| &i.0 == id)
            .expect("the instance is in EC2");
        assert_eq!(state, "running");
        // nodeup learnt all of this from its own IMDS endpoint, which answers for this instance only.
        assert_eq!(&report.identity.instance_id, id);
        assert_eq!(&report.identity.availability_zone, az);
        assert_eq!(&report.identity.local_ipv4, ip);
        assert_eq!(&record.private_ip, ip);
        assert!(ip.starts_with("127.16."), "private IP {ip} in the VPC");
        assert_eq!(report.identity.region, "us-west-2");
        assert_eq!(report.identity.ami_id, AMI);
        assert_eq!(report.identity.instance_type, "t3.micro");
        assert_eq!(report.user_data, user_data);
        assert_eq!(report.identity.iam_role.as_deref(), Some("nodes-role"));
        // The SDK's default chain inside nodeup reached the role's temporary credentials through IMDS.
        let key = report
            .credentials
            .access_key_id
            .as_deref()
            .unwrap_or_default();
        assert!(
            key.starts_with("ASIA"),
            "temporary role credentials, got {:?}",
            report.credentials
        );
        // The IMDS endpoint is on the instance's own private IP; the process that wrote the file is the
        // recorded nodeup, alive in its own process group.
        assert_eq!(endpoint_addr(&record.imds_endpoint).ip().to_string(), *ip);
        assert_eq!(Some(report.pid), record.nodeup.map(|p| p.pid));
        assert!(
            record.nodeup.is_some_and(|p| p.is_alive()),
            "nodeup of {id} is alive"
        );
        assert!(
            record.root.starts_with(cloud.dir()),
            "root under the state dir"
        );
    }
    // The status command shows them with their processes.
    let (ok, table, err) = cloud.cli(&["status"]);
    assert!(ok, "status failed: {err}");
    for (record, _) in &booted {
        assert!(table.contains(&record.instance_id), "{table}");
    }
    assert_eq!(table.matches(" alive ").count(), 3, "{table}");
}

/// A stand-in for nodeup that, like a real agent with services, has a child process: the whole tree must die.
fn nodeup_with_a_child(dir: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("nodeup-with-child");
    let script = format!(
        "#!/bin/sh\nsleep 600 &\nexec {} \"$@\"\n",
        binaries().nodeup.display()
    );
    std::fs::write(&path, script).expect("writing the wrapper");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_out_and_in_starts_and_kills_the_right_process_trees() {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let cloud = LocalCloud::start_with(Options {
        nodeup: Some(nodeup_with_a_child(scratch.path())),
        ..Options::default()
    });
    let network = Network::create(
        &cloud.ec2(),
        17,
        &["us-west-2a", "us-west-2b", "us-west-2c"],
    )
    .await;
    create_group(&cloud, &network, "workers", 3, "role: worker\n").await;
    cloud.wait_for_booted(3, BOOT_TIMEOUT).await;

    set_desired(&cloud, "workers", 5).await;
    let five = cloud.wait_for_booted(5, BOOT_TIMEOUT).await;
    let azs: Vec<&str> = five
        .iter()
        .map(|(r, _)| r.availability_zone.as_str())
        .collect();
    for az in ["us-west-2a", "us-west-2b", "us-west-2c"] {
        let n = azs.iter().filter(|a| **a == az).count();
        assert!(
            (1..=2).contains(&n),
            "5 instances spread over 3 AZs: {azs:?}"
        );
    }
    for (record, _) in &five {
        // nodeup and its child.
        let procs = cloud
            .wait_for(
                "both processes of the instance",
                Duration::from_secs(10),
                |_| {
                    let p = instance_processes(record);
                    (p.len() == 2).then_some(p)
                },
            )
            .await;
        assert!(procs.contains(&record.nodeup.expect("recorded").pid));
    }

    set_desired(&cloud, "workers", 2).await;
    cloud
        .wait_for("2 powered-on instances", BOOT_TIMEOUT, |c| {
            (c.powered_on().len() == 2).then_some(())
        })
        .await;
    let ec2 = ec2_instances(&cloud, "workers").await;
    let running: HashSet<&str> = ec2
        .iter()
        .filter(|i| i.1 == "running")
        .map(|i| i.0.as_str())
        .collect();
    assert_eq!(running.len(), 2, "{ec2:?}");
    for (before, _) in &five {
        let now = cloud.instance(&before.instance_id);
        if running.contains(now.instance_id.as_str()) {
            assert!(
                now.stopped_at.is_none(),
                "{} still runs in EC2: must be powered on",
                now.instance_id
            );
            assert_eq!(
                instance_processes(&now).len(),
                2,
                "{}: its whole tree is alive",
                now.instance_id
            );
        } else {
            assert_eq!(
                now.state, "terminated",
                "{} is gone from EC2",
                now.instance_id
            );
            assert!(
                instance_processes(&now).is_empty(),
                "{}: its whole tree was killed",
                now.instance_id
            );
            let refused = std::net::TcpStream::connect_timeout(
                &endpoint_addr(&now.imds_endpoint),
                Duration::from_millis(500),
            );
            assert!(
                refused.is_err(),
                "{}: its IMDS stopped answering",
                now.instance_id
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_instance_is_powered_off_and_replaced_with_a_fresh_root() {
    let cloud = LocalCloud::start();
    let network = Network::create(&cloud.ec2(), 18, &["us-west-2a", "us-west-2b"]).await;
    create_group(&cloud, &network, "cp", 2, "role: control-plane\n").await;
    let booted = cloud.wait_for_booted(2, BOOT_TIMEOUT).await;
    let (victim, _) = booted[0].clone();
    let survivor = booted[1].0.instance_id.clone();
    // Something the victim's node wrote: its replacement must not see it.
    std::fs::write(victim.root.join("written-by-the-old-node"), "x")
        .expect("writing into the victim's root");

    // EC2's default termination: a graceful OS shutdown.
    cloud
        .terminate(
            std::slice::from_ref(&victim.instance_id),
            Termination::Graceful,
        )
        .await;

    let replacement = cloud
        .wait_for(
            "a replacement instance with an identity",
            BOOT_TIMEOUT,
            |c| {
                let on = c.powered_on();
                let new = on
                    .iter()
                    .find(|r| r.instance_id != survivor && r.instance_id != victim.instance_id)?;
                c.identity(new).map(|i| (new.clone(), i))
            },
        )
        .await;
    let (new, report) = replacement;
    // The replacement may boot while the victim still shuts down (they share nothing here).
    let old = cloud
        .wait_for("the victim to be off", BOOT_TIMEOUT, |c| {
            let r = c.instance(&victim.instance_id);
            r.stopped_at.is_some().then_some(r)
        })
        .await;
    assert_eq!(old.state, "terminated");
    assert!(
        instance_processes(&old).is_empty(),
        "the victim's processes were killed"
    );
    assert!(!old.nodeup.expect("recorded").is_alive());
    assert!(
        std::net::TcpStream::connect_timeout(
            &endpoint_addr(&old.imds_endpoint),
            Duration::from_millis(500)
        )
        .is_err(),
        "the victim's IMDS stopped answering"
    );

    assert_ne!(
        new.private_ip, old.private_ip,
        "the replacement has a new IP"
    );
    assert_eq!(report.identity.local_ipv4, new.private_ip);
    assert_eq!(report.identity.instance_id, new.instance_id);
    assert_ne!(new.root, old.root);
    assert!(
        !new.root.join("written-by-the-old-node").exists(),
        "the replacement's root is fresh"
    );
    assert_eq!(
        new.availability_zone, old.availability_zone,
        "the ASG refills the AZ that lost an instance"
    );
    // Graceful: nodeup got SIGTERM and exited by itself (what it exits with depends on its configuration here,
    // but it was not killed).
    assert_eq!(old.shutdown.as_deref(), Some("graceful"), "{old:?}");
    let exit = old.nodeup_exit.clone().unwrap_or_default();
    assert!(
        exit.starts_with("exit status:"),
        "nodeup did not exit by itself: {old:?}"
    );
    let survivor = cloud.instance(&survivor);
    assert!(
        survivor.stopped_at.is_none() && instance_processes(&survivor).len() == 1,
        "the other instance is untouched"
    );

    // SkipOsShutdown: a power cut, everything SIGKILLed at once.
    cloud
        .terminate(
            std::slice::from_ref(&survivor.instance_id),
            Termination::PowerCut,
        )
        .await;
    let cut = cloud
        .wait_for("the power-cut instance to be off", BOOT_TIMEOUT, |c| {
            let r = c.instance(&survivor.instance_id);
            r.stopped_at.is_some().then_some(r)
        })
        .await;
    assert_eq!(cut.shutdown.as_deref(), Some("power cut"), "{cut:?}");
    assert!(
        cut.nodeup_exit
            .as_deref()
            .is_some_and(|e| e.starts_with("killed") && e.contains("SIGKILL")),
        "nodeup was not killed: {cut:?}"
    );
    assert!(
        instance_processes(&cut).is_empty(),
        "the power-cut instance's processes were killed"
    );
}
