//! `ballast toolbox dump` (docs/toolbox.md): the reads. Each part is gathered on its own; a part or an item that
//! cannot be read is recorded as missing with why, and the rest is still written. Assembly, redaction, bounds
//! and rendering are `crate::toolbox` (pure).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use aws_sdk_ec2::types::Instance;
use ballast_state::layout::{instance_of_writer, writer_of_key, ClusterPaths};
use ballast_state::limits::{MAX_NODE_RECORD, MAX_REPORT};
use ballast_state::log_tail::{NodeLogTail, TailRequest, MAX_LOG_TAIL};
use ballast_state::report::Phase;
use ballast_state::report_signature::parse_stored;
use ballast_state::spec::ClusterConfig;
use ballast_state::timestamp::now_stamp;
use ballast_store::etcd::health::{cluster_health, read_health};
use ballast_store::etcd::record::read_record;
use ballast_store::store::{Precondition, StateStore};
use serde_json::{json, Value};

use super::{require_cluster, Context};
use crate::cli::{SpecFormat, ToolboxArgs, ToolboxDumpArgs, ToolboxWhat};
use crate::cloud::aws::{
    auto_scaling_groups, cluster_instances, failure, find, group_resource_name, owned_filter,
    tag_map, GROUP_TAG, ROLE_TAG,
};
use crate::cloud::model::elb_names;
use crate::cloud::{CallLog, Cloud};
use crate::error::{io_error, CommandError};
use crate::reports::expected_members;
use crate::toolbox::{assemble, Format, Gathered, Kind};

/// How long one source (AWS's reads together; each part of the state store) may take before what it has not
/// answered is recorded as missing and the dump goes on. The sources are read at once.
const SOURCE_BOUND: Duration = Duration::from_secs(60);
/// How often the dump looks for the control-plane nodes' fresh tails while it waits.
const TAIL_POLL: Duration = Duration::from_secs(2);

pub async fn run(context: &Context, args: ToolboxArgs) -> Result<(), CommandError> {
    match args.what {
        ToolboxWhat::Dump(args) => dump(context, args).await,
    }
}

fn progress(what: &str) {
    eprintln!("toolbox dump: {what}");
}

async fn dump(context: &Context, args: ToolboxDumpArgs) -> Result<(), CommandError> {
    let name = context.cluster_name(args.cluster_name.as_deref())?;
    let out = match &args.out {
        Some(dir) => Some(prepare_out(dir)?),
        None => None,
    };
    let registry = context.registry().await?;
    require_cluster(&registry, &name).await?;
    let store = registry.store();
    let paths = ClusterPaths::new(&name);
    let (generated_at, _) = now_stamp();
    let mut gathered = Gathered::default();

    // Asked first, so the control-plane nodes publish while the rest is read.
    progress("asking the control-plane nodes for fresh log tails");
    let requested = match store_within(request_tails(store, &paths, &mut gathered)).await {
        Some(requested) => requested,
        None => {
            gathered.missing(
                "logs: fresh tails",
                store_silent("the request for fresh tails"),
            );
            None
        }
    };

    progress("reading the completed spec");
    let completed = match store_within(completed_part(&registry, &name, &mut gathered)).await {
        Some(completed) => completed,
        None => {
            gathered.missing("completed", store_silent("the completed spec"));
            None
        }
    };

    // Every source at once, each within its own bound: one that hangs costs its part, not the others' time.
    progress("reading the spec, AWS by the cluster's tags, the boot reports, etcd's record and health, and the lock, at once");
    let mut parts: [Gathered; 5] = Default::default();
    let [spec_g, cloud_g, reports_g, etcd_g, markers_g] = &mut parts;
    let (spec, instances, reports, etcd, markers) = tokio::join!(
        store_within(spec_part(store, &paths, spec_g)),
        cloud_part(&name, completed.as_ref(), cloud_g),
        store_within(reports_part(store, &paths, reports_g)),
        store_within(etcd_part(store, &paths, completed.as_ref(), etcd_g)),
        store_within(markers_part(store, &paths, markers_g)),
    );
    for part in parts {
        gathered.merge(part);
    }
    for (read, part) in [
        (spec.is_some(), "spec"),
        (etcd.is_some(), "etcd"),
        (markers.is_some(), "markers"),
    ] {
        if !read {
            gathered.missing(part, store_silent(part));
        }
    }
    let failed = match reports {
        Some((failed, reported)) => {
            unreported(instances.as_deref(), &reported, &mut gathered);
            failed
        }
        None => {
            gathered.missing("reports", store_silent("reports"));
            BTreeSet::new()
        }
    };

    let control_plane: BTreeSet<String> = instances
        .iter()
        .flatten()
        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running"))
        .filter(|i| tag_map(i.tags()).get(ROLE_TAG).map(String::as_str) == Some("control-plane"))
        .filter_map(|i| i.instance_id().map(str::to_string))
        .collect();
    progress(&format!(
        "waiting up to {:?} for {} control-plane node(s) to publish their log tails",
        args.log_wait,
        control_plane.len()
    ));
    let logs = tokio::time::timeout(
        args.log_wait + SOURCE_BOUND,
        logs_part(
            store,
            &paths,
            requested,
            &control_plane,
            &failed,
            args.log_wait,
            &mut gathered,
        ),
    )
    .await;
    if logs.is_err() {
        gathered.missing("logs", store_silent("logs"));
    }
    if requested.is_some() {
        // Taken: a node that restarts later need not answer it again.
        let _ = store_within(store.delete(&paths.log_tail_request())).await;
    }

    let format = match args.output {
        SpecFormat::Yaml => Format::Yaml,
        SpecFormat::Json => Format::Json,
    };
    let rendered =
        assemble(&name, &generated_at, gathered, format).map_err(|e| CommandError::Render {
            format: format.extension(),
            source: Box::new(e),
        })?;
    let where_ = match &out {
        Some(dir) => {
            for (file, text) in &rendered.files {
                write_private(&dir.join(file), text)?;
            }
            progress(&format!(
                "wrote {} files into {}",
                rendered.files.len(),
                dir.display()
            ));
            dir.join(format!("index.{}", format.extension()))
                .display()
                .to_string()
        }
        None => {
            std::io::stdout()
                .write_all(rendered.document.as_bytes())
                .map_err(io_error("writing the dump to stdout"))?;
            "the document's index".to_string()
        }
    };
    if rendered.index.partial {
        return Err(CommandError::PartialDump {
            missing: rendered
                .index
                .missing
                .iter()
                .map(|m| m.what.clone())
                .collect(),
            where_,
        });
    }
    Ok(())
}

/// `--out`: created 0700 when new; an existing directory must be empty (a dump never overwrites files).
fn prepare_out(dir: &Path) -> Result<std::path::PathBuf, CommandError> {
    use std::os::unix::fs::DirBuilderExt;
    super::check_out_dir(dir)?;
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CommandError::Usage(format!(
                    "--out {}: the directory is not empty; give a new or empty directory (a dump overwrites nothing)",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io_error(format!("creating {}", dir.display())))?;
        }
        Err(e) => return Err(io_error(format!("reading {}", dir.display()))(e)),
    }
    Ok(dir.to_path_buf())
}

/// A dump file, 0600: it names the cluster's insides, if no secret.
fn write_private(path: &Path, text: &str) -> Result<(), CommandError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(format!("creating {}", path.display())))?;
    file.write_all(text.as_bytes())
        .map_err(io_error(format!("writing {}", path.display())))
}

/// Writes the request control-plane nodes poll; returns its time by the store's clock.
async fn request_tails(
    store: &StateStore,
    paths: &ClusterPaths,
    gathered: &mut Gathered,
) -> Option<i64> {
    let (requested_at, requested_unix) = now_stamp();
    let request = TailRequest {
        requested_at,
        requested_unix,
        requested_by: whoami(),
    };
    let key = paths.log_tail_request();
    let body = serde_json::to_vec(&request).unwrap_or_default();
    let written = store.put(&key, &body, &Precondition::None).await;
    match written {
        Ok(_) => match store.modified_unix(&key).await {
            Ok(Some(unix)) => Some(unix),
            Ok(None) => None,
            Err(e) => {
                gathered.missing(
                    "logs: fresh tails",
                    format!("reading back the request {key}: {e}"),
                );
                None
            }
        },
        Err(e) => {
            gathered.missing(
                "logs: fresh tails",
                format!("writing the request {key}: {e}"),
            );
            None
        }
    }
}

fn whoami() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{user}@{} (ballast toolbox dump)", host.trim())
}

async fn spec_part(store: &StateStore, paths: &ClusterPaths, gathered: &mut Gathered) {
    use crate::toolbox::redact::yaml_documents;
    let mut cluster = Vec::new();
    match store.get(&paths.cluster_spec()).await {
        Ok(Some(object)) => cluster = yaml_documents(&String::from_utf8_lossy(&object.data)),
        Ok(None) => gathered.missing(
            "spec: cluster",
            "cluster.yaml is gone (a delete under way?)",
        ),
        Err(e) => gathered.missing("spec: cluster", e.to_string()),
    }
    let mut groups = Vec::new();
    match store.list(&paths.instance_groups_prefix()).await {
        Ok(keys) => {
            for key in keys {
                match store.get(&key).await {
                    Ok(Some(object)) => {
                        groups.extend(yaml_documents(&String::from_utf8_lossy(&object.data)))
                    }
                    Ok(None) => {}
                    Err(e) => gathered.missing(format!("spec: {key}"), e.to_string()),
                }
            }
        }
        Err(e) => gathered.missing("spec: instance groups", e.to_string()),
    }
    gathered.found(
        Kind::Spec,
        json!({"cluster": cluster, "instanceGroups": groups}),
    );
}

async fn completed_part(
    registry: &ballast_store::registry::Registry,
    name: &str,
    gathered: &mut Gathered,
) -> Option<ClusterConfig> {
    let paths = ClusterPaths::new(name);
    match registry.store().get(&paths.completed()).await {
        Ok(Some(object)) => {
            let documents =
                crate::toolbox::redact::yaml_documents(&String::from_utf8_lossy(&object.data));
            gathered.found(Kind::Completed, json!({"documents": documents}));
        }
        Ok(None) => gathered.missing("completed", "completed.yaml is not in the store"),
        Err(e) => gathered.missing("completed", e.to_string()),
    }
    match registry.load_completed(name).await {
        Ok(completed) => Some(completed),
        Err(e) => {
            gathered.missing("completed: parsed", e.to_string());
            None
        }
    }
}

/// The cloud's view; returns the cluster's instances when EC2 answered. The five reads run at once, all within
/// one bound ([`SOURCE_BOUND`] from the start of the part); a read that fails or runs past it is recorded as
/// missing, with why, and the others are kept.
async fn cloud_part(
    name: &str,
    completed: Option<&ClusterConfig>,
    gathered: &mut Gathered,
) -> Option<Vec<Instance>> {
    let Some(completed) = completed else {
        gathered.missing("cloud", "the completed spec (its region) could not be read");
        return None;
    };
    let region = completed.cluster.spec.region.clone().unwrap_or_default();
    let cloud = Cloud::connect(&region, CallLog::new()).await;
    let deadline = tokio::time::Instant::now() + SOURCE_BOUND;
    let states = ["pending", "running", "shutting-down", "stopping", "stopped"];
    let names: Vec<String> = completed
        .instance_groups
        .iter()
        .map(|ig| group_resource_name(&ig.metadata.name, name))
        .collect();
    let (instances, groups, load_balancers, volumes, security_groups) = tokio::join!(
        aws_within(deadline, "instances", async {
            cluster_instances(&cloud, name, &states)
                .await
                .map_err(|e| e.to_string())
        }),
        aws_within(deadline, "groups", async {
            auto_scaling_groups(&cloud, name, &names)
                .await
                .map(|groups| groups.iter().map(group_view).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        }),
        aws_within(
            deadline,
            "load balancers",
            load_balancers_view(&cloud, name)
        ),
        aws_within(deadline, "volumes", async {
            cloud
                .ec2
                .describe_volumes()
                .filters(owned_filter(name))
                .send()
                .await
                .map(|answer| answer.volumes().iter().map(volume_view).collect::<Vec<_>>())
                .map_err(|e| {
                    failure(&format!("cluster {name}'s volumes"), "DescribeVolumes", e).to_string()
                })
        }),
        aws_within(deadline, "security groups", async {
            cloud
                .ec2
                .describe_security_groups()
                .filters(owned_filter(name))
                .send()
                .await
                .map(|answer| {
                    answer
                        .security_groups()
                        .iter()
                        .map(security_group_view)
                        .collect::<Vec<_>>()
                })
                .map_err(|e| {
                    failure(
                        &format!("cluster {name}'s security groups"),
                        "DescribeSecurityGroups",
                        e,
                    )
                    .to_string()
                })
        }),
    );

    let mut view = serde_json::Map::new();
    let instances = match instances {
        Ok(found) => {
            view.insert(
                "instances".into(),
                found.iter().map(instance_view).collect(),
            );
            Some(found)
        }
        Err(why) => {
            gathered.missing("cloud: instances", why);
            None
        }
    };
    for (key, what, read) in [
        ("groups", "cloud: groups", groups),
        ("loadBalancers", "cloud: load balancers", load_balancers),
        ("volumes", "cloud: volumes", volumes),
        ("securityGroups", "cloud: security groups", security_groups),
    ] {
        match read {
            Ok(items) => {
                view.insert(key.into(), Value::Array(items));
            }
            Err(why) => gathered.missing(what, why),
        }
    }
    gathered.found(Kind::Cloud, Value::Object(view));
    instances
}

/// One AWS read of the cloud part, within the part's deadline.
async fn aws_within<T>(
    deadline: tokio::time::Instant,
    what: &'static str,
    read: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout_at(deadline, read).await {
        Ok(result) => result,
        Err(_) => Err(format!(
            "{what}: AWS did not answer within {SOURCE_BOUND:?} (check the network, AWS_REGION and AWS_ENDPOINT_URL)"
        )),
    }
}

/// A part read from the state store, within [`SOURCE_BOUND`]; `None` when the store did not answer in time.
async fn store_within<T>(read: impl std::future::Future<Output = T>) -> Option<T> {
    tokio::time::timeout(SOURCE_BOUND, read).await.ok()
}

fn store_silent(part: &str) -> String {
    format!("the state store did not answer within {SOURCE_BOUND:?} (check the network and the store's endpoint); {part} is not in the dump")
}

fn group_view(g: &aws_sdk_autoscaling::types::AutoScalingGroup) -> Value {
    let tags: BTreeMap<&str, &str> = g
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?, t.value()?)))
        .collect();
    json!({
        "name": g.auto_scaling_group_name(),
        "min": g.min_size(), "max": g.max_size(), "desired": g.desired_capacity(),
        "instances": g.instances().iter().map(|i| json!({
            "id": i.instance_id(),
            "lifecycle": i.lifecycle_state().map(|s| s.as_str()),
            "health": i.health_status(),
        })).collect::<Vec<_>>(),
        "tags": tags,
    })
}

/// The API load balancers, by their names.
async fn load_balancers_view(cloud: &Cloud, name: &str) -> Result<Vec<Value>, String> {
    let mut found = Vec::new();
    for lb in elb_names("api", name) {
        let client = &cloud.elb;
        let answer = find(
            &lb,
            "DescribeLoadBalancers",
            &["LoadBalancerNotFound"],
            || client.describe_load_balancers().names(&lb).send(),
        )
        .await
        .map_err(|e| e.to_string())?;
        if let Some(answer) = answer {
            found.extend(answer.load_balancers().iter().map(|l| {
                json!({
                    "name": l.load_balancer_name(), "arn": l.load_balancer_arn(), "dns": l.dns_name(),
                    "state": l.state().and_then(|s| s.code()).map(|c| c.as_str()),
                    "scheme": l.scheme().map(|s| s.as_str()),
                })
            }));
        }
    }
    Ok(found)
}

fn volume_view(v: &aws_sdk_ec2::types::Volume) -> Value {
    json!({
        "id": v.volume_id(), "state": v.state().map(|s| s.as_str()), "sizeGiB": v.size(),
        "zone": v.availability_zone(), "type": v.volume_type().map(|t| t.as_str()),
        "encrypted": v.encrypted(),
        "attachedTo": v.attachments().iter().filter_map(|a| a.instance_id()).collect::<Vec<_>>(),
        "tags": tag_map(v.tags()),
    })
}

fn security_group_view(g: &aws_sdk_ec2::types::SecurityGroup) -> Value {
    json!({
        "id": g.group_id(), "name": g.group_name(), "vpc": g.vpc_id(),
        "ingress": g.ip_permissions().iter().map(|p| json!({
            "protocol": p.ip_protocol(), "from": p.from_port(), "to": p.to_port(),
            "cidrs": p.ip_ranges().iter().filter_map(|r| r.cidr_ip()).collect::<Vec<_>>(),
            "groups": p.user_id_group_pairs().iter().filter_map(|r| r.group_id()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn instance_view(i: &Instance) -> Value {
    let tags = tag_map(i.tags());
    json!({
        "id": i.instance_id(),
        "state": i.state().and_then(|s| s.name()).map(|n| n.as_str()),
        "type": i.instance_type().map(|t| t.as_str()),
        "zone": i.placement().and_then(|p| p.availability_zone()),
        "privateIp": i.private_ip_address(),
        "launchTime": i.launch_time().map(|t| t.to_string()),
        "group": tags.get(GROUP_TAG),
        "role": tags.get(ROLE_TAG),
    })
}

/// Every stored boot report; returns the ids of the nodes whose latest report says the boot failed, and of
/// every node with a report.
async fn reports_part(
    store: &StateStore,
    paths: &ClusterPaths,
    gathered: &mut Gathered,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut failed = BTreeSet::new();
    let mut reported = BTreeSet::new();
    let prefix = paths.reports_prefix();
    let keys = match store.list(&prefix).await {
        Ok(keys) => keys,
        Err(e) => {
            gathered.missing("reports", e.to_string());
            return (failed, reported);
        }
    };
    let mut reports = Vec::new();
    for key in keys {
        // Named by its writer (`<role-id>:<instance-id>`, ClusterPaths::report).
        let Some(id) = writer_instance(&key, &prefix) else {
            continue;
        };
        let object = match store.get_bounded(&key, MAX_REPORT).await {
            Ok(Some(object)) => object,
            Ok(None) => continue,
            Err(e) => {
                gathered.missing(format!("reports: {id}"), e.to_string());
                continue;
            }
        };
        match parse_stored(&object.data) {
            Ok(stored) => {
                if stored.report.phase == Phase::Failed {
                    failed.insert(id.to_string());
                }
                reported.insert(id.to_string());
                reports.push(json!({
                    "instanceId": id,
                    "key": key,
                    // Whether a signature is attached; `get instances` and `validate cluster` verify it.
                    "signed": stored.signature.is_some(),
                    "report": stored.report,
                }));
            }
            Err(e) => gathered.missing(
                format!("reports: {id}"),
                format!("{key} does not parse: {e}"),
            ),
        }
    }
    gathered.found(Kind::Reports, json!({"reports": reports}));
    (failed, reported)
}

/// A running instance without a stored report is a gap the dump names.
fn unreported(
    instances: Option<&[Instance]>,
    reported: &BTreeSet<String>,
    gathered: &mut Gathered,
) {
    for instance in instances.unwrap_or_default() {
        let running =
            instance.state().and_then(|s| s.name()).map(|n| n.as_str()) == Some("running");
        if let (true, Some(id)) = (running, instance.instance_id()) {
            if !reported.contains(id) {
                gathered.missing(
                    format!("reports: {id}"),
                    "the instance runs but no boot report is stored (nodeup has not reported yet, or cannot reach the state store)",
                );
            }
        }
    }
}

async fn etcd_part(
    store: &StateStore,
    paths: &ClusterPaths,
    completed: Option<&ClusterConfig>,
    gathered: &mut Gathered,
) {
    let mut part = serde_json::Map::new();
    match read_record(store, paths).await {
        Ok(record) => {
            part.insert("record".into(), json!(record.map(|r| r.record)));
        }
        Err(e) => gathered.missing("etcd: record", e.to_string()),
    }
    match read_health(store, paths).await {
        Ok(reports) => {
            part.insert("health".into(), json!(reports));
        }
        Err(e) => gathered.missing("etcd: health", e.to_string()),
    }
    let expected = completed.map_or(0, expected_members);
    match cluster_health(store, paths, expected).await {
        Ok(summary) => {
            part.insert("judgement".into(), json!(summary));
        }
        Err(e) => gathered.missing("etcd: judgement", e.to_string()),
    }
    gathered.found(Kind::Etcd, Value::Object(part));
}

/// A rolling update's markers are tags on the groups (the cloud part shows every group's tags); the store's
/// marker of a change or delete under way is the cluster's lock.
async fn markers_part(store: &StateStore, paths: &ClusterPaths, gathered: &mut Gathered) {
    let lock = match store.get_bounded(&paths.lock(), MAX_NODE_RECORD).await {
        Ok(Some(object)) => serde_json::from_slice::<Value>(&object.data)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&object.data).into_owned())),
        Ok(None) => Value::Null,
        Err(e) => {
            gathered.missing("markers: lock", e.to_string());
            Value::Null
        }
    };
    gathered.found(
        Kind::Markers,
        json!({
            "lock": lock,
            "rollingUpdate": format!("the {} tag of each group, in cloud.groups[].tags", crate::roll::MARKER_TAG),
        }),
    );
}

/// Waits for fresh tails from the control-plane nodes, then reads every tail.
#[allow(clippy::too_many_arguments)]
async fn logs_part(
    store: &StateStore,
    paths: &ClusterPaths,
    requested: Option<i64>,
    control_plane: &BTreeSet<String>,
    failed: &BTreeSet<String>,
    wait: Duration,
    gathered: &mut Gathered,
) {
    let prefix = paths.log_tails_prefix();
    let deadline = tokio::time::Instant::now() + wait;
    let mut modified: BTreeMap<String, i64> = BTreeMap::new();
    loop {
        modified.clear();
        if let Ok(keys) = store.list(&prefix).await {
            for key in keys {
                if let Ok(Some(unix)) = store.modified_unix(&key).await {
                    modified.insert(key, unix);
                }
            }
        }
        let fresh = |id: &str| {
            modified.iter().any(|(key, unix)| {
                writer_instance(key, &prefix) == Some(id) && requested.is_some_and(|r| *unix >= r)
            })
        };
        if requested.is_none() || control_plane.iter().all(|id| fresh(id)) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(TAIL_POLL).await;
    }
    let mut tails = Vec::new();
    let mut have = BTreeMap::new();
    for (key, unix) in &modified {
        let Some(instance) = writer_instance(key, &prefix) else {
            continue;
        };
        let fresh = requested.is_some_and(|r| *unix >= r);
        match store.get_bounded(key, MAX_LOG_TAIL).await {
            Ok(Some(object)) => match serde_json::from_slice::<NodeLogTail>(&object.data) {
                Ok(tail) => {
                    // Cut and redacted as its writer should have: what is stored is the node's word.
                    let tail = tail.kept();
                    have.insert(instance.to_string(), fresh);
                    tails.push(json!({
                        "instanceId": instance,
                        "key": key,
                        "fresh": fresh,
                        "claimedInstanceId": (tail.instance_id != instance).then_some(&tail.instance_id),
                        "reason": tail.reason,
                        "publishedAt": tail.published_at,
                        "nodeup": tail.nodeup,
                        "etcd": tail.etcd,
                    }));
                }
                Err(e) => gathered.missing(
                    format!("logs: {instance}"),
                    format!("{key} does not parse: {e}"),
                ),
            },
            Ok(None) => {}
            Err(e) => gathered.missing(format!("logs: {instance}"), e.to_string()),
        }
    }
    for id in control_plane {
        match have.get(id) {
            Some(true) => {}
            Some(false) => gathered.missing(
                format!("logs: {id} (fresh)"),
                format!("the control-plane node did not publish within {wait:?} of the request; its older tail is included"),
            ),
            None => gathered.missing(
                format!("logs: {id}"),
                format!("the control-plane node published no tail within {wait:?} of the request"),
            ),
        }
    }
    for id in failed {
        if !have.contains_key(id) {
            gathered.missing(
                format!("logs: {id}"),
                "its boot failed but it published no tail (it never reached the state store, or the write was refused)",
            );
        }
    }
    gathered.notes.push(
        "workers publish a log tail only when their boot fails; a configured worker's absence is not a gap".into(),
    );
    gathered.found(Kind::Logs, json!({"tails": tails}));
}

/// The instance a writer-named key names (`logs/<role-id>:<instance-id>.json`, `reports/...`).
fn writer_instance<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    writer_of_key(key, prefix).map(instance_of_writer)
}
