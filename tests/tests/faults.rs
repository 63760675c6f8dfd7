//! Faults a cluster must survive, one cluster per scenario.
//!
//! AWS going away in the middle of `ballast update cluster --yes`: the emulator (moto through the project's
//! launcher) is reached through an HTTP front ([`ballast_e2e::front`]) that drops every connection after the N-th
//! request and refuses new ones until restored. Why a front and not the emulator's process: moto keeps all its
//! state in memory, so a killed and restarted emulator is an empty cloud (nothing left to converge, nothing that
//! could be duplicated), and a SIGSTOPped one leaves `ballast` waiting forever on an accepted connection (the SDK
//! sets a connect timeout, no read timeout). The front gives what an operator meets when AWS or the network to it
//! fails: the request in flight may have been carried out with its answer lost, the next ones fail, and all AWS
//! did stays done.

use ballast_e2e::aws;
use ballast_e2e::front::Front;
use ballast_e2e::localcloud::endpoint_addr;

const ZONES: &str = "us-west-2a,us-west-2b,us-west-2c";

/// Runs `ballast ARGS` for the cluster with AWS reached through `endpoint` (the front); returns (success,
/// stdout, stderr).
fn ballast_via(
    endpoint: &str,
    state: &str,
    cluster: &str,
    args: &[&str],
) -> (bool, String, String) {
    let out = aws::ballast_cli(state, cluster)
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint)
        .output()
        .expect("running ballast");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn aws_lost_in_the_middle_of_an_update_then_back_converges() {
    let emulator = aws::shared_emulator();
    let bucket = aws::new_bucket("faults").await;
    let state = format!("s3://{bucket}/clusters");
    let cluster = "faults.example.com";
    aws::ensure_image(&ballast_state::defaults::default_image(
        ballast_state::defaults::DEFAULT_KUBERNETES_VERSION,
    ))
    .await;
    let mut front = Front::start(endpoint_addr(emulator.endpoint()));
    let endpoint = front.endpoint();

    let (ok, _, stderr) = ballast_via(
        &endpoint,
        &state,
        cluster,
        &["create", "cluster", "--zones", ZONES],
    );
    assert!(ok, "create cluster: {stderr}");

    // Cut points counted from each run's start: during its first reads, early in the apply (network), and
    // late (launch templates and groups).
    let mut interrupted = Vec::new();
    for cut_after in [12u64, 30, 38] {
        let before = front.requests();
        front.cut_after(cut_after);
        let (ok, _, stderr) =
            ballast_via(&endpoint, &state, cluster, &["update", "cluster", "--yes"]);
        assert!(
            front.is_down(),
            "the update ended (success: {ok}) after {} requests, before the cut after {cut_after}: {stderr}",
            front.requests() - before
        );
        assert!(
            !ok,
            "update cluster succeeded although AWS went away after request {cut_after}: {stderr}"
        );
        assert!(
            stderr.contains(" failed: ") && stderr.contains(endpoint.as_str()),
            "the failure names the resource, the call and what to check: {stderr}"
        );
        eprintln!("cut after request {cut_after}:\n{stderr}");
        interrupted.push(stderr.lines().last().unwrap_or_default().to_string());
        front.restore();
    }
    eprintln!("interrupted runs ended with: {interrupted:#?}");

    let before = front.requests();
    let (ok, _, stderr) = ballast_via(&endpoint, &state, cluster, &["update", "cluster", "--yes"]);
    assert!(ok, "the update after AWS came back: {stderr}");
    eprintln!(
        "the converging run made {} requests",
        front.requests() - before
    );
    let (ok, plan, stderr) = ballast_via(&endpoint, &state, cluster, &["update", "cluster"]);
    assert!(ok, "{stderr}");
    assert_eq!(
        plan, "No changes: the cluster's resources match its spec.\n",
        "the next plan is empty"
    );
    let counts = aws::owned_counts(cluster).await;
    assert_eq!(
        counts,
        std::collections::BTreeMap::from([
            ("asg", 4),
            ("igw", 1),
            ("launch-template", 4),
            ("route-table", 1),
            ("security-group", 2),
            ("subnet", 3),
            ("vpc", 1),
        ]),
        "no duplicates after the interrupted runs"
    );
}
