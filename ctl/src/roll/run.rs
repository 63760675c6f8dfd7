//! The roll's loop, one group at a time: observe what AWS and the state store show, decide the next step
//! (`decide`), act, and again, until the group is done. Progress goes to stderr.

use std::collections::BTreeSet;
use std::time::Duration;

use ballast_state::duration::human_duration;
use ballast_state::rolling_update::{pace, Pace};
use ballast_state::spec::{ClusterConfig, Role};
use ballast_state::timestamp::unix_rfc3339;
use ballast_store::store::StateStore;
use tokio::time::Instant;

use super::decide::{
    batch_terminations, control_plane_step, node_step, outdated, replace_batch, ControlPlaneStep,
    GroupView, InstanceView, NodeStep, RollMarker, Sizes,
};
use super::drain::Kubernetes;
use super::{act, observe, RollError};
use crate::cloud::aws::group_resource_name;
use crate::cloud::Cloud;
use crate::progress::Progress;

/// How often a roll looks again while it waits.
const POLL: Duration = Duration::from_millis(500);
/// How long the roll waits for a control-plane node to answer its stop request: it looks every 2 s and stops in
/// about 1.5 s at worst, so it answers within about 4 s. Shorter than the handler's 60 s because a node that
/// booted before the cluster turned termination handling on never answers (it does not watch), and the first
/// roll after turning it on replaces exactly those; within the hook's shortest heartbeat (30 s), so the roll
/// records none.
const STOP_ANSWER_WAIT: Duration = Duration::from_secs(20);

/// How a roll goes, from the flags.
pub struct Settings {
    pub force: bool,
    pub surge: bool,
    pub validation_timeout: Duration,
    pub fail_on_validate_error: bool,
    /// None: `--cloudonly` (no drain, no Kubernetes validation).
    pub kubernetes: Option<Kubernetes>,
}

/// What a group's roll did.
#[derive(Debug, Clone)]
pub struct GroupOutcome {
    pub group: String,
    pub role: Role,
    /// Each replaced instance, and how long from its termination until its replacement was ready.
    pub replaced: Vec<(String, Duration)>,
    pub elapsed: Duration,
}

/// Rolls groups of one cluster.
pub struct Roller<'a> {
    cloud: &'a Cloud,
    store: &'a StateStore,
    completed: &'a ClusterConfig,
    settings: Settings,
    /// When this run began, RFC 3339: a forced roll's start when no marker records an earlier one.
    started: String,
    clock: Instant,
    /// Instances this run terminated: never terminated again, whatever an eventually consistent read shows.
    terminated: BTreeSet<String>,
    /// Of those, the ones whose terminating lifecycle action this run completed (`act::complete_termination`).
    completed_actions: BTreeSet<String>,
    /// What never changes once seen, kept between looks (see [`observe::Kept`]).
    kept: tokio::sync::Mutex<observe::Kept>,
    last_progress: String,
    /// Where progress goes: plain lines, or a bar of instances replaced on a terminal.
    out: Progress,
}

impl<'a> Roller<'a> {
    pub fn new(
        cloud: &'a Cloud,
        store: &'a StateStore,
        completed: &'a ClusterConfig,
        settings: Settings,
    ) -> Self {
        Roller {
            cloud,
            store,
            completed,
            settings,
            // To the second, like the launch times it is compared with (as text).
            started: unix_rfc3339(ballast_state::timestamp::now_stamp().1),
            clock: Instant::now(),
            terminated: BTreeSet::new(),
            completed_actions: BTreeSet::new(),
            kept: tokio::sync::Mutex::new(observe::Kept::default()),
            last_progress: String::new(),
            out: Progress::lines(),
        }
    }

    /// Shows progress through `out` (a bar of instances replaced on a terminal) instead of plain lines.
    pub fn with_progress(mut self, out: Progress) -> Self {
        self.out = out;
        self
    }

    /// Clears the bar (plain lines from here on), before the summary goes to stdout.
    pub fn finish_progress(&mut self) {
        self.out = Progress::lines();
    }

    /// A forced roll's start (a marker's, if one records it): what launched before it is replaced.
    pub fn force_since(&self, group: &GroupView) -> Option<String> {
        match &group.marker {
            Some(marker) if marker.force => Some(marker.started.clone()),
            _ if self.settings.force => Some(self.started.clone()),
            _ => None,
        }
    }

    fn progress(&mut self, group: &str, what: &str) {
        let line = format!("{group}: {what}");
        if line != self.last_progress {
            self.out.line(&format!(
                "[{:>7.1}s] {line}",
                self.clock.elapsed().as_secs_f64()
            ));
            self.out.current(&line);
            self.last_progress = line;
        }
    }

    async fn observe(&self, name: &str) -> Result<(Vec<GroupView>, GroupView), RollError> {
        let groups = observe::groups(
            self.cloud,
            self.store,
            self.completed,
            &mut *self.kept.lock().await,
        )
        .await?;
        let group = groups
            .iter()
            .find(|g| g.name == name)
            .cloned()
            .ok_or_else(|| RollError::NoAutoScalingGroup {
                cluster: self.completed.name().to_string(),
                group: name.to_string(),
                resource: self.resource(name),
            })?;
        Ok((groups, group))
    }

    /// Completes, once each, the lifecycle actions of the roll's instances that wait on a hook
    /// ([`act::awaiting_completion`]): the roll's own preparation is what the hook waits for, so it neither sits out
    /// the heartbeat nor deadlocks. A control-plane instance's etcd member is first stopped by its own node on the
    /// roll's stop request (a leader hands leadership away first), as the termination handler has it stopped; an
    /// instance a killed run left waiting is prepared again (a node drained) before its action is completed.
    async fn complete_waiting(
        &mut self,
        resource: &str,
        group: &super::decide::GroupView,
    ) -> Result<(), RollError> {
        let force = self.force_since(group);
        for id in act::awaiting_completion(group, &self.terminated, force.as_deref()) {
            if !self.completed_actions.insert(id.clone()) {
                continue;
            }
            let taken_over = !self.terminated.contains(&id);
            if taken_over {
                self.progress(
                    &group.name,
                    &format!(
                        "{id}: waits on its lifecycle hook since an earlier run; taking it over"
                    ),
                );
            }
            match group.role {
                Role::ControlPlane => self.stop_member(&group.name, &id).await,
                Role::Node | Role::ApiServer if taken_over => {
                    let instance = group.instances.iter().find(|i| i.id == id).cloned();
                    self.drain(&group.name, instance.as_ref()).await?;
                }
                _ => {}
            }
            let what = if act::complete_termination(self.cloud, resource, &id).await? {
                "lifecycle action completed"
            } else {
                "no lifecycle action waiting any more (completed by another, or its heartbeat ran out)"
            };
            self.progress(&group.name, &format!("{id}: {what}"));
        }
        Ok(())
    }

    /// Has the control-plane node `id` stop its etcd member before its instance goes, through the stop request the
    /// termination handler writes (`ballast_store::etcd::stop`, docs/termination.md): its own supervisor hands
    /// leadership to an up-to-date voter when it leads, stops etcd, keeps its data and membership, and answers.
    /// Only nodes of a cluster with termination handling on watch their requests; without it (or with no answer
    /// in time) the instance's own shutdown stops etcd the same way once its action is completed, so a failure
    /// here is reported and the roll goes on.
    async fn stop_member(&mut self, group: &str, id: &str) {
        if ballast_state::termination::settings(self.completed).is_none() {
            return;
        }
        let cluster = self.completed.name().to_string();
        self.progress(
            group,
            &format!("{id}: asking its node to stop its etcd member (a leader hands leadership away first)"),
        );
        let asked = ballast_store::etcd::stop::request_stop(
            self.store,
            &cluster,
            id,
            "rolling-update",
            STOP_ANSWER_WAIT,
        )
        .await;
        match asked {
            Ok(outcome) => self.progress(group, &format!("{id}: etcd member stopped ({outcome})")),
            Err(e) => self.out.line(&format!(
                "{group}: {id}: {e}; its own shutdown stops its etcd member once it goes"
            )),
        }
        if let Err(e) = ballast_store::etcd::stop::withdraw(self.store, &cluster, id).await {
            self.out
                .line(&format!("{group}: {id}: the stop request stays: {e}"));
        }
    }

    fn resource(&self, group: &str) -> String {
        group_resource_name(group, self.completed.name())
    }

    /// Rolls one group to the end. A node group's sizes are put back when its roll fails or is interrupted.
    pub async fn roll_group(&mut self, name: &str, role: Role) -> Result<GroupOutcome, RollError> {
        let began = Instant::now();
        let mut outcome = GroupOutcome {
            group: name.to_string(),
            role,
            replaced: Vec::new(),
            elapsed: Duration::ZERO,
        };
        let result = tokio::select! {
            result = async {
                match role {
                    Role::ControlPlane => self.control_plane(name, &mut outcome).await,
                    // A bastion is rolled as a node group is, without Kubernetes (roll::decide).
                    // API-server nodes hold no etcd member: drained and replaced as nodes are.
                    Role::Node | Role::Bastion | Role::ApiServer => {
                        self.nodes(name, &mut outcome).await
                    }
                }
            } => result,
            _ = tokio::signal::ctrl_c() => Err(RollError::Interrupted),
        };
        if let Err(error) = result {
            self.restore_after_failure(name).await;
            return Err(error);
        }
        outcome.elapsed = began.elapsed();
        Ok(outcome)
    }

    /// Puts a failed group's sizes back as its marker records them, and removes the marker; a failure here is
    /// reported and left for the next run (the marker stays).
    async fn restore_after_failure(&mut self, name: &str) {
        let resource = self.resource(name);
        let restored = async {
            let (_, group) = self.observe(name).await?;
            if let Some(marker) = &group.marker {
                if group.sizes != marker.sizes() {
                    act::resize(self.cloud, &resource, marker.sizes()).await?;
                }
                act::clear_marker(self.cloud, &resource).await?;
                return Ok::<bool, RollError>(true);
            }
            Ok(false)
        }
        .await;
        match restored {
            Ok(true) => self.out.line(&format!(
                "{name}: the roll stopped; AutoScalingGroup {resource}'s sizes are put back"
            )),
            Ok(false) => {}
            Err(e) => self.out.line(&format!(
                "{name}: the roll stopped and AutoScalingGroup {resource}'s sizes could not be put back ({e}); the next \
                 `rolling-update cluster --yes` puts them back"
            )),
        }
    }

    /// Records the roll on the group before anything changes; returns the group's original sizes.
    async fn ensure_marker(&mut self, group: &GroupView) -> Result<Sizes, RollError> {
        if let Some(marker) = &group.marker {
            return Ok(marker.sizes());
        }
        let force = self.settings.force;
        let marker = RollMarker::new(group.sizes, &self.started, force);
        act::set_marker(self.cloud, &self.resource(&group.name), &marker).await?;
        Ok(group.sizes)
    }

    /// Which current instances of the group Kubernetes does not report Ready (none with --cloudonly).
    async fn not_ready_in_kubernetes(
        &self,
        group: &GroupView,
        force: Option<&str>,
    ) -> Result<Vec<String>, RollError> {
        let Some(kube) = &self.settings.kubernetes else {
            return Ok(Vec::new());
        };
        // A bastion is no Kubernetes node.
        if group.role == Role::Bastion {
            return Ok(Vec::new());
        }
        let stale: BTreeSet<String> = outdated(group, force)
            .into_iter()
            .map(|(i, _)| i.id)
            .collect();
        let mut not_ready = Vec::new();
        for instance in live(group).filter(|i| !stale.contains(&i.id)) {
            let Some(node) = &instance.node_name else {
                continue;
            };
            if !kube.node_ready(node).await? {
                not_ready.push(format!("{} (node {node})", instance.id));
            }
        }
        Ok(not_ready)
    }

    /// Fails when a wait has run out; `Ok` while there is time left.
    fn check_wait(&self, group: &str, since: Instant, why: &str) -> Result<(), RollError> {
        if since.elapsed() < self.settings.validation_timeout {
            return Ok(());
        }
        Err(RollError::TimedOut {
            group: group.to_string(),
            what: "the cluster did not become ready",
            waited: human_duration(self.settings.validation_timeout),
            why: why.to_string(),
        })
    }

    async fn control_plane(
        &mut self,
        name: &str,
        outcome: &mut GroupOutcome,
    ) -> Result<(), RollError> {
        let resource = self.resource(name);
        let mut since = Instant::now();
        let mut replacing: Option<(String, Instant)> = None;
        loop {
            let (groups, group) = self.observe(name).await?;
            self.complete_waiting(&resource, &group).await?;
            let force = self.force_since(&group);
            if group.marker.is_none() && !outdated(&group, force.as_deref()).is_empty() {
                self.ensure_marker(&group).await?;
                continue;
            }
            let etcd = observe::etcd(self.store, self.completed, &groups).await?;
            let mut step = control_plane_step(&group, force.as_deref(), &etcd);
            if !matches!(step, ControlPlaneStep::Wait(_)) {
                let not_ready = self
                    .not_ready_in_kubernetes(&group, force.as_deref())
                    .await?;
                if !not_ready.is_empty() {
                    step = ControlPlaneStep::Wait(format!(
                        "not Ready in Kubernetes: {}",
                        not_ready.join(", ")
                    ));
                }
            }
            if !matches!(step, ControlPlaneStep::Wait(_)) {
                if let Some((id, at)) = replacing.take() {
                    self.progress(
                        name,
                        &format!("{id} replaced in {:.1}s", at.elapsed().as_secs_f64()),
                    );
                    outcome.replaced.push((id, at.elapsed()));
                    self.out.add_done(1);
                }
            }
            match step {
                ControlPlaneStep::Done => {
                    if group.marker.is_some() {
                        act::clear_marker(self.cloud, &resource).await?;
                    }
                    return Ok(());
                }
                ControlPlaneStep::Wait(why) => {
                    // etcd's quorum is never traded for progress: a control-plane wait that runs out fails.
                    self.check_wait(name, since, &why)?;
                    self.progress(name, &why);
                    tokio::time::sleep(POLL).await;
                }
                ControlPlaneStep::Replace(id) => {
                    if self.terminated.contains(&id) {
                        self.progress(name, &format!("waiting for {id} to terminate"));
                        tokio::time::sleep(POLL).await;
                        continue;
                    }
                    let instance = group.instances.iter().find(|i| i.id == id).cloned();
                    self.drain(name, instance.as_ref()).await?;
                    self.progress(
                        name,
                        &format!("{id}: terminating (etcd has every member voting)"),
                    );
                    act::terminate(self.cloud, &resource, &id, false).await?;
                    self.terminated.insert(id.clone());
                    replacing = Some((id, Instant::now()));
                    since = Instant::now();
                }
            }
        }
    }

    async fn drain(
        &mut self,
        group: &str,
        instance: Option<&InstanceView>,
    ) -> Result<(), RollError> {
        let (Some(kube), Some(instance)) = (self.settings.kubernetes.clone(), instance) else {
            return Ok(());
        };
        let Some(node) = &instance.node_name else {
            return Ok(());
        };
        self.progress(group, &format!("{}: draining node {node}", instance.id));
        let drained = kube.drain(node).await?;
        self.progress(group, &drained_line(&instance.id, node, &drained));
        Ok(())
    }

    /// Drains a node batch's instances together ([`Kubernetes::drain_all`]: up to
    /// [`super::drain::DRAIN_CONCURRENCY`] at once, each with its own `--drain-timeout`), so a batch takes about
    /// as long as its slowest drain rather than the sum of them, as kops drains a batch. Returns the instances
    /// whose drain failed, each with its node and why. Nothing with `--cloudonly`; an instance that registered
    /// no node has none to drain.
    async fn drain_batch(
        &mut self,
        group: &str,
        view: &GroupView,
        ids: &[String],
    ) -> Vec<(String, String, super::drain::DrainError)> {
        let Some(kube) = self.settings.kubernetes.clone() else {
            return Vec::new();
        };
        let nodes: Vec<(String, String)> = ids
            .iter()
            .filter_map(|id| {
                let instance = view.instances.iter().find(|i| &i.id == id)?;
                Some((id.clone(), instance.node_name.clone()?))
            })
            .collect();
        if nodes.is_empty() {
            return Vec::new();
        }
        for (id, node) in &nodes {
            self.progress(group, &format!("{id}: draining node {node}"));
        }
        let names: Vec<String> = nodes.iter().map(|(_, node)| node.clone()).collect();
        // drain_all answers for every name, in the order given.
        let outcomes = kube.drain_all(&names).await;
        let mut failures = Vec::new();
        for ((id, node), (_, outcome)) in nodes.into_iter().zip(outcomes) {
            match outcome {
                Ok(drained) => self.progress(group, &drained_line(&id, &node, &drained)),
                Err(error) => failures.push((id, node, error)),
            }
        }
        failures
    }

    async fn nodes(&mut self, name: &str, outcome: &mut GroupOutcome) -> Result<(), RollError> {
        let resource = self.resource(name);
        let spec = self
            .completed
            .instance_group(name)
            .and_then(|ig| ig.spec.rolling_update.clone());
        let mut since = Instant::now();
        let mut replacing: Option<(Vec<String>, Instant)> = None;
        loop {
            let (_, group) = self.observe(name).await?;
            self.complete_waiting(&resource, &group).await?;
            let force = self.force_since(&group);
            if group.marker.is_none() && outdated(&group, force.as_deref()).is_empty() {
                return Ok(());
            }
            let original = self.ensure_marker(&group).await?;
            let pace = self.pace(name, spec.as_ref(), original)?;
            let mut step = node_step(&group, original, pace, force.as_deref());
            if let NodeStep::Replace { .. } = step {
                let not_ready = self
                    .not_ready_in_kubernetes(&group, force.as_deref())
                    .await?;
                if !not_ready.is_empty() {
                    step = NodeStep::Wait(format!(
                        "not Ready in Kubernetes: {}",
                        not_ready.join(", ")
                    ));
                }
            }
            if let NodeStep::Wait(why) = &step {
                if let Err(timed_out) = self.check_wait(name, since, why) {
                    if self.settings.fail_on_validate_error {
                        return Err(timed_out);
                    }
                    self.out.line(&format!(
                        "warning: {timed_out}; going on (--fail-on-validate-error=false)"
                    ));
                    step = replace_batch(&group, pace, force.as_deref());
                }
            }
            if matches!(step, NodeStep::Replace { .. } | NodeStep::Done) {
                if let Some((ids, at)) = replacing.take() {
                    self.progress(
                        name,
                        &format!(
                            "{} replaced in {:.1}s",
                            ids.join(", "),
                            at.elapsed().as_secs_f64()
                        ),
                    );
                    self.out.add_done(ids.len() as u64);
                    outcome
                        .replaced
                        .extend(ids.into_iter().map(|id| (id, at.elapsed())));
                }
            }
            match step {
                NodeStep::Done => {
                    act::clear_marker(self.cloud, &resource).await?;
                    return Ok(());
                }
                NodeStep::Resize(sizes) => {
                    self.progress(
                        name,
                        &format!(
                            "sizes min {} max {} desired {}",
                            sizes.min, sizes.max, sizes.desired
                        ),
                    );
                    act::resize(self.cloud, &resource, sizes).await?;
                    since = Instant::now();
                }
                NodeStep::Wait(why) => {
                    self.progress(name, &why);
                    tokio::time::sleep(POLL).await;
                }
                NodeStep::Replace { ids, decrement } => {
                    if ids.iter().any(|id| self.terminated.contains(id)) {
                        self.progress(name, "waiting for terminated instances to leave the group");
                        tokio::time::sleep(POLL).await;
                        continue;
                    }
                    // A bastion runs no pods: nothing to drain.
                    let undrained = if group.role == Role::Bastion {
                        Vec::new()
                    } else {
                        self.drain_batch(name, &group, &ids).await
                    };
                    let undrained_ids: BTreeSet<String> =
                        undrained.iter().map(|(id, _, _)| id.clone()).collect();
                    let batch = batch_terminations(&ids, decrement, &undrained_ids);
                    for (id, shrink) in &batch {
                        self.progress(
                            name,
                            &format!(
                                "{id}: terminating{}",
                                if *shrink { " (the surge shrinks)" } else { "" }
                            ),
                        );
                    }
                    // The whole batch at once, then one wait for all its replacements (the next steps): one
                    // after another, a batch of 25 cost 25 round trips to Auto Scaling.
                    let mut failed = None;
                    let mut terminated = Vec::new();
                    for (id, result) in act::terminate_batch(self.cloud, &resource, &batch).await {
                        match result {
                            // Recorded even when another of the batch failed: never terminated twice.
                            Ok(()) => {
                                self.terminated.insert(id.clone());
                                terminated.push(id);
                            }
                            Err(e) => {
                                failed.get_or_insert(e);
                            }
                        }
                    }
                    if !undrained.is_empty() {
                        if let Some(e) = &failed {
                            self.out.line(&format!(
                                "{name}: a termination of the batch failed too: {e}"
                            ));
                        }
                        return Err(batch_drain_error(name, ids.len(), undrained, &terminated));
                    }
                    if let Some(e) = failed {
                        return Err(e.into());
                    }
                    replacing = Some((ids, Instant::now()));
                    since = Instant::now();
                }
            }
        }
    }

    fn pace(
        &self,
        group: &str,
        spec: Option<&ballast_state::rolling_update::RollingUpdateSpec>,
        original: Sizes,
    ) -> Result<Pace, RollError> {
        pace(spec, original.desired.max(0) as u32, self.settings.surge).map_err(|message| {
            RollError::Pace {
                group: group.to_string(),
                message,
            }
        })
    }
}

/// The roll's error when drains of a node batch failed: each failed drain by its instance (the drain's own error
/// names the node and the pods left on it), and what became of the rest of the batch.
fn batch_drain_error(
    group: &str,
    batch: usize,
    undrained: Vec<(String, String, super::drain::DrainError)>,
    terminated: &[String],
) -> RollError {
    let terminated = if terminated.is_empty() {
        "No instance of the batch was terminated".to_string()
    } else {
        format!(
            "The batch's drained instances were terminated: {}",
            terminated.join(", ")
        )
    };
    RollError::BatchDrain {
        group: group.to_string(),
        batch,
        failed: undrained.len(),
        failures: undrained
            .iter()
            .map(|(id, node, error)| format!("{id} (node {node}): {error}"))
            .collect::<Vec<_>>()
            .join("; "),
        terminated,
    }
}

/// The instances of a group that are not on their way out.
fn live(group: &GroupView) -> impl Iterator<Item = &InstanceView> {
    group
        .instances
        .iter()
        .filter(|i| !i.lifecycle.starts_with("Terminat"))
}

/// What a drain did, as the roll's progress says it.
fn drained_line(id: &str, node: &str, drained: &super::drain::Drained) -> String {
    if drained.node_missing {
        return format!("{id}: Kubernetes has no node {node}; nothing to drain");
    }
    let refused = match drained.refused {
        0 => String::new(),
        n => format!(" ({n} evictions refused by a PodDisruptionBudget, retried)"),
    };
    format!(
        "{id}: node {node} drained: {} pods evicted{refused}",
        drained.evicted
    )
}
