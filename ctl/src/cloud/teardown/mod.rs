//! `delete cluster`: every AWS resource of a cluster deleted, in rounds, until nothing is left.
//!
//! kops's model (`pkg/resources/aws/aws.go`): list everything by the cluster's tags, then delete in rounds.
//! Each round [`discover`]s the cluster's resources again (read-only, by ownership tags and deterministic
//! names: so a run killed anywhere is simply continued by the next), plans what may go now ([`rounds`], pure:
//! a kind waits until the kinds that depend on it are gone), and calls each kind's [`Delete`]: the kinds of
//! `update cluster` through the engine's stages ([`engine::deleters`](super::engine::deleters)), what only
//! the teardown finds ([`sweep`]'s instances, network interfaces and shared tags, [`kubernetes_made`]'s classic
//! load balancers) through [`FOUND_ONLY`]; no kind is named anywhere else. "Not yet" failures are tried
//! again next round with backoff; "gone already" counts as done; anything else stops the teardown after the
//! round, naming the resource. Shared resources only lose the cluster's tag. Nothing is remembered between
//! rounds but timings: AWS is the record.

pub mod discover;
pub mod inventory;
pub mod irsa;
pub mod kubernetes_made;
pub mod rounds;
pub mod sweep;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

pub use discover::discover;
pub use inventory::{Inventory, Resource, ResourceKind};
pub use irsa::DiscoveryTarget;
use rounds::{plan_round, Outcome};

use super::error::UpdateError;
pub use super::kinds::deletion::{attempt, Failed};
use super::kinds::task::{not_deleted_here, Delete, Deletes, Deleting};
use super::Cloud;

/// The kinds only a teardown finds (`update cluster` makes none of them), with their deletes: every other
/// kind's delete is its `Task`'s, reached through the engine's stages.
pub const FOUND_ONLY: [&dyn Delete; 4] = [
    &sweep::Instances,
    &sweep::NetworkInterfaces,
    &kubernetes_made::ClassicLoadBalancers,
    &sweep::SharedTags,
];

/// Every delete: the engine's kinds', then the teardown's own.
pub fn deleters() -> impl Iterator<Item = &'static dyn Delete> {
    super::engine::deleters().chain(FOUND_ONLY)
}

/// The delete of `kind`: the one that lists it in its [`Deletes::Kinds`].
pub fn deleter(kind: ResourceKind) -> Option<(ResourceKind, &'static dyn Delete)> {
    deleters()
        .find(|d| matches!(d.deletes(), Deletes::Kinds(kinds) if kinds.contains(&kind)))
        .map(|d| (kind, d))
}

/// How long a teardown waits without any progress (nothing gone, nothing new on its way out) before it gives up
/// naming what is left. NAT gateways take about a minute to delete on AWS and a load balancer's network
/// interfaces several; ten minutes of no change at all means something outside the cluster holds on.
pub const NO_PROGRESS_LIMIT: Duration = Duration::from_secs(600);

/// What a teardown tells its caller as it goes: stage lines (a kind begun, a kind gone), and after each look at
/// AWS how many resources it has found in all and how many of them are still there. Any `Fn(&str)` takes the
/// lines alone.
pub trait TeardownProgress {
    /// A stage line, e.g. `deleting 4 Instance(s)` or `AutoScalingGroup: 4 deleted (12.5 s)`.
    fn line(&self, line: &str);
    /// Resources found so far (every one seen in any round, so the count only grows), and how many are left.
    fn tally(&self, _found: usize, _left: usize) {}
    /// The kind whose deletes this round is calling now.
    fn deleting(&self, _kind: ResourceKind) {}
}

impl<F: Fn(&str)> TeardownProgress for F {
    fn line(&self, line: &str) {
        self(line)
    }
}

/// Failures of a teardown.
#[derive(Debug, thiserror::Error)]
pub enum TeardownError {
    /// Reading what the cluster has failed.
    #[error("finding the AWS resources of cluster {cluster}: {source}")]
    Discover {
        cluster: String,
        #[source]
        source: UpdateError,
    },
    /// Resources found by the cluster's name are not bound to its id (`crate::cloud::identity`): nothing more
    /// was deleted.
    #[error(transparent)]
    Identity(#[from] crate::cloud::error::IdentityError),
    /// Deletes failed in a way retrying cannot fix.
    #[error(
        "deleting cluster {cluster} stopped: {}; fix the cause and run `ballast delete cluster {cluster} --yes` \
         again (it continues where this run stopped)",
        errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    Fatal {
        cluster: String,
        errors: Vec<UpdateError>,
    },
    /// Resources stayed as they were for [`NO_PROGRESS_LIMIT`].
    #[error(
        "deleting cluster {cluster}: no progress for {} s; still there: {}; run `ballast delete cluster {cluster} \
         --yes` again once what holds them is gone",
        waited.as_secs(),
        remaining.join("; ")
    )]
    Stuck {
        cluster: String,
        waited: Duration,
        remaining: Vec<String>,
    },
}

/// How a kind went.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KindTiming {
    /// Resources of this kind found (the most seen in one round).
    pub count: usize,
    /// When this run first asked to delete one, since the teardown started.
    pub started: Option<Duration>,
    /// When the last one was gone, since the teardown started.
    pub done: Option<Duration>,
}

/// What a teardown did.
#[derive(Debug, Clone, Default)]
pub struct TeardownReport {
    pub kinds: BTreeMap<ResourceKind, KindTiming>,
    /// Resources kept, with only the cluster's tag removed.
    pub untagged: Vec<Resource>,
    pub rounds: usize,
    pub elapsed: Duration,
}

impl TeardownReport {
    /// One line per kind: how many, when it started, when it was done (seconds since the teardown began).
    pub fn summary(&self) -> String {
        let mut out = String::new();
        for (kind, t) in &self.kinds {
            if *kind == ResourceKind::SharedTag {
                continue;
            }
            let secs = |d: Option<Duration>| {
                d.map_or("-".to_string(), |d| format!("{:.1}", d.as_secs_f64()))
            };
            out.push_str(&format!(
                "  {kind}: {} deleted (started {} s, done {} s)\n",
                t.count,
                secs(t.started),
                secs(t.done)
            ));
        }
        for r in &self.untagged {
            out.push_str(&format!("  kept {}\n", inventory::describe_kept(r)));
        }
        out
    }
}

/// The pause between two rounds: 200 ms doubling to 5 s (jittered), restarted whenever a round made progress. The
/// teardown never gives up on a schedule: it stops when nothing changed for `NO_PROGRESS_LIMIT`.
const ROUND_PAUSES: ballast_common::retry::Policy = ballast_common::retry::Policy::new(
    Duration::from_millis(200),
    Duration::from_secs(5),
    NO_PROGRESS_LIMIT,
);

/// Deletes every resource of `cluster` (the clients' region) and removes its tag from the shared ones, in
/// rounds until nothing is left; with `discovery`, IRSA's two documents there too. `progress` gets a line when
/// a kind starts and when it is done.
///
/// Each round's resources are judged against `identity` first (`crate::cloud::identity`): one carrying another
/// cluster's id, or one made under this name without an id unless `identity.adopt_untagged`, stops the
/// teardown before that round deletes anything.
pub async fn teardown(
    cloud: &Cloud,
    cluster: &str,
    identity: &crate::cloud::identity::Identity,
    discovery: Option<&DiscoveryTarget>,
    progress: &dyn TeardownProgress,
) -> Result<TeardownReport, TeardownError> {
    let start = Instant::now();
    // Every resource seen in any round, by label: what "found" counts.
    let mut found: BTreeSet<String> = BTreeSet::new();
    let mut report = TeardownReport::default();
    let mut last_change = Instant::now();
    let mut previous: Option<Inventory> = None;
    let mut last_errors: BTreeMap<String, String> = BTreeMap::new();
    let mut pauses = ROUND_PAUSES.pauses();
    loop {
        let inventory = discover(cloud, cluster, discovery)
            .await
            .map_err(|source| TeardownError::Discover {
                cluster: cluster.to_string(),
                source,
            })?;
        identity.check(&inventory.resources, "they are deleted with the cluster")?;
        note_progress(&mut report, &inventory, start.elapsed(), progress);
        found.extend(inventory.resources.iter().map(Resource::label));
        progress.tally(found.len(), inventory.resources.len());
        if previous.as_ref() != Some(&inventory) {
            last_change = Instant::now();
            pauses = ROUND_PAUSES.pauses();
        }
        if inventory.is_empty() {
            break;
        }
        if last_change.elapsed() > NO_PROGRESS_LIMIT {
            return Err(TeardownError::Stuck {
                cluster: cluster.to_string(),
                waited: last_change.elapsed(),
                remaining: inventory
                    .resources
                    .iter()
                    .map(|r| match last_errors.get(&r.label()) {
                        Some(e) => format!("{} ({e})", r.label()),
                        None => r.label(),
                    })
                    .collect(),
            });
        }
        let round = plan_round(&inventory);
        report.rounds += 1;
        let mut fatal = Vec::new();
        for (kind, resources) in &round.delete {
            let timing = report.kinds.entry(*kind).or_default();
            if timing.started.is_none() {
                timing.started = Some(start.elapsed());
                progress.line(&format!("deleting {} {kind}(s)", resources.len()));
            }
            progress.deleting(*kind);
            if *kind == ResourceKind::SharedTag {
                report.untagged.extend(resources.iter().cloned());
            }
            let deleting = Deleting {
                cloud,
                cluster,
                discovery,
            };
            for (resource, result) in delete_kind(deleting, *kind, resources).await {
                match result {
                    Ok(()) => {
                        last_errors.remove(&resource.label());
                    }
                    Err(Failed {
                        outcome: Outcome::Fatal,
                        error,
                    }) => fatal.push(error),
                    Err(Failed { error, .. }) => {
                        tracing::info!(resource = %resource.label(), %error, "not yet");
                        last_errors.insert(resource.label(), error.to_string());
                    }
                }
            }
        }
        if !fatal.is_empty() {
            return Err(TeardownError::Fatal {
                cluster: cluster.to_string(),
                errors: fatal,
            });
        }
        previous = Some(inventory);
        if let Some(pause) = pauses.next() {
            tokio::time::sleep(pause).await;
        }
    }
    report.untagged.sort();
    report.untagged.dedup();
    report.elapsed = start.elapsed();
    Ok(report)
}

/// Records counts, and the time each kind that was found is gone.
fn note_progress(
    report: &mut TeardownReport,
    inventory: &Inventory,
    now: Duration,
    progress: &dyn TeardownProgress,
) {
    let counts = inventory.counts();
    for (kind, n) in &counts {
        let timing = report.kinds.entry(*kind).or_default();
        timing.count = timing.count.max(*n);
        timing.done = None;
    }
    for (kind, timing) in report.kinds.iter_mut() {
        if !counts.contains_key(kind) && timing.done.is_none() && timing.count > 0 {
            timing.done = Some(now);
            if *kind != ResourceKind::SharedTag {
                progress.line(&format!(
                    "{kind}: {} deleted ({:.1} s)",
                    timing.count,
                    now.as_secs_f64()
                ));
            }
        }
    }
}

/// Deletes the resources of one kind through its [`Delete`] (concurrently where they are independent).
async fn delete_kind(
    deleting: Deleting<'_>,
    kind: ResourceKind,
    resources: &[Resource],
) -> Vec<(Resource, Result<(), Failed>)> {
    match deleter(kind) {
        Some((_, deleter)) => deleter.delete_found(deleting, resources).await,
        // Never: a test holds every kind to one delete. Were it to happen, the teardown stops naming them.
        None => resources
            .iter()
            .map(|r| (r.clone(), Err(not_deleted_here(r))))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloud::kinds::task::Home;

    /// The kinds whose delete lists `kind`.
    fn deleting(kind: ResourceKind) -> usize {
        deleters()
            .filter(|d| matches!(d.deletes(), Deletes::Kinds(kinds) if kinds.contains(&kind)))
            .count()
    }

    #[test]
    fn every_kind_a_teardown_finds_has_exactly_one_delete() {
        for kind in ResourceKind::ALL {
            assert_eq!(deleting(kind), 1, "{kind}: deletes listing it");
            assert!(deleter(kind).is_some(), "{kind}");
        }
    }

    #[test]
    fn every_kind_in_the_engine_has_a_delete_or_lives_in_the_state_store() {
        for (i, step) in crate::cloud::engine::steps().enumerate() {
            match step.as_delete().deletes() {
                Deletes::Kinds(kinds) => assert!(!kinds.is_empty(), "step {i} deletes no kind"),
                // Deleted as other kinds: those must have a delete of their own.
                Deletes::With(kinds) => {
                    assert!(!kinds.is_empty(), "step {i} is deleted with no kind");
                    for kind in kinds {
                        assert_eq!(deleting(*kind), 1, "step {i} is deleted as {kind}");
                    }
                }
                Deletes::StateStore => assert_eq!(
                    step.home(),
                    Home::StateStore,
                    "step {i} says it has nothing in AWS but makes AWS resources"
                ),
            }
        }
    }

    #[test]
    fn the_teardowns_own_kinds_are_none_the_engine_makes() {
        for own in FOUND_ONLY {
            let Deletes::Kinds(kinds) = own.deletes() else {
                panic!("a teardown's own delete deletes kinds");
            };
            for kind in kinds {
                assert!(
                    !crate::cloud::engine::deleters().any(
                        |d| matches!(d.deletes(), Deletes::Kinds(k) | Deletes::With(k) if k.contains(kind))
                    ),
                    "{kind} is made by `update cluster`: its Task deletes it"
                );
            }
        }
    }
}
