//! Termination the cluster sees coming, on the local cloud with a real cluster (three control-plane groups,
//! `spec.terminationHandling.enabled`, IAM enforced): the etcd leader's instance is terminated by its Auto Scaling
//! group, which holds it in `Terminating:Wait` (the hook); the lifecycle event goes into the cluster's queue as
//! EventBridge would put it there. The handler on a control-plane node asks the leader's node to stop its member;
//! that node's supervisor hands leadership away and stops; the action is completed long before the hook's
//! heartbeat would, the instance terminates, and its replacement heals the cluster as on any termination. No
//! acknowledged write is lost, and the term moves by at most the handoff's one.
//!
//! And what a forged event can do (issue 44): a spot interruption warning for an on-demand control-plane instance
//! stops nothing; two stop requests at once on three members are granted one at a time; a granted stop whose end
//! never comes is undone within its bound.

use std::time::{Duration, Instant};

use ballast_e2e::cluster_etcd::{
    connect, connect_member, control_plane, settled_membership, wait_for_settled,
};
use ballast_e2e::etcd_writer::{write_until_stopped, WriterControl};
use ballast_e2e::localcloud::{lifecycle_actions, LocalCloud};
use ballast_e2e::operator::{
    ballast_cli, ballast_cli_on, enable_termination_handling, STATE, STATE_BUCKET, ZONES,
};
use ballast_e2e::wait::wait_until;
use ballast_state::layout::ClusterPaths;
use ballast_state::termination::{queue_name, HOOK_NAME};
use ballast_store::etcd::stop::{request_stop_resuming_after, withdraw, StopRequestError};
use ballast_store::store::{StateStore, StoreOptions};
use serde_json::json;

const CLUSTER: &str = "hooks.example.com";
const SETTLE: Duration = Duration::from_secs(180);

fn pending_token(cloud: &LocalCloud, instance: &str) -> Option<String> {
    lifecycle_actions(&cloud.record.endpoint)?
        .into_iter()
        .find_map(|(id, token)| (id == instance).then_some(token))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_leaders_instance_goes_through_the_hook_with_a_handoff_and_no_lost_write() {
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    ballast_cli(&cloud)
        .args(["create", "cluster", "--name", CLUSTER, "--zones", ZONES])
        .args(["--node-count", "0"])
        .assert()
        .success();
    // Termination handling on, then the cluster made.
    let dir = tempfile::tempdir().expect("tempdir");
    enable_termination_handling(&cloud, CLUSTER, dir.path());
    ballast_cli_on(&cloud, CLUSTER)
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let formed = wait_for_settled(&cloud, 3, SETTLE).await;

    let mut client = connect(&cloud).await.expect("an etcd client");
    let before = client.status().await.expect("status");
    let (leader, term_before) = (before.leader(), before.raft_term());
    let victim = formed
        .member_ids
        .iter()
        .find(|(_, id)| **id == leader)
        .map(|(name, _)| name.clone())
        .expect("the leader's instance");

    let config = cloud.sdk_config();
    let asg = aws_sdk_autoscaling::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue = sqs
        .get_queue_url()
        .queue_name(queue_name(CLUSTER))
        .send()
        .await
        .expect("the cluster's queue")
        .queue_url()
        .expect("url")
        .to_string();
    let group = asg
        .describe_auto_scaling_instances()
        .instance_ids(&victim)
        .send()
        .await
        .expect("describe")
        .auto_scaling_instances()[0]
        .auto_scaling_group_name()
        .expect("group")
        .to_string();

    let writer = WriterControl::new();
    let (report, (completed_after, term_after)) = tokio::join!(
        write_until_stopped(&writer, "writer/", Duration::ZERO, || connect(&cloud)),
        async {
            writer.wait_for_more_writes(10, SETTLE).await;
            asg.terminate_instance_in_auto_scaling_group()
                .instance_id(&victim)
                .should_decrement_desired_capacity(false)
                .send()
                .await
                .expect("terminate the leader's instance");
            let token = pending_token(&cloud, &victim).expect("its lifecycle action waits");
            let event = json!({
                "version": "0", "id": "2d7c5a3e-1f0b-4c9a-8e6d-5b4a3c2d1e0f",
                "detail-type": "EC2 Instance-terminate Lifecycle Action", "source": "aws.autoscaling",
                "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
                "resources": [],
                "detail": {"LifecycleActionToken": token, "AutoScalingGroupName": group,
                           "LifecycleHookName": HOOK_NAME, "EC2InstanceId": victim,
                           "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING"}
            });
            let started = Instant::now();
            sqs.send_message()
                .queue_url(&queue)
                .message_body(event.to_string())
                .send()
                .await
                .expect("send the event");
            wait_until(
                Duration::from_secs(120),
                "the leader's lifecycle action completed by the handler",
                || async { pending_token(&cloud, &victim).is_none() },
            )
            .await;
            let completed_after = started.elapsed();
            // The victim's member has stopped while its instance may still be up: ask the others.
            let term_after = term_seen_by_others(&cloud, &victim).await;
            writer.wait_for_more_writes(10, SETTLE).await;
            writer.stop();
            (completed_after, term_after)
        }
    );
    eprintln!(
        "the leader's action completed {completed_after:?} after the event; term {term_before} -> {term_after}; \
         {} writes acknowledged, {} failed",
        report.acknowledged.len(),
        report.failures
    );
    // The hook's heartbeat is 300 s: completed long before, it was the handler.
    assert!(completed_after < Duration::from_secs(120));
    // The leader's own node stopped its member on the request, after handing leadership away.
    let log = std::fs::read_to_string(cloud.instance(&victim).log).unwrap_or_default();
    let stopped = log
        .lines()
        .find(|l| l.contains("etcd stopped on a stop request"))
        .unwrap_or_else(|| panic!("the victim's nodeup never stopped etcd on the request:\n{log}"));
    assert!(stopped.contains("handed over to"), "{stopped}");
    assert!(
        term_after <= term_before + 1,
        "an election beyond the handoff: term {term_before} -> {term_after}"
    );

    // The replacement heals the cluster as on any termination, and nothing acknowledged is lost.
    let healed = wait_until(
        SETTLE,
        "three voting members without the victim",
        || async {
            let m = wait_for_settled(&cloud, 3, SETTLE).await;
            if m.voters.contains(&victim) {
                Err(m)
            } else {
                Ok(m)
            }
        },
    )
    .await;
    assert_eq!(healed.voters.len(), 3);
    let mut client = connect(&cloud).await.expect("an etcd client");
    report.assert_none_lost(&mut client, 10).await;
}

/// The highest raft term the control-plane members other than `victim` report, once one of them answers (within
/// 30 s): a client of the whole cluster may pick the stopped member's endpoint and fail.
async fn term_seen_by_others(cloud: &LocalCloud, victim: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut highest = None;
        for record in control_plane(cloud)
            .into_iter()
            .filter(|r| r.instance_id != victim)
        {
            if let Ok(mut client) = connect_member(&record).await {
                if let Ok(Ok(status)) =
                    tokio::time::timeout(Duration::from_secs(2), client.status()).await
                {
                    highest = highest.max(Some(status.raft_term()));
                }
            }
        }
        if let Some(term) = highest {
            return term;
        }
        assert!(
            Instant::now() < deadline,
            "no control-plane member but {victim} answered a status request in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A forged spot interruption for an on-demand control-plane instance stops nothing; two stop requests at once
/// on three members are granted one at a time (the second waits: it would leave no quorum); and the granted
/// stop, whose instance never goes, is undone within its bound: the member is healthy again.
#[tokio::test(flavor = "multi_thread")]
async fn forged_events_stop_nothing_and_a_stop_whose_end_never_comes_is_undone() {
    const CLUSTER: &str = "forged.example.com";
    let cloud = LocalCloud::start();
    cloud.prepare_for_ballast(STATE_BUCKET).await;
    ballast_cli(&cloud)
        .args(["create", "cluster", "--name", CLUSTER, "--zones", ZONES])
        .args(["--node-count", "0"])
        .assert()
        .success();
    let dir = tempfile::tempdir().expect("tempdir");
    enable_termination_handling(&cloud, CLUSTER, dir.path());
    ballast_cli_on(&cloud, CLUSTER)
        .args(["update", "cluster", "--yes"])
        .assert()
        .success();
    let formed = wait_for_settled(&cloud, 3, SETTLE).await;
    let mut instances: Vec<String> = formed.voters.iter().cloned().collect();
    instances.sort();

    // The operator's view of the state store, as `rolling-update` asks through it.
    for (key, value) in cloud.operator_env(STATE) {
        if key.starts_with("AWS_") {
            std::env::set_var(key, value);
        }
    }
    let store = StateStore::open(STATE, StoreOptions::default())
        .await
        .expect("the state store");
    let request_key = |id: &str| ClusterPaths::new(CLUSTER).etcd_stop_request(id);

    // 1. A spot interruption warning, in EventBridge's shape, for an on-demand control-plane instance.
    let victim = instances[0].clone();
    let config = cloud.sdk_config();
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let described = ec2
        .describe_instances()
        .instance_ids(&victim)
        .send()
        .await
        .expect("describe the victim");
    let lifecycle = described.reservations()[0].instances()[0]
        .instance_lifecycle()
        .cloned();
    assert_eq!(lifecycle, None, "the control plane runs on demand here");
    let sqs = aws_sdk_sqs::Client::new(&config);
    let queue = sqs
        .get_queue_url()
        .queue_name(queue_name(CLUSTER))
        .send()
        .await
        .expect("the cluster's queue")
        .queue_url()
        .expect("url")
        .to_string();
    let forged = json!({
        "version": "0", "id": "5f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f",
        "detail-type": "EC2 Spot Instance Interruption Warning", "source": "aws.ec2",
        "account": "123456789012", "time": "2026-12-03T00:00:00Z", "region": "us-west-2",
        "resources": [format!("arn:aws:ec2:us-west-2a:instance/{victim}")],
        "detail": {"instance-id": victim, "instance-action": "terminate"}
    });
    sqs.send_message()
        .queue_url(&queue)
        .message_body(forged.to_string())
        .send()
        .await
        .expect("send the forged event");
    // Handled once some control-plane node's handler logged its decision about it and deleted it.
    let decided = wait_until(
        Duration::from_secs(120),
        "a handler's decision on the forged warning, and the message deleted",
        || async {
            let logged = control_plane(&cloud).iter().any(|r| {
                std::fs::read_to_string(&r.log).is_ok_and(|log| {
                    log.lines()
                        .any(|l| l.contains("termination handler") && l.contains(&victim))
                })
            });
            let attributes = sqs
                .get_queue_attributes()
                .queue_url(&queue)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
                .send()
                .await
                .ok()?;
            let count = |name| {
                attributes
                    .attributes()
                    .and_then(|a| a.get(&name))
                    .map(String::as_str)
                    .unwrap_or("?")
                    .to_string()
            };
            let left = (
                count(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
                count(
                    aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                ),
            );
            (logged && left == ("0".to_string(), "0".to_string())).then_some(left)
        },
    )
    .await;
    eprintln!("forged warning handled (messages left: {decided:?})");
    let victim_log = std::fs::read_to_string(cloud.instance(&victim).log).unwrap_or_default();
    assert!(
        !victim_log.contains("etcd stopped on a stop request"),
        "a forged spot interruption stopped {victim}'s etcd member:\n{victim_log}"
    );
    assert!(
        store
            .get(&request_key(&victim))
            .await
            .expect("read")
            .is_none(),
        "a stop request was written for {victim}"
    );
    let members = wait_for_settled(&cloud, 3, SETTLE).await;
    assert_eq!(members.member_ids, formed.member_ids, "a member changed");

    // 2. Two stop requests at once (as two interruptions for two spot control-plane instances would make), each
    // asking to resume 20 s after its stop: one is granted, the other would leave 1 of 3 voters and waits.
    let resume_after = Duration::from_secs(20);
    let ask = |id: String| {
        let store = store.clone();
        async move {
            let answer = request_stop_resuming_after(
                &store,
                CLUSTER,
                &id,
                "test: two at once",
                Duration::from_secs(15),
                Some(resume_after),
            )
            .await;
            // As the handler does once its wait is over, answered or not.
            withdraw(&store, CLUSTER, &id).await.expect("withdraw");
            (id, answer)
        }
    };
    let asked_at = Instant::now();
    let (first, second) = tokio::join!(ask(instances[1].clone()), ask(instances[2].clone()));
    let answered: Vec<&String> = [&first, &second]
        .into_iter()
        .filter(|(_, a)| a.is_ok())
        .map(|(id, _)| id)
        .collect();
    eprintln!("two stop requests at once: {first:?}, {second:?}");
    assert_eq!(
        answered.len(),
        1,
        "exactly one of two simultaneous stops may be granted: {first:?}, {second:?}"
    );
    let stopped = answered[0].clone();
    let waited = if first.0 == stopped { &second } else { &first };
    assert!(
        matches!(waited.1, Err(StopRequestError::NoAnswer { .. })),
        "{waited:?}"
    );
    let waited_log = std::fs::read_to_string(cloud.instance(&waited.0).log).unwrap_or_default();
    assert!(
        waited_log.contains("not granted"),
        "{} never refused its stop:\n{waited_log}",
        waited.0
    );

    // 3. The granted stop's end never comes (its instance keeps running): its member resumes within its bound.
    let stopped_record = cloud.instance(&stopped);
    let log = std::fs::read_to_string(&stopped_record.log).unwrap_or_default();
    assert!(
        log.contains("etcd stopped on a stop request"),
        "{stopped} answered without stopping:\n{log}"
    );
    let healed = wait_until(
        resume_after + Duration::from_secs(90),
        "the stopped member healthy again, three voters",
        || async {
            let m = settled_membership(&cloud, 3).await?;
            if member_answers(&stopped_record).await {
                Ok(m)
            } else {
                Err(format!("{stopped}'s member does not answer yet"))
            }
        },
    )
    .await;
    eprintln!(
        "{stopped}'s member healthy again {:?} after the request (resume bound {resume_after:?})",
        asked_at.elapsed()
    );
    assert_eq!(healed.member_ids, formed.member_ids, "a member changed");
    let log = std::fs::read_to_string(&stopped_record.log).unwrap_or_default();
    assert!(
        log.contains("resuming its etcd member"),
        "{stopped}'s nodeup never said it resumed:\n{log}"
    );
    assert!(
        store
            .get(&request_key(&stopped))
            .await
            .expect("read")
            .is_none(),
        "the resumed member's request is still there"
    );
}

/// Whether one member answers a status request within 2 s.
async fn member_answers(record: &localcloud::state::InstanceRecord) -> bool {
    match connect_member(record).await {
        Ok(mut client) => matches!(
            tokio::time::timeout(Duration::from_secs(2), client.status()).await,
            Ok(Ok(_))
        ),
        Err(_) => false,
    }
}
