//! The lifecycle benchmark's harness still works: the small size's create (3 control-plane + 10 nodes, until
//! `validate cluster` passes) and the node group doubled to 20 (until validated again), on a local cloud with IAM
//! enforced. No time is asserted: `lifecycle-bench` measures; this proves its phases run and do what they say.

use ballast_e2e::lifecycle::{Lifecycle, Size};

#[tokio::test(flavor = "multi_thread")]
async fn the_small_size_creates_and_doubles_its_node_group() {
    let ballast = ballast_e2e::localcloud::binaries().ballast.clone();
    let mut life = Lifecycle::start(Size::Small, ballast).await;

    let created = life.create();
    assert_eq!(life.running_instances(), 13, "3 control-plane + 10 nodes");
    // The create's own runs changed AWS, and `ballast` counted its calls through BALLAST_AWS_CALL_LOG.
    assert!(created.calls.1 > 0, "no mutating call counted: {created:?}");
    assert!(
        created
            .operations
            .contains_key("Auto Scaling:CreateAutoScalingGroup"),
        "{created:?}"
    );
    assert!(created.validate_calls > 0, "{created:?}");
    assert!(created.validate_checks >= 1, "{created:?}");
    assert!(
        created.nodeup_peak_mib > 0.0 && created.cloud_peak_mib > 0.0,
        "{created:?}"
    );
    assert!(created.ballast_peak_mib > 0.0, "{created:?}");

    let doubled = life.double_nodes();
    assert_eq!(life.running_instances(), 23, "the node group doubled to 20");
    // Doubling a group is one UpdateAutoScalingGroup; nothing is created.
    assert_eq!(
        doubled
            .operations
            .get("Auto Scaling:UpdateAutoScalingGroup"),
        Some(&1),
        "{doubled:?}"
    );
    assert!(
        !doubled.operations.keys().any(|op| op.contains(":Create")),
        "{doubled:?}"
    );
}
