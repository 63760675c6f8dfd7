//! Each member's health as its supervisor publishes it (`etcd/health/<instance-id>.json`), and the judgement
//! of those reports that `ballast validate cluster` and `ballast etcd status` show. Publishing and reading them is
//! `ballast_store::etcd::health`'s.

use serde::{Deserialize, Serialize};

use crate::layout::ClusterPaths;

/// A member's health as its supervisor last published it (`etcd/health/<instance-id>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthReport {
    pub instance_id: String,
    pub peer_url: String,
    pub client_url: String,
    /// RFC 3339 time of the report.
    pub updated_at: String,
    /// Unix seconds of the report (for freshness checks).
    pub updated_unix: i64,
    /// The epoch of the local data, if any.
    pub local_epoch: Option<u64>,
    /// Whether this member's etcd answers.
    pub running: bool,
    pub member_id: Option<String>,
    pub is_learner: bool,
    pub is_leader: bool,
    pub raft_index: u64,
    /// Whether the cluster, seen from here, has a leader and a healthy quorum.
    pub cluster_healthy: bool,
    /// The voting members and learners, seen from here (instance ids, or peer URLs of unstarted members).
    pub voting_members: Vec<String>,
    pub learners: Vec<String>,
    /// What the supervisor decided last, in words.
    pub last_step: String,
    /// The last error of the loop, if the last round failed.
    pub last_error: Option<String>,
}

/// How often a supervisor publishes its report at the least (and at once when its view changes): the etcd
/// supervisor's `publish_interval`.
pub const PUBLISH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A published report older than this is not trusted (for restore refusals, `validate cluster` and `etcd
/// status`): three publishing intervals ([`PUBLISH_INTERVAL`]) missed, the supervisor (or its node) has stopped.
pub const REPORT_FRESHNESS: std::time::Duration = std::time::Duration::from_secs(30);

/// What a member's last report can still say of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MemberSeen {
    /// A fresh report says its etcd answers.
    Running,
    /// A fresh report says its etcd does not answer.
    Stopped,
    /// The report is older than [`REPORT_FRESHNESS`]: its supervisor stopped publishing (a stopped or lost
    /// instance, a stopped nodeup), so what it says, running or not, is no longer known.
    Stale,
}

/// What `report` says of its member at `now_unix`, judged by its age against the publishing cadence.
pub fn member_seen(report: &HealthReport, now_unix: i64) -> MemberSeen {
    if now_unix - report.updated_unix > REPORT_FRESHNESS.as_secs() as i64 {
        MemberSeen::Stale
    } else if report.running {
        MemberSeen::Running
    } else {
        MemberSeen::Stopped
    }
}

/// Where a member's health report lives.
pub fn health_key(paths: &ClusterPaths, instance_id: &str) -> String {
    paths.etcd_health(instance_id)
}

/// The prefix of every health report.
pub fn health_prefix(paths: &ClusterPaths) -> String {
    paths.etcd_health_prefix()
}

/// What `ballast validate cluster` and operators see of etcd: the published reports, judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdHealthSummary {
    pub epoch: Option<u64>,
    pub healthy: bool,
    pub voting_members: Vec<String>,
    pub learners: Vec<String>,
    /// Why it is not healthy, in words.
    pub problems: Vec<String>,
}

/// Judges etcd's health from what the supervisors published (`reports`) and the current `epoch` (`None`: never
/// bootstrapped) at `now_unix`: healthy when the newest fresh report of the current epoch says so and shows
/// `expected_members` voting members and no learner.
pub fn judge_health(
    epoch: Option<u64>,
    reports: &[HealthReport],
    now_unix: i64,
    expected_members: usize,
) -> EtcdHealthSummary {
    let mut problems = Vec::new();
    if epoch.is_none() {
        problems.push("etcd was never bootstrapped (no etcd/cluster.json)".to_string());
    }
    let best = trusted_report(reports, epoch, now_unix);
    let (voting, learners) = best.map_or((vec![], vec![]), |r| {
        (r.voting_members.clone(), r.learners.clone())
    });
    if best.is_none() {
        problems.push("no control-plane instance reports a healthy etcd recently".to_string());
    } else {
        if voting.len() != expected_members {
            problems.push(format!(
                "{} voting members, expected {expected_members}",
                voting.len()
            ));
        }
        if !learners.is_empty() {
            problems.push(format!("learners still joining: {}", learners.join(", ")));
        }
    }
    EtcdHealthSummary {
        epoch,
        healthy: problems.is_empty(),
        voting_members: voting,
        learners,
        problems,
    }
}

/// The report whose view of the membership is trusted: the newest fresh report of the current `epoch` that
/// sees a healthy cluster, the leader's on a tie. Supervisors republish as soon as their view changes, so
/// after a member joins the newest report is the first to show it; preferring the leader's report whatever
/// its age kept `validate` waiting for the leader's next periodic publish (up to 10 s).
///
/// Newest is by the report's time to the nanosecond (`updatedAt`, when its view was taken): by the whole second,
/// the leader's older view of the same second won the tie over a joined member's newer one, and `validate`
/// waited for the leader's next round.
fn trusted_report(
    reports: &[HealthReport],
    epoch: Option<u64>,
    now_unix: i64,
) -> Option<&HealthReport> {
    reports
        .iter()
        .filter(|r| now_unix - r.updated_unix <= REPORT_FRESHNESS.as_secs() as i64)
        .filter(|r| r.cluster_healthy && r.local_epoch == epoch)
        .max_by_key(|r| (report_time_nanos(r), r.is_leader))
}

/// A report's time in nanoseconds since the epoch: its `updatedAt` when that parses and agrees with
/// `updatedUnix` to the second, else `updatedUnix` alone.
fn report_time_nanos(report: &HealthReport) -> i128 {
    let whole_seconds = i128::from(report.updated_unix) * 1_000_000_000;
    time::OffsetDateTime::parse(
        &report.updated_at,
        &time::format_description::well_known::Rfc3339,
    )
    .ok()
    .filter(|t| t.unix_timestamp() == report.updated_unix)
    .map_or(whole_seconds, time::OffsetDateTime::unix_timestamp_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(instance: &str, updated_unix: i64, leader: bool, voters: &[&str]) -> HealthReport {
        HealthReport {
            instance_id: instance.to_string(),
            peer_url: String::new(),
            client_url: String::new(),
            updated_at: String::new(),
            updated_unix,
            local_epoch: Some(1),
            running: true,
            member_id: None,
            is_learner: false,
            is_leader: leader,
            raft_index: 0,
            cluster_healthy: true,
            voting_members: voters.iter().map(|v| v.to_string()).collect(),
            learners: vec![],
            last_step: "steady".to_string(),
            last_error: None,
        }
    }

    #[test]
    fn the_judgement_names_every_problem_and_is_healthy_only_without_one() {
        let reports = [report("i-a", 100, true, &["i-a", "i-b", "i-c"])];
        let healthy = judge_health(Some(1), &reports, 101, 3);
        assert!(healthy.healthy, "{healthy:?}");
        assert_eq!(healthy.voting_members, ["i-a", "i-b", "i-c"]);

        let short = judge_health(Some(1), &reports, 101, 5);
        assert_eq!(short.problems, ["3 voting members, expected 5"]);
        assert!(!short.healthy);

        let mut joining = reports[0].clone();
        joining.learners = vec!["i-d".to_string()];
        let learning = judge_health(Some(1), &[joining], 101, 3);
        assert_eq!(learning.problems, ["learners still joining: i-d"]);

        let never = judge_health(None, &reports, 101, 3);
        assert_eq!(
            never.problems,
            [
                "etcd was never bootstrapped (no etcd/cluster.json)",
                "no control-plane instance reports a healthy etcd recently"
            ]
        );
        assert_eq!(never.epoch, None);
    }

    #[test]
    fn a_report_older_than_three_publishing_intervals_says_nothing_of_its_member() {
        let running = report("i-a", 100, true, &["i-a"]);
        assert_eq!(member_seen(&running, 100), MemberSeen::Running);
        assert_eq!(member_seen(&running, 130), MemberSeen::Running);
        assert_eq!(member_seen(&running, 131), MemberSeen::Stale);
        let stopped = HealthReport {
            running: false,
            ..running
        };
        assert_eq!(member_seen(&stopped, 101), MemberSeen::Stopped);
        assert_eq!(member_seen(&stopped, 1000), MemberSeen::Stale);
        assert!(REPORT_FRESHNESS >= 3 * PUBLISH_INTERVAL);
    }

    #[test]
    fn the_newest_view_wins_over_an_older_leader_report() {
        let reports = [
            report("i-leader", 100, true, &["i-a", "i-leader"]),
            report("i-joined", 104, false, &["i-a", "i-joined", "i-leader"]),
        ];
        let best = trusted_report(&reports, Some(1), 105).expect("a trusted report");
        assert_eq!(best.instance_id, "i-joined");
    }

    #[test]
    fn within_one_second_the_later_view_wins_over_the_leader() {
        let at = |unix: i64, fraction: &str| {
            format!(
                "{}.{fraction}Z",
                crate::timestamp::unix_rfc3339(unix).trim_end_matches('Z')
            )
        };
        let mut leader = report("i-leader", 104, true, &["i-a", "i-leader"]);
        leader.updated_at = at(104, "100");
        let mut joined = report("i-joined", 104, false, &["i-a", "i-joined", "i-leader"]);
        joined.updated_at = at(104, "900");
        let both = [leader.clone(), joined.clone()];
        let best = trusted_report(&both, Some(1), 105).expect("a trusted report");
        assert_eq!(best.instance_id, "i-joined");
        // An updatedAt that disagrees with updatedUnix is not believed: the whole second decides, and the
        // leader wins that tie.
        joined.updated_at = at(90, "900");
        let both = [leader, joined];
        let best = trusted_report(&both, Some(1), 105).expect("a trusted report");
        assert_eq!(best.instance_id, "i-leader");
    }

    #[test]
    fn the_leader_wins_a_tie_and_stale_unhealthy_or_other_epoch_reports_never_count() {
        let mut unhealthy = report("i-minority", 110, false, &["i-minority"]);
        unhealthy.cluster_healthy = false;
        let mut old_epoch = report("i-old", 110, false, &["i-old"]);
        old_epoch.local_epoch = Some(0);
        let reports = [
            report("i-follower", 104, false, &["i-a"]),
            report("i-leader", 104, true, &["i-a", "i-b"]),
            unhealthy,
            old_epoch,
        ];
        let best = trusted_report(&reports, Some(1), 110).expect("a trusted report");
        assert_eq!(best.instance_id, "i-leader");
        let later = 110 + REPORT_FRESHNESS.as_secs() as i64 + 1;
        let stale = trusted_report(&reports, Some(1), later);
        assert!(stale.is_none(), "{stale:?}");
    }
}
