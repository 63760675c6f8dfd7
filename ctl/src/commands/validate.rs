//! `validate cluster`: is the cluster up? Every instance group's Auto Scaling Group has its minSize in
//! service; every such instance's nodeup reported it Configured with its group's current node spec; etcd is
//! healthy with every member voting. Each check prints ok or fail with its reason. A check that cannot be made
//! (AWS or the state store failed) fails, with the failure as its reason: `--wait` then tries again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aws_sdk_autoscaling::types::{AutoScalingGroup, LifecycleState};
use ballast_state::duration::human_duration;
use ballast_state::etcd::health::EtcdHealthSummary;
use ballast_state::irsa::IrsaSettings;
use ballast_state::layout::ClusterPaths;
use ballast_state::report::{NodeReport, Phase};
use ballast_state::spec::{ClusterConfig, Role};
use ballast_store::etcd::health::cluster_health;
use ballast_store::store::StateStore;
use serde::Serialize;

use super::validate_kube_run::{kubernetes_checks, KubeInputs, KubeOutcome};
use super::{require_cluster, Context};
use crate::cli::{OutputFormat, ValidateArgs, ValidateWhat};
use crate::cloud::aws::{auto_scaling_groups, cluster_instances, cluster_instances_among};
use crate::cloud::error::UpdateError;
use crate::cloud::kinds::oidc_discovery;
use crate::cloud::{CallLog, Cloud};
use crate::error::CommandError;
use crate::output;
use crate::reports::cache::ReportCache;
use crate::reports::expected_members;
use crate::reports::nodes::{untrusted_reason, NodeSpecs, ReportRead, ReportReader, SpecState};

/// How long `--wait` pauses between checks: a check after the first reads only what changed (see [`Memo`]).
const RECHECK: Duration = Duration::from_millis(500);

/// What one check keeps for the next in `--wait`'s loop, so that a check reads only what changed: the reports
/// (by version, [`ReportReader`]) and each instance's private DNS name (EC2 never changes it while the instance
/// lives, so EC2 is described again only when an instance in service is not known yet).
struct Memo {
    reports: ReportReader,
    node_names: BTreeMap<String, String>,
    /// Where the names are kept for the next run (and the reports, by the reader).
    cache: Option<ReportCache>,
}

/// One check and its outcome.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Check {
    /// What was checked: `instance group nodes`, `node i-0abc (nodes)`, `etcd`.
    name: String,
    /// False only for a failure: a check that could not be made (`checked` false) does not fail validation.
    ok: bool,
    /// False when the check could not be made and its reason says why (the Kubernetes API where no kubelet
    /// runs): shown as `not checked`, never as a pass.
    checked: bool,
    /// Why it passed or failed, in words (and what to do about a failure).
    reason: String,
}

impl Check {
    /// The RESULT column: `ok`, `fail` or `not checked`.
    fn result(&self) -> &'static str {
        match (self.checked, self.ok) {
            (false, _) => "not checked",
            (true, true) => "ok",
            (true, false) => "fail",
        }
    }
}

/// What `validate cluster -o json|yaml` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Validation {
    cluster: String,
    valid: bool,
    checks: Vec<Check>,
    /// etcd's health as judged from the supervisors' reports (absent when it could not be read).
    etcd: Option<EtcdHealthSummary>,
}

impl Validation {
    fn failures(&self) -> usize {
        self.checks.iter().filter(|c| !c.ok).count()
    }
}

pub async fn run(context: &Context, args: ValidateArgs) -> Result<(), CommandError> {
    let ValidateWhat::Cluster(args) = args.what;
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let completed = registry.load_completed(&name).await?;
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    let cloud = Cloud::connect(&region, CallLog::new()).await;
    let deadline = args.wait.map(|w| tokio::time::Instant::now() + w);
    let mut last_progress = String::new();
    let cache = ReportCache::from_env(&registry.store().url(), &name);
    let mut memo = Memo {
        node_names: cache
            .as_ref()
            .map(ReportCache::load_names)
            .unwrap_or_default(),
        reports: ReportReader::new(registry.store().clone(), ClusterPaths::new(&name))
            .with_cache(cache.clone()),
        cache,
    };
    let mut checks_made = 0u32;
    let validation = loop {
        let started = tokio::time::Instant::now();
        let validation = validate(&cloud, registry.store(), &completed, &mut memo).await;
        let now = tokio::time::Instant::now();
        checks_made += 1;
        tracing::info!(
            check = checks_made,
            seconds = format!("{:.2}", (now - started).as_secs_f64()),
            valid = validation.valid,
            failing = validation.failures(),
            failing_checks = validation
                .checks
                .iter()
                .filter(|c| !c.ok)
                .take(3)
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            "validate: check made"
        );
        match deadline {
            Some(deadline) if !validation.valid && now < deadline => {
                // Said again only when what fails changes: a long wait does not flood the terminal.
                let failing: Vec<&str> = validation
                    .checks
                    .iter()
                    .filter(|c| !c.ok)
                    .map(|c| c.name.as_str())
                    .collect();
                let progress = format!(
                    "{} of {} checks failing: {}",
                    failing.len(),
                    validation.checks.len(),
                    failing.join(", ")
                );
                if progress != last_progress {
                    eprintln!(
                        "validate: {progress}; checking again every {}s for up to {} more",
                        RECHECK.as_secs_f64(),
                        human_duration(Duration::from_secs(
                            (deadline - now).as_secs_f64().ceil() as u64
                        ))
                    );
                    last_progress = progress;
                }
                tokio::time::sleep(RECHECK.min(deadline - now)).await;
            }
            _ => break validation,
        }
    };
    let text = match args.output {
        OutputFormat::Json => output::json(&[&validation])?,
        OutputFormat::Yaml => output::yaml_documents(&[&validation])?,
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = validation
                .checks
                .iter()
                .map(|c| vec![c.name.clone(), c.result().to_string(), c.reason.clone()])
                .collect();
            output::table(&["CHECK", "RESULT", "REASON"], &rows)
        }
    };
    print!("{text}");
    if validation.valid {
        eprintln!("Cluster {name} is valid.");
        return Ok(());
    }
    let waited = args
        .wait
        .filter(|w| !w.is_zero())
        .map_or(String::new(), |w| {
            format!(" after waiting {}", human_duration(w))
        });
    Err(CommandError::NotReady(format!(
        "cluster {name} is not valid{waited}: {} of {} checks failed (the reasons are above)",
        validation.failures(),
        validation.checks.len()
    )))
}

/// Makes every check once.
async fn validate(
    cloud: &Cloud,
    store: &StateStore,
    completed: &ClusterConfig,
    memo: &mut Memo,
) -> Validation {
    let name = completed.name().to_string();
    let paths = ClusterPaths::new(&name);
    let mut checks = Vec::new();
    // What the Kubernetes checks need of the instances (None: the groups could not be read).
    let mut kube_inputs: Option<KubeInputs> = None;

    // (a) and (b): each group's Auto Scaling Group, and the reports of its instances in service.
    let resource_names: Vec<String> = completed
        .instance_groups
        .iter()
        .map(|ig| format!("{}.{name}", ig.metadata.name))
        .collect();
    let described = describe_groups(cloud, &name, &resource_names).await;
    // The control-plane instances in service, to hold etcd's reported members against (None: unknown).
    let control_plane = described
        .as_ref()
        .ok()
        .and_then(|found| control_plane_in_service(completed, &resource_names, found));
    // (a) and (b) beside (c) etcd and (d) the state bucket: their reads do not depend on each other.
    let groups_part = async {
        match described {
            Err(reason) => checks.push(Check {
                name: "instance groups".to_string(),
                ok: false,
                checked: true,
                reason,
            }),
            Ok(found) => {
                let asg_of = |resource: &str| group_named(&found, resource);
                // Every instance in service, to read all their reports in one look.
                let all_in_service: Vec<&str> = resource_names
                    .iter()
                    .filter_map(|resource| asg_of(resource))
                    .flat_map(in_service_ids)
                    .collect();
                // The reads of this part at once: EC2's names for the instances, their reports, the groups' node
                // specs (one after another, on a busy emulator these waits added up to a second).
                let mut node_specs = NodeSpecs::new(store, &paths);
                let groups: Vec<&str> = completed
                    .instance_groups
                    .iter()
                    .map(|ig| ig.metadata.name.as_str())
                    .collect();
                let Memo {
                    reports: reader,
                    node_names: names,
                    cache,
                } = memo;
                let (names_failed, fetched, _) = tokio::join!(
                    node_names(cloud, &name, &all_in_service, names, cache.as_ref()),
                    reader.fetch(&all_in_service),
                    // A failed read shows again, with its reason, when each group asks for its spec below.
                    node_specs.prefetch(&groups),
                );
                checks.extend(names_failed);
                let reports = fetched.map_err(|e| e.to_string()).map(|anchor| {
                    reader.judge(
                        anchor.as_ref(),
                        all_in_service
                            .iter()
                            .map(|id| (*id, names.get(*id).map(String::as_str))),
                    )
                });
                let kube_inputs = kube_inputs.get_or_insert_with(KubeInputs::default);
                for (ig, resource) in completed.instance_groups.iter().zip(&resource_names) {
                    let group = &ig.metadata.name;
                    let min = ig.spec.min_size.unwrap_or(0) as usize;
                    let Some(asg) = asg_of(resource) else {
                        checks.push(Check {
                        name: format!("instance group {group}"),
                        ok: false,
                        checked: true,
                        reason: format!(
                            "AutoScalingGroup {resource} does not exist: run `ballast update cluster {name} --yes`"
                        ),
                    });
                        continue;
                    };
                    let in_service = in_service_ids(asg);
                    let others = asg.instances().len() - in_service.len();
                    let others = if others > 0 {
                        format!(", {others} other (pending, terminating or on standby)")
                    } else {
                        String::new()
                    };
                    checks.push(Check {
                        name: format!("instance group {group}"),
                        ok: in_service.len() >= min,
                        checked: true,
                        reason: format!(
                            "{} InService of minSize {min} in AutoScalingGroup {resource}{others}",
                            in_service.len()
                        ),
                    });
                    // A bastion writes no report and is no Kubernetes node (docs/spec.md, "Bastions"): its
                    // group's instances in service are all there is to check.
                    if ig.spec.role == Role::Bastion {
                        continue;
                    }
                    let want = node_specs.current(group).await;
                    for id in in_service {
                        let judged = match (&want, &reports) {
                            (Ok(want), Ok(reports)) => {
                                let report =
                                    reports.get(id).cloned().unwrap_or(ReportRead::Missing);
                                let truth = Truth {
                                    cluster: &name,
                                    group,
                                    role: ig.spec.role,
                                };
                                Ok(judge_report(&paths, id, &report, want.as_deref(), &truth))
                            }
                            (Err(e), _) => Err(e.to_string()),
                            (_, Err(e)) => Err(e.clone()),
                        };
                        let (ok, mut reason) = judged.unwrap_or_else(|e| {
                            (false, format!("cannot read the state store: {e}"))
                        });
                        let mut private_ip = None;
                        if let Ok(reports) = &reports {
                            if let Some(ReportRead::Found { report, .. }) = reports.get(id) {
                                // A control-plane node's add-on applier, shown (not judged: docs/addons.md).
                                if let Some(addons) = &report.addons {
                                    reason.push_str(&format!("; add-ons: {}", addons.summary()));
                                }
                                if ig.spec.role == Role::ControlPlane {
                                    kube_inputs
                                        .control_plane
                                        .push((id.to_string(), (**report).clone()));
                                }
                                private_ip = report.private_ip.clone();
                            }
                        }
                        kube_inputs
                            .in_service
                            .insert(id.to_string(), (group.clone(), private_ip));
                        checks.push(Check {
                            name: format!("node {id} ({group})"),
                            ok,
                            checked: true,
                            reason,
                        });
                    }
                }
            }
        }
    };
    let ((), (etcd_result, etcd), bucket, discovery) = tokio::join!(
        groups_part,
        // (c) etcd.
        etcd_check(store, &paths, completed, control_plane.as_ref()),
        // (d) the state bucket that holds the cluster's keys.
        bucket_check(store, completed),
        // (d') IRSA's discovery bucket, whose JWKS every service-account role trusts.
        discovery_bucket_check(completed),
    );
    checks.push(etcd_result);
    checks.extend(bucket);
    checks.extend(discovery);
    // (e) Kubernetes, when the instances could be read (validate_kube says when the API is expected).
    if let Some(inputs) = &kube_inputs {
        for (name, outcome, reason) in kubernetes_checks(cloud, store, completed, inputs).await {
            checks.push(Check {
                name,
                ok: outcome != KubeOutcome::Fail,
                checked: outcome != KubeOutcome::NotChecked,
                reason,
            });
        }
    }
    Validation {
        cluster: name,
        valid: checks.iter().all(|c| c.ok),
        checks,
        etcd,
    }
}

/// The Auto Scaling Group of this name among those described.
fn group_named<'a>(found: &'a [AutoScalingGroup], name: &str) -> Option<&'a AutoScalingGroup> {
    found
        .iter()
        .find(|g| g.auto_scaling_group_name() == Some(name))
}

/// The instances in service of the cluster's control-plane groups; `None` when none of those groups exists.
fn control_plane_in_service(
    completed: &ClusterConfig,
    resource_names: &[String],
    found: &[AutoScalingGroup],
) -> Option<BTreeSet<String>> {
    let mut control_plane: Option<BTreeSet<String>> = None;
    for (ig, resource) in completed.instance_groups.iter().zip(resource_names) {
        if ig.spec.role != Role::ControlPlane {
            continue;
        }
        if let Some(asg) = group_named(found, resource) {
            control_plane
                .get_or_insert_with(BTreeSet::new)
                .extend(in_service_ids(asg).into_iter().map(str::to_string));
        }
    }
    control_plane
}

/// The ids of a group's instances in service, sorted.
fn in_service_ids(asg: &AutoScalingGroup) -> Vec<&str> {
    let mut ids: Vec<&str> = asg
        .instances()
        .iter()
        .filter(|i| i.lifecycle_state() == Some(&LifecycleState::InService))
        .filter_map(|i| i.instance_id())
        .collect();
    ids.sort_unstable();
    ids
}

/// Each running instance's private DNS name (`names`, kept between checks and, in the operator's cache, between
/// runs): the node a report stored under its id must be signed by. EC2 never renames an instance nor reuses an
/// id, so only the instances in service not named yet are described (all of the cluster's when none is). When
/// EC2 cannot be read, a failed check says so (the reports of instances not named then show as untrusted).
async fn node_names(
    cloud: &Cloud,
    cluster: &str,
    in_service: &[&str],
    names: &mut BTreeMap<String, String>,
    cache: Option<&ReportCache>,
) -> Option<Check> {
    let unnamed: Vec<&str> = in_service
        .iter()
        .copied()
        .filter(|id| !names.contains_key(*id))
        .collect();
    if unnamed.is_empty() {
        return None;
    }
    let described = if names.is_empty() {
        cluster_instances(cloud, cluster, &["pending", "running"]).await
    } else {
        cluster_instances_among(cloud, cluster, &unnamed).await
    };
    match described {
        Ok(found) => {
            names.extend(found.iter().filter_map(|i| {
                Some((
                    i.instance_id()?.to_string(),
                    i.private_dns_name().filter(|n| !n.is_empty())?.to_string(),
                ))
            }));
            // Only instances in service are worth keeping: the others are gone or going.
            names.retain(|id, _| in_service.contains(&id.as_str()));
            if let Some(cache) = cache {
                cache.save_names(names);
            }
            None
        }
        Err(e) => Some(Check {
            name: "instances".to_string(),
            ok: false,
            checked: true,
            reason: format!("cannot tell which node should have signed each report: {e}"),
        }),
    }
}

/// Whether the S3 state bucket is private, versioned and encrypted by default (docs/security.md); `None` for a
/// file store, which has no such settings.
async fn bucket_check(store: &StateStore, completed: &ClusterConfig) -> Option<Check> {
    let StateStore::S3(s3) = store else {
        return None;
    };
    let kms_key = completed
        .cluster
        .spec
        .state_store
        .as_ref()
        .and_then(|s| s.kms_key_id.as_deref());
    let (ok, reason) = match s3.posture().await {
        Ok(posture) => {
            let problems = posture.problems(kms_key);
            let reason = if problems.is_empty() {
                format!(
                    "bucket {} blocks public access, keeps versions and encrypts by default",
                    s3.bucket()
                )
            } else {
                problems
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            (problems.is_empty(), reason)
        }
        Err(e) => (false, format!("cannot read the bucket's settings: {e}")),
    };
    Some(Check {
        name: "state bucket".to_string(),
        ok,
        checked: true,
        reason,
    })
}

/// Whether IRSA's discovery bucket grants nothing to anyone through its own ACL (a bucket anyone may write lets
/// anyone replace the JWKS and assume every service-account role); `None` without discovery.
async fn discovery_bucket_check(completed: &ClusterConfig) -> Option<Check> {
    let spec = &completed.cluster.spec;
    IrsaSettings::of(spec)?;
    let region = spec.region.clone().unwrap_or_default();
    let (ok, reason) = match oidc_discovery::discovery_bucket_exposure(&region, spec).await {
        Ok(None) => (
            true,
            "the bucket's ACL grants nothing to anyone (only the two documents are public-read)"
                .to_string(),
        ),
        Ok(Some(exposed)) => (false, exposed),
        Err(e) => (false, format!("cannot read the bucket's ACL: {e}")),
    };
    Some(Check {
        name: "discovery bucket".to_string(),
        ok,
        checked: true,
        reason,
    })
}

/// Whether etcd is healthy with every member voting, and its health as judged from the supervisors' reports.
/// `control_plane`: the control-plane instances in service, when known.
async fn etcd_check(
    store: &StateStore,
    paths: &ClusterPaths,
    completed: &ClusterConfig,
    control_plane: Option<&BTreeSet<String>>,
) -> (Check, Option<EtcdHealthSummary>) {
    let name = completed.name();
    let expected = expected_members(completed);
    let summary = match cluster_health(store, paths, expected).await {
        Ok(summary) => summary,
        Err(e) => {
            let check = Check {
                name: "etcd".to_string(),
                ok: false,
                checked: true,
                reason: format!("cannot read etcd's health: {e}"),
            };
            return (check, None);
        }
    };
    // A report outlives its instance by up to its freshness window: members must be the control-plane
    // instances in service now, or a cluster that just lost one would pass.
    let mismatch = control_plane
        .filter(|_| summary.healthy)
        .and_then(|live| members_mismatch(&summary.voting_members, live));
    let healthy = summary.healthy && mismatch.is_none();
    let reason = if let Some(mismatch) = mismatch {
        format!("{mismatch} (the supervisors are healing it; `ballast etcd status {name}`)")
    } else if healthy {
        format!(
            "healthy, {} voting members of {expected} (epoch {})",
            summary.voting_members.len(),
            summary.epoch.unwrap_or_default()
        )
    } else {
        format!(
            "{} (`ballast etcd status {name}` shows each member's report)",
            summary.problems.join("; ")
        )
    };
    let check = Check {
        name: "etcd".to_string(),
        ok: healthy,
        checked: true,
        reason,
    };
    (check, Some(summary))
}

/// How etcd's voting members differ from the control-plane instances in service, in words; `None` when they
/// are the same.
fn members_mismatch(voters: &[String], in_service: &BTreeSet<String>) -> Option<String> {
    let voters: BTreeSet<&String> = voters.iter().collect();
    let gone: Vec<&str> = voters
        .iter()
        .filter(|v| !in_service.contains(v.as_str()))
        .map(|v| v.as_str())
        .collect();
    let missing: Vec<&str> = in_service
        .iter()
        .filter(|i| !voters.contains(i))
        .map(String::as_str)
        .collect();
    let mut problems = Vec::new();
    if !gone.is_empty() {
        problems.push(format!(
            "voting members not in service: {}",
            gone.join(", ")
        ));
    }
    if !missing.is_empty() {
        problems.push(format!(
            "control-plane instances not yet voting members: {}",
            missing.join(", ")
        ));
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// The Auto Scaling Groups of these names that exist; `Err` is the reason the call failed.
async fn describe_groups(
    cloud: &Cloud,
    cluster: &str,
    names: &[String],
) -> Result<Vec<AutoScalingGroup>, String> {
    auto_scaling_groups(cloud, cluster, names)
        .await
        .map_err(|e| {
            tracing::info!(error = %e, "validate: describing the auto scaling groups failed");
            match e {
                // The hint says what to do; the SDK's whole message (with -v above) can run to many lines.
                UpdateError::Aws {
                    resource,
                    operation,
                    message,
                    hint,
                    ..
                } => {
                    let first_line = message.lines().next().unwrap_or_default();
                    if hint.is_empty() {
                        format!("{resource}: {operation} failed: {first_line}")
                    } else {
                        format!("{resource}: {operation} failed{hint}")
                    }
                }
                other => other.to_string(),
            }
        })
}

/// What AWS says of an instance in service: its cluster, and the group (its Auto Scaling Group, which gave it
/// its `ballast.dev/instance-group` and `ballast.dev/role` tags) and that group's role.
struct Truth<'a> {
    cluster: &'a str,
    group: &'a str,
    role: Role,
}

/// How a report's claims differ from what AWS says of the instance whose key it is stored under; `None` when
/// they agree. Any node role may write under `reports/` (S3 policies cannot tie a key to the writing instance),
/// so a report is trusted only when it describes the instance it is filed for.
fn claims_mismatch(report: &NodeReport, id: &str, truth: &Truth<'_>) -> Option<String> {
    let mut wrong = Vec::new();
    if report.instance_id != id {
        wrong.push(format!("instance {}", report.instance_id));
    }
    if report
        .cluster_name
        .as_deref()
        .is_some_and(|c| c != truth.cluster)
    {
        wrong.push(format!(
            "cluster {}",
            report.cluster_name.as_deref().unwrap_or_default()
        ));
    }
    if report
        .instance_group
        .as_deref()
        .is_some_and(|g| g != truth.group)
    {
        wrong.push(format!(
            "group {}",
            report.instance_group.as_deref().unwrap_or_default()
        ));
    }
    if report.role.is_some_and(|r| r != truth.role) {
        wrong.push(format!("role {:?}", report.role.unwrap_or(truth.role)));
    }
    (!wrong.is_empty()).then(|| wrong.join(", "))
}

/// Whether instance `id`'s nodeup report says it is configured with its group's current node spec (`want`),
/// and why.
fn judge_report(
    paths: &ClusterPaths,
    id: &str,
    report: &ReportRead,
    want: Option<&str>,
    truth: &Truth<'_>,
) -> (bool, String) {
    let cluster = truth.cluster;
    let (key, report) = match report {
        ReportRead::Missing => {
            return (
                false,
                format!(
                    "no nodeup report ({}<role-id>:{id}.json): nodeup has not finished its first run on it, or \
                     cannot reach the state store (see the instance's console output)",
                    paths.reports_prefix()
                ),
            )
        }
        ReportRead::Unreadable { key, why } => {
            return (false, format!("{key} is not a nodeup report: {why}"))
        }
        ReportRead::Untrusted { key, why } => {
            return (false, format!("{key} is {}", untrusted_reason(why)))
        }
        ReportRead::Found { key, report } => (key, report),
    };
    if let Some(claims) = claims_mismatch(report, id, truth) {
        return (
            false,
            format!(
                "{key} is not trusted: it claims {claims}, but AWS says {id} is in group {} ({:?}) of cluster \
                 {cluster}; another node wrote it, or it was copied: delete it and restart nodeup on {id} so that \
                 it writes its own",
                truth.group, truth.role
            ),
        );
    }
    if report.phase == Phase::Failed {
        let error = report
            .errors
            .first()
            .map_or("no error recorded".to_string(), Clone::clone);
        return (false, format!("nodeup failed: {error}"));
    }
    let have = report.node_spec_sha256.as_deref();
    match SpecState::judge(have, want) {
        SpecState::Current => (true, "Configured with the current node spec".to_string()),
        SpecState::Outdated => (
            false,
            format!(
                "Configured with an older node spec (sha256 {}, the group's is now {}): replace the instance so \
                 that it boots with the current one",
                have.unwrap_or_default(),
                want.unwrap_or_default()
            ),
        ),
        SpecState::Unknown if want.is_none() => (
            false,
            format!(
                "its group has no node spec in the state store: run `ballast update cluster {cluster} --yes`"
            ),
        ),
        SpecState::Unknown => (
            false,
            "Configured, but its report names no node spec sha256".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::report_signature::UntrustedReport;

    #[test]
    fn etcd_members_are_held_against_the_instances_in_service() {
        let live: BTreeSet<String> = ["i-a", "i-b", "i-c"].map(String::from).into();
        let voters = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            members_mismatch(&voters(&["i-c", "i-a", "i-b"]), &live),
            None
        );
        // Just terminated: its report (or a survivor's) still lists it; its replacement is not in yet.
        let mut replaced = live.clone();
        replaced.remove("i-a");
        replaced.insert("i-d".into());
        assert_eq!(
            members_mismatch(&voters(&["i-a", "i-b", "i-c"]), &replaced).as_deref(),
            Some(
                "voting members not in service: i-a; control-plane instances not yet voting members: i-d"
            )
        );
    }

    #[test]
    fn reports_are_judged_against_the_current_node_spec() {
        let paths = ClusterPaths::new("c.example.com");
        let truth = Truth {
            cluster: "c",
            group: "nodes",
            role: Role::Node,
        };
        let judge =
            |r: &ReportRead, want: Option<&str>| judge_report(&paths, "i-1", r, want, &truth);
        let (ok, reason) = judge(&ReportRead::Missing, Some("a"));
        assert!(!ok);
        assert!(
            reason.contains("c.example.com/reports/<role-id>:i-1.json"),
            "{reason}"
        );
        let key = paths.report("AROAEXAMPLE:i-1");
        let found = |report: NodeReport| ReportRead::Found {
            key: key.clone(),
            report: Box::new(report),
        };

        let mut report = NodeReport::new("i-1", "0.1.0", "2025-01-01T00:00:00Z");
        report.phase = Phase::Configured;
        report.node_spec_sha256 = Some("a".into());
        let found_now = found(report.clone());
        assert!(judge(&found_now, Some("a")).0);
        let (ok, reason) = judge(&found_now, Some("b"));
        assert!(!ok && reason.contains("older node spec"), "{reason}");
        let (ok, reason) = judge(&found_now, None);
        assert!(!ok && reason.contains("update cluster c --yes"), "{reason}");

        // A worker that copied or wrote another instance's report: each false claim is named.
        let mut forged = report.clone();
        forged.instance_group = Some("control-plane-us-west-2a".into());
        forged.role = Some(Role::ControlPlane);
        let (ok, reason) = judge(&found(forged), Some("a"));
        assert!(!ok);
        assert!(
            reason.starts_with(
                "c.example.com/reports/AROAEXAMPLE:i-1.json is not trusted: it claims group control-plane-us-west-2a, role \
                 ControlPlane, but AWS says i-1 is in group nodes (Node) of cluster c"
            ),
            "{reason}"
        );
        let mut elsewhere = report.clone();
        elsewhere.instance_id = "i-2".into();
        elsewhere.cluster_name = Some("other".into());
        let (ok, reason) = judge(&found(elsewhere), Some("a"));
        assert!(
            !ok && reason.contains("it claims instance i-2, cluster other,"),
            "{reason}"
        );

        // A report not signed by the instance's own node is not counted, whatever it claims.
        let (ok, reason) = judge(
            &ReportRead::Untrusted {
                key: key.clone(),
                why: UntrustedReport::WrongNode {
                    signer: "ip-10-0-2-9.ec2.internal".into(),
                    expected: "ip-10-0-1-4.ec2.internal".into(),
                },
            },
            Some("a"),
        );
        assert!(!ok);
        assert_eq!(
            reason,
            "c.example.com/reports/AROAEXAMPLE:i-1.json is not trusted, not counted: it is signed by node \
             ip-10-0-2-9.ec2.internal, but EC2 says the instance is ip-10-0-1-4.ec2.internal; another node or a \
             copy wrote it: delete it and restart nodeup on the instance so that it writes its own"
        );
        let (ok, reason) = judge(
            &ReportRead::Untrusted {
                key: key.clone(),
                why: UntrustedReport::Unsigned,
            },
            Some("a"),
        );
        assert!(!ok && reason.contains("it is not signed"), "{reason}");

        report.phase = Phase::Failed;
        report.errors.push("fetching the node spec: denied".into());
        let (ok, reason) = judge(&found(report), Some("a"));
        assert!(!ok);
        assert_eq!(reason, "nodeup failed: fetching the node spec: denied");
    }
}
