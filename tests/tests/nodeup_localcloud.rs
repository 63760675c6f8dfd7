//! nodeup on the local cloud: `ballast create cluster --yes` builds a three-zone cluster on the emulator, the
//! local cloud boots every instance with its own root, IMDS and role credentials (IAM enforced), and every
//! instance's nodeup configures it: its boot report in the state store says Configured, and its files are under
//! its root, root's `authorized_keys` holding the SSH key stored with `create secret sshpublickey` before the
//! cluster was built. Needs the emulator's venv; fails (never skips) without it.

use std::time::Duration;

use ballast_e2e::localcloud::LocalCloud;
use ballast_state::addon_report::AddonsState;
use ballast_state::report::{NodeReport, Phase, ServiceState};
use ballast_state::report_signature;
use ballast_state::spec::Role;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_instance_of_a_new_cluster_reports_configured() {
    let cloud = LocalCloud::start();
    let bucket = "ballast-nodeup-e2e";
    cloud.prepare_for_ballast(bucket).await;
    let name = "nodeup.example.com";
    let state = format!("s3://{bucket}/clusters");
    let (ok, out) = cloud.ballast(
        &state,
        &[
            "create",
            "cluster",
            "--name",
            name,
            "--zones",
            "us-west-2a,us-west-2b,us-west-2c",
        ],
    );
    assert!(ok, "ballast create cluster failed:\n{out}");
    // An operator's SSH key, stored before the cluster is built: storing it writes the node specs and launch
    // templates as `update cluster --yes` does, so it builds the cluster and every first boot installs the key.
    let pubkey = format!(
        "{}/../state/tests/data/ssh/ed25519.pub",
        env!("CARGO_MANIFEST_DIR")
    );
    let key_line = std::fs::read_to_string(&pubkey).expect("the SSH key fixture");
    let (ok, out) = cloud.ballast(
        &state,
        &[
            "create",
            "secret",
            "sshpublickey",
            "--name",
            name,
            "--pubkey",
            &pubkey,
        ],
    );
    assert!(ok, "ballast create secret sshpublickey failed:\n{out}");
    assert!(
        out.contains("SHA256:mU8I5zRYyOoSgxCCuQP2g31as9EVhWqRUs65cvPQ5AI"),
        "{out}"
    );

    // Every instance the cluster's groups launched reports Configured, in the store.
    let expected = cloud
        .ec2()
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("DescribeInstances")
        .reservations()
        .iter()
        .flat_map(|r| {
            r.instances().iter().filter_map(|i| {
                Some((
                    i.instance_id()?.to_owned(),
                    i.private_dns_name().unwrap_or_default().to_owned(),
                ))
            })
        })
        .collect::<Vec<_>>();
    assert!(
        expected.len() >= 4,
        "3 control-plane instances and workers: {expected:?}"
    );
    let ca = cloud
        .s3_object(
            bucket,
            &format!("clusters/{name}/pki/kubernetes-ca/cert.pem"),
        )
        .await
        .expect("the Kubernetes CA certificate");
    let ca = String::from_utf8(ca).expect("PEM");
    let mut reports = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    for (id, node_name) in &expected {
        let report = loop {
            if let Some(r) = cloud.stored_report(bucket, "clusters/", name, id).await {
                // Each node signs its report as itself (its kubelet client certificate, from the cluster CA).
                let signer = report_signature::verify(
                    &r,
                    &ca,
                    Some(node_name),
                    time::OffsetDateTime::now_utc().unix_timestamp(),
                );
                assert_eq!(signer.as_deref(), Ok(node_name.as_str()), "{id}'s report");
                break r.report;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no boot report for {id} in the store; instance log:\n{}",
                cloud
                    .try_instance(id)
                    .and_then(|r| std::fs::read_to_string(r.log).ok())
                    .unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        reports.push(report);
    }
    let mut roles = Vec::new();
    for report in &reports {
        let record = cloud.instance(&report.instance_id);
        assert_eq!(
            report.phase,
            Phase::Configured,
            "{} did not configure: {:?}\n{}",
            report.instance_id,
            report.errors,
            report.log_tail.join("\n")
        );
        assert_eq!(report.cluster_name.as_deref(), Some(name));
        assert_eq!(
            report.private_ip.as_deref(),
            Some(record.private_ip.as_str())
        );
        assert!(!report.files_written.is_empty());
        // The kubelet and containerd cannot be installed here: reported absent, never pretended to run.
        assert_eq!(
            report.services_in(ServiceState::Absent),
            ["containerd", "kubelet"],
            "{report:?}"
        );
        let root = &record.root;
        // Every file the report names is under the instance's root, with its mode.
        for f in &report.files_written {
            let path = root.join(f.path.trim_start_matches('/'));
            let meta =
                std::fs::metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                format!("{:04o}", meta.permissions().mode() & 0o7777),
                f.mode,
                "{}",
                path.display()
            );
        }
        // The operator's key, for root, exactly: the file 0600 in a 0700 directory, under Ballast's header.
        {
            use std::os::unix::fs::PermissionsExt;
            let keys = root.join("root/.ssh/authorized_keys");
            let text = std::fs::read_to_string(&keys)
                .unwrap_or_else(|e| panic!("{}: {e}", keys.display()));
            assert!(
                text.starts_with(nodeup::render::paths::AUTHORIZED_KEYS_HEADER),
                "{text}"
            );
            let listed: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
            assert_eq!(listed, [key_line.trim_end()], "{}", keys.display());
            let mode = |p: &std::path::Path| {
                std::fs::metadata(p).expect("metadata").permissions().mode() & 0o7777
            };
            assert_eq!(mode(&keys), 0o600);
            assert_eq!(mode(&root.join("root/.ssh")), 0o700);
        }
        let local = NodeReport::from_json(
            &std::fs::read(root.join(nodeup::REPORT_FILE)).expect("local report"),
        )
        .expect("parses");
        assert_eq!(local.instance_id, report.instance_id);
        let role = report.role.expect("a role");
        roles.push(role);
        match role {
            Role::ControlPlane => {
                // The add-on applier is waiting for an API server the local cloud cannot run, and says so.
                let addons = report
                    .addons
                    .as_ref()
                    .expect("a control plane reports its add-ons");
                assert_eq!(addons.state, AddonsState::WaitingForApi, "{addons:?}");
                assert_eq!(
                    addons.api_server,
                    format!("https://{}:443", record.private_ip)
                );
                assert!(root
                    .join("etc/kubernetes/manifests/kube-apiserver.yaml")
                    .is_file());
                assert!(root.join("etc/kubernetes/pki/etcd/peer.crt").is_file());
                // Issued on the node for its own IP; on a loopback IP the peer cert also names 127.0.0.1.
                let peer = nodeup::certs::cert_facts(
                    &std::fs::read(root.join("etc/kubernetes/pki/etcd/peer.crt"))
                        .expect("peer cert"),
                )
                .expect("parses");
                let ip: std::net::IpAddr = record.private_ip.parse().expect("an IP");
                assert!(
                    peer.ips.contains(&ip) && peer.ips.contains(&"127.0.0.1".parse().expect("ip"))
                );
            }
            Role::Node => {
                assert_eq!(
                    report.addons, None,
                    "only control-plane nodes apply add-ons"
                );
                // Its kubelet certificate came from the control plane's bootstrap service (docs/node-identity.md):
                // no bootstrap token on the node.
                assert!(root
                    .join("var/lib/kubelet/pki/kubelet-client.crt")
                    .is_file());
                assert!(!root.join("var/lib/kubelet/bootstrap-kubeconfig").exists());
                assert!(
                    !root.join("etc/kubernetes/pki/ca.key").exists(),
                    "a worker holds a CA key"
                );
                assert!(!root.join("etc/kubernetes/manifests").exists());
            }
            other => {
                panic!("this cluster has no {other:?} group, yet an instance reported that role")
            }
        }
    }
    assert_eq!(
        roles.iter().filter(|r| **r == Role::ControlPlane).count(),
        3,
        "{roles:?}"
    );
    assert!(roles.contains(&Role::Node));
    for report in &reports {
        eprintln!(
            "{} {:?} {:?}: configured in {} ms ({:?})",
            report.instance_id,
            report.role,
            report.instance_group,
            report.total_millis,
            report
                .steps
                .iter()
                .map(|s| (s.step, s.millis))
                .collect::<Vec<_>>()
        );
    }
}
