//! The AMI path end to end on the emulator: `packer build` (communicator none) registers a tagged AMI, and
//! `ballast create cluster --image <that id> --yes` launches every instance from it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ballast_e2e::aws;

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_comes_up_from_the_ami_packer_registered() {
    let emulator = aws::shared_emulator();
    let status = Command::new("packer").arg("version").output();
    assert!(
        status.is_ok_and(|o| o.status.success()),
        "packer is not installed: run tools/install-deps (Debian's packer package)"
    );
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cache = tempfile::tempdir().expect("tempdir");
    let ami_name = format!("ballast-k8s-1.33-e2e-{}", std::process::id());
    let ballast = ballast_e2e::localcloud::binaries().ballast.clone();
    let output = Command::new("packer")
        .current_dir(cache.path())
        .env("PACKER_CACHE_DIR", cache.path())
        .env("CHECKPOINT_DISABLE", "1")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .args([
            "build",
            "-color=false",
            "-var",
            "communicator=none",
            "-var",
            "region=us-west-2",
        ])
        .arg("-var")
        .arg(format!("custom_endpoint_ec2={}", emulator.endpoint()))
        .args([
            "-var",
            "skip_region_validation=true",
            "-var",
            "skip_credential_validation=true",
        ])
        .args(["-var", "skip_metadata_api_check=true"])
        // The emulator's catalog has no Debian 12: the base is its Amazon Linux 2 image.
        .args([
            "-var",
            "source_ami_name=amzn2-ami-hvm-*",
            "-var",
            "source_ami_owner=137112412989",
        ])
        .args(["-var", "os_name=al2", "-var", "kubernetes_version=1.33.4"])
        .arg("-var")
        .arg(format!("ami_name={ami_name}"))
        // Nothing is uploaded with communicator none; the template still wants a file to name.
        .arg("-var")
        .arg(format!("nodeup_binary={}", ballast.display()))
        .arg(repo.join("packer/ballast.pkr.hcl"))
        .output()
        .expect("packer build");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "packer build failed: {log}");

    let ec2 = aws_sdk_ec2::Client::new(&aws::sdk_config().await);
    let images = ec2
        .describe_images()
        .owners("self")
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("name")
                .values(&ami_name)
                .build(),
        )
        .send()
        .await
        .expect("describe images");
    let ami = images
        .images()
        .first()
        .and_then(|i| i.image_id())
        .expect("the AMI packer registered")
        .to_string();

    let bucket = aws::new_bucket("packer").await;
    assert_cmd::Command::new(&ballast_e2e::localcloud::binaries().ballast)
        .env("BALLAST_STATE", format!("s3://{bucket}/clusters"))
        .env_remove("BALLAST_NETWORK_CIDR")
        .timeout(Duration::from_secs(120))
        .args([
            "create",
            "cluster",
            "--name",
            "baked.example.com",
            "--zones",
            "us-west-2a",
            "--image",
            &ami,
            "--yes",
        ])
        .assert()
        .success();
    let out = ec2
        .describe_instances()
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("tag:ballast.dev/cluster")
                .values("baked.example.com")
                .build(),
        )
        .filters(
            aws_sdk_ec2::types::Filter::builder()
                .name("instance-state-name")
                .values("running")
                .build(),
        )
        .send()
        .await
        .expect("describe instances");
    let instances: Vec<_> = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .collect();
    assert_eq!(
        instances.len(),
        2,
        "one control-plane instance and one node"
    );
    for instance in instances {
        assert_eq!(instance.image_id(), Some(ami.as_str()));
    }
}
