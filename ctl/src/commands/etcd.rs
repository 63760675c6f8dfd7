//! `etcd backup`, `etcd list-backups`, `etcd restore-backup` and `etcd status`: thin, on `ballast_state::etcd`.
//!
//! The CLI never talks to etcd: it writes requests and decisions to the state store (`etcd/backup-request.json`,
//! a new epoch in `etcd/cluster.json`) and reads what the supervisors publish there; the supervisors act.

use std::time::Duration;

use ballast_state::duration::human_duration;
use ballast_state::etcd::backup::{request_key, BackupMetadata};
use ballast_state::etcd::health::{
    health_prefix, member_seen, EtcdHealthSummary, HealthReport, MemberSeen,
};
use ballast_state::etcd::record::{ClusterRecord, Origin};
use ballast_state::layout::ClusterPaths;
use ballast_state::timestamp::unix_rfc3339;
use ballast_store::etcd::backup::{
    self, fetch_verified_snapshot, list_backups, request_backup, BackupError,
};
use ballast_store::etcd::health::{cluster_health, read_health};
use ballast_store::etcd::record::{read_record, RecordError};
use ballast_store::etcd::restore::{request_restore_with_options, RestoreOptions};
use serde::Serialize;

use super::{require_cluster, Context};
use crate::cli::{EtcdArgs, EtcdBackupArgs, EtcdListArgs, EtcdRestoreArgs, EtcdWhat, OutputFormat};
use crate::error::{json_error, yaml_error, CommandError};
use crate::output;
use crate::reports::expected_members;

/// How often `etcd backup --wait` looks for the backup.
const BACKUP_POLL: Duration = Duration::from_secs(1);

pub async fn run(context: &Context, args: EtcdArgs) -> Result<(), CommandError> {
    match args.what {
        EtcdWhat::Backup(args) => backup(context, args).await,
        EtcdWhat::ListBackups(args) => list(context, args).await,
        EtcdWhat::RestoreBackup(args) => restore(context, args).await,
        EtcdWhat::Status(args) => status(context, args).await,
    }
}

/// A [`BackupError`] of cluster `name` as a command error, with what to do.
fn etcd_error(name: &str) -> impl Fn(BackupError) -> CommandError + '_ {
    move |source| {
        let hint = match &source {
            BackupError::UnknownBackup { available, .. } if available.is_empty() => {
                " (the etcd leader stores one every spec.etcd.backup.interval once the supervisors run)".to_string()
            }
            BackupError::UnknownBackup { .. } => {
                format!(" (`ballast etcd list-backups {name}` shows them)")
            }
            BackupError::ClusterHealthy { .. } => format!(
                ". Restoring now would discard the running cluster's data: everything written since the \
                 backup was taken. If etcd really must go back, first take a backup of what it holds now \
                 (`ballast etcd backup {name}`); `ballast validate cluster {name}` shows its health; \
                 `--force` restores anyway, and the running members then discard their data"
            ),
            _ => String::new(),
        };
        CommandError::Etcd {
            cluster: name.to_string(),
            source: Box::new(source),
            hint,
        }
    }
}

/// Who asks, for the records the supervisors read (`ballast etcd restore-backup by user@host pid N`).
fn requested_by(context: &Context, verb: &str) -> String {
    format!("ballast etcd {verb} by {}", context.writer.holder)
}

async fn backup(context: &Context, args: EtcdBackupArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let (store, paths) = (registry.store(), ClusterPaths::new(&name));
    let before = backup::backup_ids(store, &paths)
        .await
        .map_err(etcd_error(&name))?;
    let requested_unix = request_backup(store, &paths, &requested_by(context, "backup"))
        .await
        .map_err(etcd_error(&name))?;
    let request = request_key(&paths);
    if args.wait.is_zero() {
        eprintln!(
            "Backup of {name}'s etcd requested ({request}): the leader's supervisor takes it on its next round; \
             `ballast etcd list-backups {name}` lists it once stored."
        );
        return Ok(());
    }
    eprintln!(
        "Backup of {name}'s etcd requested ({request}); waiting up to {} for the leader's supervisor to store it...",
        human_duration(args.wait)
    );
    let found = backup::wait_for_backup(
        store,
        &paths,
        &before,
        requested_unix,
        args.wait,
        BACKUP_POLL,
    )
    .await
    .map_err(etcd_error(&name))?;
    let Some(taken) = found else {
        let pending = store.modified_unix(&request).await?.is_some();
        let why = if pending {
            format!(
                "The request ({request}) is still pending: no etcd leader's supervisor took it. The supervisors may \
                 not be running, etcd may have no leader, or backups may fail (`ballast etcd status {name}` shows \
                 each member's last error)"
            )
        } else {
            format!(
                "The request was taken, but no backup was stored (`ballast etcd status {name}` shows each member's \
                 last error)"
            )
        };
        return Err(CommandError::NotReady(format!(
            "cluster {name}: no etcd backup was stored within {}. {why}. Check `ballast validate cluster {name}`, \
             then run the command again or wait longer (--wait)",
            human_duration(args.wait)
        )));
    };
    print!("{}", render_backups(&[taken], args.output, false)?);
    Ok(())
}

async fn list(context: &Context, args: EtcdListArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    let paths = ClusterPaths::new(&name);
    // `delete cluster` keeps a deleted cluster's backups: they stay listable (what a restore would need).
    let has_backups = !registry
        .store()
        .list(&paths.etcd_backups())
        .await?
        .is_empty();
    if !has_backups {
        require_cluster(&registry, &name).await?;
    } else if require_cluster(&registry, &name).await.is_err() {
        eprintln!(
            "Cluster {name} is deleted; its etcd backups were kept ({}/{}): `ballast delete cluster {name} \
             --delete-backups --yes` deletes them.",
            registry.store().url(),
            paths.etcd_backups()
        );
    }
    let backups = list_backups(registry.store(), &paths)
        .await
        .map_err(etcd_error(&name))?;
    if backups.is_empty() {
        eprintln!(
            "No etcd backups of {name} in the state store: the etcd leader takes one every backup interval \
             (spec.etcd.backup.interval) once the supervisors run; `ballast etcd backup {name}` asks for one now."
        );
    }
    print!("{}", render_backups(&backups, args.output, true)?);
    Ok(())
}

/// `list-backups` (`listing`: JSON/YAML always a list, even of one or no backup) or the backup `etcd backup`
/// waited for (its table shows the sha256).
fn render_backups(
    backups: &[BackupMetadata],
    format: OutputFormat,
    listing: bool,
) -> Result<String, CommandError> {
    match format {
        OutputFormat::Json if listing => json_list(backups),
        OutputFormat::Json => output::json(backups),
        OutputFormat::Yaml if listing => yaml_serde::to_string(backups).map_err(yaml_error),
        OutputFormat::Yaml => output::yaml_documents(backups),
        OutputFormat::Table if listing => {
            let rows: Vec<Vec<String>> = backups
                .iter()
                .map(|b| {
                    vec![
                        b.id.clone(),
                        unix_rfc3339(b.created_unix),
                        b.revision.to_string(),
                        human_size(b.size),
                        b.member_count.to_string(),
                        b.epoch.to_string(),
                        b.taken_by.clone(),
                    ]
                })
                .collect();
            Ok(output::table(
                &[
                    "ID", "CREATED", "REVISION", "SIZE", "MEMBERS", "EPOCH", "TAKEN BY",
                ],
                &rows,
            ))
        }
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = backups
                .iter()
                .map(|b| {
                    vec![
                        b.id.clone(),
                        b.revision.to_string(),
                        human_size(b.size),
                        b.sha256.clone(),
                    ]
                })
                .collect();
            Ok(output::table(&["ID", "REVISION", "SIZE", "SHA256"], &rows))
        }
    }
}

async fn restore(context: &Context, args: EtcdRestoreArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(Some(&args.cluster_name))?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let (store, paths) = (registry.store(), ClusterPaths::new(&name));
    let id = &args.backup_id;
    if !args.yes {
        let (metadata, _) = fetch_verified_snapshot(store, &paths, id)
            .await
            .map_err(etcd_error(&name))?;
        let current = read_record(store, &paths)
            .await
            .map_err(|e| etcd_error(&name)(e.into()))?;
        let next_epoch = current.as_ref().map_or(1, |c| c.record.epoch + 1);
        println!(
            "Backup {id} of {name}: revision {}, {}, taken by {} at {} from epoch {} ({} members); sha256 {} \
             verified.",
            metadata.revision,
            human_size(metadata.size),
            metadata.taken_by,
            unix_rfc3339(metadata.created_unix),
            metadata.epoch,
            metadata.member_count,
            metadata.sha256,
        );
        println!(
            "A restore would record epoch {next_epoch} (origin restore of {id}) in {}: every etcd supervisor then \
             discards its data, one restores this snapshot into a one-member cluster, and the others join it.",
            paths.etcd_cluster()
        );
        eprintln!(
            "Nothing was changed. A restore is only for a cluster that lost all its etcd members (it is refused \
             while one reports etcd healthy, by the state store's clock, unless --force): run `ballast etcd \
             restore-backup {name} {id} --yes` to record it."
        );
        return Ok(());
    }
    let options = RestoreOptions {
        force: args.force,
        ..RestoreOptions::default()
    };
    let by = requested_by(context, "restore-backup");
    let record = request_restore_with_options(store, &paths, id, &by, options)
        .await
        .map_err(etcd_error(&name))?;
    println!(
        "Restore of backup {id} recorded for {name}: etcd epoch {} ({}).",
        record.epoch,
        paths.etcd_cluster()
    );
    eprintln!(
        "The etcd supervisors now carry it out: they discard their data, one restores the snapshot, the others \
         join it. Follow with `ballast validate cluster {name} --wait 5m`."
    );
    Ok(())
}

/// What `etcd status -o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EtcdStatus {
    cluster: String,
    /// `etcd/cluster.json`; `None` before the first bootstrap.
    record: Option<ClusterRecord>,
    /// Every published health report, by instance id, with what it can still say (`seen`: a report older than
    /// three publishing intervals is `stale`, whatever it says).
    members: Vec<MemberStatus>,
    /// The same judgement as `validate cluster`'s.
    summary: EtcdHealthSummary,
    /// When the reports were judged (Unix seconds).
    #[serde(skip)]
    now_unix: i64,
}

/// A member's last report and what it can still say of it now.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MemberStatus {
    #[serde(flatten)]
    report: HealthReport,
    seen: MemberSeen,
}

async fn status(context: &Context, args: EtcdListArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let completed = registry.load_completed(&name).await?;
    let expected = expected_members(&completed);
    let (store, paths) = (registry.store(), ClusterPaths::new(&name));
    let record_error = |e: RecordError| etcd_error(&name)(e.into());
    let record = read_record(store, &paths)
        .await
        .map_err(record_error)?
        .map(|r| r.record);
    let mut members = read_health(store, &paths).await.map_err(record_error)?;
    members.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    let summary = cluster_health(store, &paths, expected)
        .await
        .map_err(record_error)?;
    let now = ballast_state::timestamp::now_stamp().1;
    let members = members
        .into_iter()
        .map(|report| MemberStatus {
            seen: member_seen(&report, now),
            report,
        })
        .collect();
    let status = EtcdStatus {
        cluster: name.clone(),
        record,
        members,
        summary,
        now_unix: now,
    };
    if status.members.is_empty() {
        eprintln!(
            "No etcd member of {name} has published its health ({}): the supervisors may not be running.",
            health_prefix(&paths)
        );
    }
    let text = match args.output {
        OutputFormat::Json => output::json(&[&status])?,
        OutputFormat::Yaml => output::yaml_documents(&[&status])?,
        OutputFormat::Table => status_table(&status),
    };
    print!("{text}");
    Ok(())
}

fn status_table(status: &EtcdStatus) -> String {
    let mut out = match &status.record {
        None => "Epoch: none (etcd was never bootstrapped: no etcd/cluster.json)\n".to_string(),
        Some(r) => {
            let origin = match &r.origin {
                Origin::Bootstrap => "bootstrap".to_string(),
                Origin::ForceNewCluster {
                    raft_index,
                    lost_members,
                } => format!(
                    "forced new cluster at raft index {raft_index}, lost {}",
                    lost_members.join(", ")
                ),
                Origin::Restore { backup_id, .. } => format!("restore of backup {backup_id}"),
            };
            format!(
                "Epoch: {} ({origin}), seed {}, decided {} by {}\n",
                r.epoch,
                r.seed.as_deref().unwrap_or("(not claimed yet)"),
                r.decided_at,
                r.decided_by
            )
        }
    };
    let s = &status.summary;
    out.push_str(&if s.healthy {
        format!(
            "Health: healthy, {} voting members\n\n",
            s.voting_members.len()
        )
    } else {
        format!("Health: not healthy: {}\n\n", s.problems.join("; "))
    });
    let now = status.now_unix;
    let rows: Vec<Vec<String>> = status
        .members
        .iter()
        .map(|member| {
            let m = &member.report;
            let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
            vec![
                m.instance_id.clone(),
                m.local_epoch.map_or("-".to_string(), |e| e.to_string()),
                match member.seen {
                    MemberSeen::Running => "yes".to_string(),
                    MemberSeen::Stopped => "no".to_string(),
                    // Not "yes" from a report its supervisor stopped renewing: its node may be gone.
                    MemberSeen::Stale => "unknown (stale)".to_string(),
                },
                if m.is_leader {
                    "leader"
                } else if m.is_learner {
                    "learner"
                } else if m.member_id.is_some() {
                    "follower"
                } else {
                    "-"
                }
                .to_string(),
                m.raft_index.to_string(),
                if member.seen == MemberSeen::Stale {
                    "-".to_string()
                } else {
                    yes_no(m.cluster_healthy)
                },
                format!("{}s", (now - m.updated_unix).max(0)),
                m.last_step.clone(),
                m.last_error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    out.push_str(&output::table(
        &[
            "INSTANCE",
            "EPOCH",
            "RUNNING",
            "ROLE",
            "RAFT INDEX",
            "CLUSTER HEALTHY",
            "REPORTED",
            "LAST STEP",
            "LAST ERROR",
        ],
        &rows,
    ));
    out
}

/// Pretty JSON, always a list.
fn json_list<T: Serialize>(items: &[T]) -> Result<String, CommandError> {
    serde_json::to_string_pretty(items)
        .map(|s| s + "\n")
        .map_err(json_error)
}

/// `1.2 MiB`.
fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(instance: &str, updated_unix: i64, running: bool, now: i64) -> MemberStatus {
        let report = HealthReport {
            instance_id: instance.to_string(),
            peer_url: String::new(),
            client_url: String::new(),
            updated_at: String::new(),
            updated_unix,
            local_epoch: Some(1),
            running,
            member_id: Some("8e9e05c52164694d".to_string()),
            is_learner: false,
            is_leader: false,
            raft_index: 42,
            cluster_healthy: true,
            voting_members: vec![],
            learners: vec![],
            last_step: "steady".to_string(),
            last_error: None,
        };
        MemberStatus {
            seen: member_seen(&report, now),
            report,
        }
    }

    /// A member whose supervisor stopped publishing (its instance stopped) is not shown running from its last
    /// report: its state is unknown, and the table says how old the report is.
    #[test]
    fn a_stale_report_shows_its_member_as_unknown_not_running() {
        let now = 10_000;
        let status = EtcdStatus {
            cluster: "demo.example.com".to_string(),
            record: None,
            members: vec![
                member("i-fresh", now - 5, true, now),
                member("i-down", now - 5, false, now),
                member("i-stopped", now - 600, true, now),
            ],
            summary: EtcdHealthSummary {
                epoch: Some(1),
                healthy: false,
                voting_members: vec![],
                learners: vec![],
                problems: vec![],
            },
            now_unix: now,
        };
        let table = status_table(&status);
        let row = |id: &str| {
            table
                .lines()
                .find(|l| l.contains(id))
                .unwrap_or_else(|| panic!("no row for {id}:\n{table}"))
                .to_string()
        };
        assert!(row("i-fresh").contains("yes"), "{table}");
        assert!(row("i-down").contains(" no "), "{table}");
        let stopped = row("i-stopped");
        assert!(stopped.contains("unknown (stale)"), "{table}");
        assert!(!stopped.contains("yes"), "{table}");
        assert!(stopped.contains("600s"), "{table}");
        let json = serde_json::to_value(&status.members[2]).expect("json");
        assert_eq!(json["seen"], "stale");
        assert_eq!(json["instanceId"], "i-stopped");
    }

    #[test]
    fn renders_sizes() {
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(20 * 1024), "20.0 KiB");
        assert_eq!(human_size(3 * 1024 * 1024 + 512 * 1024), "3.5 MiB");
    }
}
