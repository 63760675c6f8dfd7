//! The Packer template (`packer/ballast.pkr.hcl`): it validates with Debian's Packer (1.6.6), and on the AWS
//! emulator, `packer build` with `communicator = "none"` registers an AMI tagged with the manifest's versions.
//!
//! Never an SSH communicator here: the emulator's instances have public-looking IPs that must not be dialed.
//! Without `packer` these tests fail, saying what to install; they never skip.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use ballast_e2e::aws::{shared_emulator, REGION};
use ballast_e2e::image::{nodeup_binary, output_text as text, repo_root, require_tool};
use ballast_state::components::ComponentManifest;

fn template() -> PathBuf {
    repo_root().join("packer/ballast.pkr.hcl")
}

fn packer() -> Command {
    require_tool("packer", "packer");
    let mut command = Command::new("packer");
    command
        .env("CHECKPOINT_DISABLE", "1")
        .env_remove("PACKER_LOG")
        .stdin(Stdio::null());
    command
}

/// Waits for a child with a deadline; kills it (and says so) when the deadline passes.
fn wait_with_deadline(mut child: Child, deadline: Duration, what: &str) -> Output {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if started.elapsed() > deadline => {
                let _ = child.kill();
                let output = child.wait_with_output().ok();
                panic!(
                    "{what} did not finish within {deadline:?}; killed it. {}",
                    output.as_ref().map(text).unwrap_or_default()
                );
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("{what}: waiting: {e}"),
        }
    }
    child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{what}: collecting output: {e}"))
}

#[test]
fn the_template_validates_and_is_formatted() {
    let nodeup = nodeup_binary();
    let output = packer()
        .args(["fmt", "-check", "-diff"])
        .arg(template())
        .output()
        .expect("packer fmt");
    assert!(
        output.status.success(),
        "packer fmt -check: {}",
        text(&output)
    );

    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    for minor in manifest.minors() {
        let full = manifest.releases[&minor].kubernetes.clone();
        for version in [minor.as_str(), full.as_str()] {
            let output = packer()
                .current_dir(std::env::temp_dir())
                .arg("validate")
                .arg("-var")
                .arg(format!("kubernetes_version={version}"))
                .arg("-var")
                .arg(format!("nodeup_binary={}", nodeup.display()))
                .arg(template())
                .output()
                .expect("packer validate");
            assert!(
                output.status.success(),
                "packer validate (Kubernetes {version}): {}",
                text(&output)
            );
        }
    }
}

async fn ec2() -> aws_sdk_ec2::Client {
    shared_emulator();
    let config = aws_config::load_from_env().await;
    aws_sdk_ec2::Client::new(&config)
}

fn tags_of(tags: &[aws_sdk_ec2::types::Tag]) -> std::collections::BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| Some((t.key()?.to_string(), t.value()?.to_string())))
        .collect()
}

#[test]
fn packer_build_on_the_emulator_registers_a_tagged_ami() {
    let emulator = shared_emulator();
    let nodeup = nodeup_binary();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let client = runtime.block_on(ec2());
    let ami_name = format!("ballast-k8s-1.33-test-{}", std::process::id());
    let cache = tempfile::tempdir().expect("tempdir");

    // The base image is found through the template's source_ami_filter, as on AWS: the emulator's catalog has
    // no Debian 12, so the filter is pointed at its Amazon Linux 2 image (the documented alternative's shape).
    let started = Instant::now();
    let child = packer()
        .current_dir(cache.path())
        .env("PACKER_CACHE_DIR", cache.path())
        .arg("build")
        .arg("-color=false")
        .args(["-var", "communicator=none"])
        .arg("-var")
        .arg(format!("region={REGION}"))
        .arg("-var")
        .arg(format!("custom_endpoint_ec2={}", emulator.endpoint()))
        .args(["-var", "skip_region_validation=true"])
        .args(["-var", "skip_credential_validation=true"])
        .args(["-var", "skip_metadata_api_check=true"])
        .args(["-var", "source_ami_name=amzn2-ami-hvm-*"])
        .args(["-var", "source_ami_owner=137112412989"])
        .args(["-var", "os_name=al2"])
        .args(["-var", "kubernetes_version=1.33.4"])
        .arg("-var")
        .arg(format!("ami_name={ami_name}"))
        .args(["-var", r#"tags={"team" = "ballast-tests"}"#])
        .arg("-var")
        .arg(format!("nodeup_binary={}", nodeup.display()))
        .arg(template())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn packer build");
    let output = wait_with_deadline(child, Duration::from_secs(120), "packer build");
    let log = text(&output);
    assert!(output.status.success(), "packer build: {log}");
    eprintln!(
        "packer: build on the emulator took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        !log.contains("Provisioning with"),
        "with communicator none, nothing may run on the instance: {log}"
    );

    let images = runtime
        .block_on(
            client
                .describe_images()
                .owners("self")
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("name")
                        .values(&ami_name)
                        .build(),
                )
                .send(),
        )
        .unwrap_or_else(|e| {
            panic!(
                "describe_images: {}",
                aws_sdk_ec2::error::DisplayErrorContext(e)
            )
        });
    let images = images.images();
    assert_eq!(images.len(), 1, "one AMI named {ami_name}: {images:?}");
    let image = &images[0];
    let ami_id = image.image_id().unwrap_or_default();
    assert!(
        log.contains(ami_id),
        "packer reported another AMI than {ami_id}: {log}"
    );

    let manifest = ComponentManifest::embedded().expect("the embedded manifest");
    let (_, release) = manifest.release_exact("1.33.4").expect("1.33");
    let tags = tags_of(image.tags());
    assert_eq!(
        tags.get("ballast.dev/kubernetes"),
        Some(&release.kubernetes),
        "{tags:?}"
    );
    for (name, component) in &release.components {
        assert_eq!(
            tags.get(&format!("ballast.dev/{name}")),
            Some(&component.version),
            "{tags:?}"
        );
    }
    let manifest_sha = ballast_e2e::image::sha256_file(&repo_root().join("images/manifest.yaml"));
    assert_eq!(tags.get("ballast.dev/manifest-sha256"), Some(&manifest_sha));
    assert_eq!(
        tags.get("ballast.dev/provisioned").map(String::as_str),
        Some("false")
    );
    assert_eq!(tags.get("ballast.dev/os").map(String::as_str), Some("al2"));
    assert_eq!(tags.get("team").map(String::as_str), Some("ballast-tests"));

    // Packer cleaned up after itself: its build instance is terminated.
    let reservations = runtime
        .block_on(
            client
                .describe_instances()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("tag:ballast.dev/image-build")
                        .values(&ami_name)
                        .build(),
                )
                .send(),
        )
        .unwrap_or_else(|e| {
            panic!(
                "describe_instances: {}",
                aws_sdk_ec2::error::DisplayErrorContext(e)
            )
        });
    let states: Vec<String> = reservations
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            i.state()
                .and_then(|s| s.name())
                .map(|n| n.as_str().to_string())
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(states, vec!["terminated".to_string()], "the build instance");
}
