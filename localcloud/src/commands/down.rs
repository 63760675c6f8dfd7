//! `localcloud down`: SIGTERM to the runner (it powers instances off and its emulator exits with it), SIGKILL
//! after a grace period, then by PID anything recorded that survived; then checks nothing listens any more.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::recorded_cloud;
use crate::error::LocalCloudError;
use crate::process::{group_members, is_listening, kill_group, proc_stat};
use crate::state::{CloudRecord, InstanceRecord, StateDir};

/// How long `down` gives the runner to power instances off and stop the emulator before SIGKILL.
const DOWN_GRACE: Duration = Duration::from_secs(10);

pub(super) fn run(state: &StateDir) -> Result<(), LocalCloudError> {
    let was_up = stop(state)?;
    eprintln!(
        "localcloud: {}",
        if was_up { "down" } else { "already down" }
    );
    Ok(())
}

/// Stops everything recorded in `state` and forgets the cloud. Returns whether there was a cloud to stop.
pub(super) fn stop(state: &StateDir) -> Result<bool, LocalCloudError> {
    let cloud = recorded_cloud(state)?;
    if let Some(c) = &cloud {
        stop_runner_and_emulator(c);
    }
    // Instances whose processes survived a runner that was SIGKILLed (its children die with it through
    // PDEATHSIG, but not their own children).
    let records = state.read_instances()?;
    for r in &records {
        if let Some(p) = r.nodeup {
            // The leader's PID reused by another process: that group is not ours.
            let recycled = proc_stat(p.pid).is_some_and(|s| s.start_ticks != p.start_ticks);
            if !recycled && !group_members(p.pid).is_empty() {
                let _ = kill_group(p.pid);
            }
        }
    }
    // Machines outlive a SIGKILLed runner (runc leaves them running): take them and what they held down.
    if let Some(machines) = cloud.as_ref().and_then(|c| c.machines.as_ref()) {
        crate::machines::clean_up(machines, &state.machines_dir(), &state.volumes_dir());
    }
    let mut leftovers = leftovers(cloud.as_ref(), &records);
    if let Some(machines) = cloud.as_ref().and_then(|c| c.machines.as_ref()) {
        leftovers.extend(crate::machines::leftovers(
            machines,
            &state.machines_dir(),
            &state.volumes_dir(),
        ));
    }
    if !leftovers.is_empty() {
        return Err(LocalCloudError::Leftovers(leftovers));
    }
    state.remove_cloud()?;
    Ok(cloud.is_some())
}

/// SIGTERM, then SIGKILL after the grace period, to the runner; then makes sure its emulator is gone too.
fn stop_runner_and_emulator(cloud: &CloudRecord) {
    if cloud.runner.signal(Signal::SIGTERM) {
        let deadline = Instant::now() + DOWN_GRACE;
        while cloud.runner.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if cloud.runner.signal(Signal::SIGKILL) {
            eprintln!("localcloud: the runner did not stop within {DOWN_GRACE:?}: killed");
        }
    }
    if let Some(e) = cloud.emulator {
        // It exits by itself when the runner's pipe closes; make sure.
        let deadline = Instant::now() + Duration::from_secs(3);
        while e.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        e.signal(Signal::SIGKILL);
    }
}

/// What still runs or listens after the kills: one entry per survivor.
fn leftovers(cloud: Option<&CloudRecord>, records: &[InstanceRecord]) -> Vec<String> {
    let mut leftovers = Vec::new();
    if let Some(c) = cloud {
        // Give the kernel a moment to reap what was just killed and close its sockets.
        std::thread::sleep(Duration::from_millis(100));
        if c.runner.is_alive() {
            leftovers.push(format!("runner PID {}", c.runner.pid));
        }
        if c.emulator.is_some_and(|e| e.is_alive()) {
            leftovers.push("the AWS emulator".to_owned());
        }
        if let Some(addr) = c.endpoint.strip_prefix("http://") {
            if is_listening(addr) {
                leftovers.push(format!("something listens on {addr}"));
            }
        }
    }
    for r in records {
        if let Some(p) = r.nodeup {
            let members = group_members(p.pid);
            if !members.is_empty() {
                leftovers.push(format!("{}: processes {members:?}", r.instance_id));
            }
        }
        // A machine's IMDS lives in its own namespace, gone with it (the machines' leftovers say so).
        if r.stopped_at.is_none() && r.machine.is_none() {
            if let Some(addr) = r.imds_endpoint.strip_prefix("http://") {
                if is_listening(addr) {
                    leftovers.push(format!("{}: IMDS still listens on {addr}", r.instance_id));
                }
            }
        }
    }
    leftovers
}
