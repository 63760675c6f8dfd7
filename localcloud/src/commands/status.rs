//! `localcloud status`: the local cloud, its instances and their processes, as a table or JSON.

use super::recorded_cloud;
use crate::cli::Output;
use crate::error::LocalCloudError;
use crate::process::group_members;
use crate::state::{CloudRecord, InstanceRecord, StateDir};

/// One line of `status`.
#[derive(Debug, serde::Serialize)]
struct InstanceStatus<'a> {
    #[serde(flatten)]
    record: &'a InstanceRecord,
    nodeup_alive: bool,
    /// A machine's nodeup unit as its systemd says (`active`, `failed`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    nodeup_unit: Option<String>,
    /// PIDs in the instance's process group (a machine's: in its cgroup).
    processes: Vec<u32>,
}

pub(super) fn run(state: &StateDir, output: Output) -> Result<(), LocalCloudError> {
    let cloud = recorded_cloud(state)?;
    let records = state.read_instances()?;
    let machines = cloud.as_ref().and_then(|c| c.machines.as_ref());
    let instances: Vec<InstanceStatus> = records
        .iter()
        .map(|record| match (machines, &record.machine) {
            // A machine: its cgroup's processes, and nodeup's unit as its systemd sees it.
            (Some(m), Some(id)) if record.stopped_at.is_none() => {
                let processes = crate::machines::machine_processes(m, id);
                let unit = (!processes.is_empty())
                    .then(|| crate::machines::unit_state(m, id, "nodeup.service"))
                    .flatten();
                InstanceStatus {
                    record,
                    nodeup_alive: unit.as_deref() == Some("active"),
                    nodeup_unit: unit,
                    processes,
                }
            }
            _ => InstanceStatus {
                record,
                nodeup_alive: record.nodeup.is_some_and(|p| p.is_alive()),
                nodeup_unit: None,
                processes: record
                    .nodeup
                    .map(|p| group_members(p.pid))
                    .unwrap_or_default(),
            },
        })
        .collect();
    match output {
        Output::Json => print_json(state, cloud.as_ref(), &instances),
        Output::Table => print_table(state, cloud.as_ref(), &instances),
    }
    Ok(())
}

fn print_json(state: &StateDir, cloud: Option<&CloudRecord>, instances: &[InstanceStatus]) {
    let value = serde_json::json!({
        "state_dir": state.root(),
        "up": cloud.is_some_and(|c| c.runner.is_alive()),
        "endpoint": cloud.map(|c| &c.endpoint),
        "iam_enforced": cloud.map(|c| c.iam_enforced),
        "imds_port": cloud.map(|c| c.imds_port),
        "runner": cloud.map(|c| serde_json::json!({"pid": c.runner.pid, "alive": c.runner.is_alive()})),
        "emulator": cloud.and_then(|c| c.emulator).map(|e| serde_json::json!({"pid": e.pid, "alive": e.is_alive()})),
        "instances": instances,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&value).unwrap_or_default()
    );
}

fn print_table(state: &StateDir, cloud: Option<&CloudRecord>, instances: &[InstanceStatus]) {
    match cloud {
        Some(c) => println!(
            "local cloud {}: {} | emulator {} (PID {}, {}) | runner PID {} ({}) | IAM {} | IMDS port {}",
            state.root().display(),
            if c.runner.is_alive() { "up" } else { "DOWN (runner dead: run `localcloud down`)" },
            c.endpoint,
            c.emulator.map(|e| e.pid.to_string()).unwrap_or_else(|| "?".into()),
            alive(c.emulator.is_some_and(|e| e.is_alive())),
            c.runner.pid,
            alive(c.runner.is_alive()),
            if c.iam_enforced { "enforced" } else { "off" },
            c.imds_port,
        ),
        None => println!("local cloud {}: down", state.root().display()),
    }
    if instances.is_empty() {
        println!("no instances");
        return;
    }
    let rows: Vec<Vec<String>> = instances
        .iter()
        .map(|i| {
            vec![
                i.record.instance_id.clone(),
                i.record.state.clone(),
                i.record.private_ip.clone(),
                i.record.availability_zone.clone(),
                i.record.imds_endpoint.clone(),
                i.record
                    .autoscaling_group
                    .clone()
                    .unwrap_or_else(|| "-".into()),
                match (&i.record.machine, &i.nodeup_unit) {
                    (Some(_), Some(unit)) => format!("machine ({unit})"),
                    (Some(_), None) => "machine".into(),
                    _ => i
                        .record
                        .nodeup
                        .map(|p| p.pid.to_string())
                        .unwrap_or_else(|| "-".into()),
                },
                alive(i.nodeup_alive).to_string(),
                if i.processes.is_empty() {
                    i.record
                        .nodeup_exit
                        .clone()
                        .unwrap_or_else(|| "none".into())
                } else {
                    i.processes
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                },
            ]
        })
        .collect();
    print!(
        "{}",
        ballast_common::table::table(
            &[
                "INSTANCE",
                "STATE",
                "PRIVATE-IP",
                "AZ",
                "IMDS",
                "ASG",
                "NODEUP",
                "",
                "PROCESSES"
            ],
            &rows
        )
    );
}

fn alive(yes: bool) -> &'static str {
    if yes {
        "alive"
    } else {
        "dead"
    }
}
