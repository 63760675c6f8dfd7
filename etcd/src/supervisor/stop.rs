//! Stopping etcd when the node shuts down (nodeup's SIGTERM): a leader with a quorum of healthy voters hands
//! leadership to an up-to-date voter first, so that the cluster has a new leader after one round trip instead of
//! an election timeout; then etcd stops. Every step is bounded: a shutdown is never held up for long, and with
//! the peers gone the handoff is skipped (etcd's own transfer would hang for seconds).
//!
//! Acknowledged writes are safe whichever way etcd stops: etcd acknowledges a write once a quorum has it in its
//! fsynced log, so neither the handoff nor the SIGKILL that ends etcd can lose one.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::observe::{member_status, member_statuses};
use super::Supervisor;
use crate::decide::{plan_handoff, stop_keeps_quorum, Handoff, HandoffMember};

/// Each look before the handoff (the local status and member list, the peers' statuses): the peers answer in
/// milliseconds when they are up; one that does not answer within this is gone for the handoff's purpose.
const LOOK_TIMEOUT: Duration = Duration::from_millis(300);
/// While MoveLeader runs, how often the local member is asked whom it follows: etcd 3.4 answers MoveLeader only
/// at its next 100 ms tick after the transfer, which takes a few milliseconds.
const LEADER_POLL: Duration = Duration::from_millis(10);
/// The MoveLeader call: a transfer to a caught-up voter takes a round trip or two; beyond this the stop goes on
/// (the transfer may still complete; if not, the followers elect a leader after their timeout, as on a crash).
const MOVE_LEADER_TIMEOUT: Duration = Duration::from_millis(500);
/// The key in etcd whose holder alone may stop its member on a stop request: one grant at a time, across the
/// control-plane nodes, so that two requests seen at once are looked at one after the other.
const STOP_GRANT_KEY: &str = "ballast/etcd-stop-grant";
/// How long a grant holds (an etcd lease, by the leader's clock): beyond a look and a stop (about 2 s at worst),
/// so that the next node's look, once it may take the grant, sees this member stopped; and short, because the
/// stopped member never releases it: a roll's next control-plane stop waits this long at most (30 s made every
/// roll's second control-plane stop outlast the roll's 20 s wait for an answer).
const STOP_GRANT_TTL_SECONDS: i64 = 5;
/// The grant's calls (a lease and a transaction, each through a quorum).
const GRANT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a stop went, for the log and the tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// etcd was not running.
    NotRunning,
    /// Not the leader: stopped.
    Follower,
    /// Leadership went to `to`, then etcd stopped.
    HandedOver { to: u64 },
    /// The leader stopped without a handoff, for `reason`.
    NoHandoff { reason: String },
}

impl Supervisor {
    /// Stops the local etcd in order: hand leadership over when that can work, then stop it (SIGKILL). Bounded
    /// (about 1.5 s at worst: the looks, the MoveLeader call).
    pub async fn stop_gracefully(&mut self) -> StopOutcome {
        let running = self.process.as_mut().is_some_and(|p| p.is_running());
        if !running {
            self.stop_etcd().await;
            return StopOutcome::NotRunning;
        }
        let outcome = self.hand_over().await;
        match &outcome {
            StopOutcome::HandedOver { to } => {
                tracing::info!(
                    to = format!("{to:x}"),
                    "etcd leadership handed over; stopping etcd"
                )
            }
            StopOutcome::NoHandoff { reason } => {
                tracing::info!(%reason, "etcd leader stopping without a leadership handoff")
            }
            _ => tracing::info!("stopping etcd (not the leader)"),
        }
        // SIGKILL, not SIGTERM, once leadership is elsewhere: etcd's own graceful stop drains its peer and client
        // servers for a second or more (measured: over 1 s on the local cloud, after the handoff) and adds nothing
        // to safety (what it acknowledged is in a quorum's fsynced logs); a leader that kept its leadership would
        // also try a transfer of its own, which hangs for seconds without peers.
        if let Some(p) = self.process.take() {
            p.kill().await;
        }
        self.clients.remove(&self.me.client_url());
        outcome
    }

    /// Whether this member may stop on a stop request now: it takes the cluster's stop grant (a key in etcd
    /// under a 5 s lease, written only if no other node holds it: a write through a quorum, so two nodes never
    /// both hold it), then looks at every voter and keeps the grant only when the others that answer, following a
    /// leader, are still a quorum without it (`decide::stop_keeps_quorum`). `Err` says why not (the request then
    /// waits and is looked at again). Bounded: a few seconds at worst.
    pub async fn grant_stop(&mut self) -> Result<(), String> {
        let local_url = self.me.client_url();
        let Some(mut local) = self.short_client(&local_url).await else {
            return Err("the local etcd does not answer".into());
        };
        let Some(me) = member_status(&mut local, LOOK_TIMEOUT).await else {
            return Err("the local etcd does not answer its status".into());
        };
        let lease = match tokio::time::timeout(
            GRANT_TIMEOUT,
            local.lease_grant(STOP_GRANT_TTL_SECONDS, None),
        )
        .await
        {
            Ok(Ok(lease)) => lease.id(),
            Ok(Err(e)) => return Err(format!("no lease for the stop grant: {e}")),
            Err(_) => {
                return Err(format!(
                    "no lease for the stop grant within {GRANT_TIMEOUT:?}"
                ))
            }
        };
        let take = Txn::new()
            .when([Compare::create_revision(
                STOP_GRANT_KEY,
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(
                STOP_GRANT_KEY,
                self.me.instance_id.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let taken = match tokio::time::timeout(GRANT_TIMEOUT, local.txn(take)).await {
            Ok(Ok(answer)) => answer.succeeded(),
            Ok(Err(e)) => return Err(format!("taking the stop grant: {e}")),
            Err(_) => {
                return Err(format!(
                    "taking the stop grant: no answer within {GRANT_TIMEOUT:?}"
                ))
            }
        };
        let verdict = if taken {
            match self.members_as_seen(&mut local, &me).await {
                Some(members) => stop_keeps_quorum(me.member_id, me.cluster_id, &members),
                None => Err("no member list from the local etcd".into()),
            }
        } else {
            Err(format!(
                "another member's stop was granted less than {STOP_GRANT_TTL_SECONDS} s ago"
            ))
        };
        if verdict.is_err() {
            // The lease goes on its own within its TTL; revoking it lets the next node look sooner.
            let _ = tokio::time::timeout(GRANT_TIMEOUT, local.lease_revoke(lease)).await;
        }
        verdict
    }

    /// The member list with each other member's fresh status (`me`'s own as given); `None` without a list.
    async fn members_as_seen(
        &mut self,
        local: &mut Client,
        me: &crate::decide::MemberStatus,
    ) -> Option<Vec<HandoffMember>> {
        let list = match tokio::time::timeout(LOOK_TIMEOUT, local.member_list()).await {
            Ok(Ok(list)) => list,
            _ => return None,
        };
        let mut clients = Vec::new();
        for m in list.members() {
            if m.id() == me.member_id {
                continue;
            }
            let client = match m.client_urls().first().filter(|u| !u.is_empty()) {
                Some(url) => self.short_client(url).await,
                None => None,
            };
            clients.push((m.id().to_string(), client));
        }
        let statuses = member_statuses(clients, LOOK_TIMEOUT).await;
        Some(
            list.members()
                .iter()
                .map(|m| HandoffMember {
                    id: m.id(),
                    is_learner: m.is_learner(),
                    status: if m.id() == me.member_id {
                        Some(*me)
                    } else {
                        statuses
                            .iter()
                            .find(|(id, _)| *id == m.id().to_string())
                            .and_then(|(_, s)| *s)
                    },
                })
                .collect(),
        )
    }

    /// The look and the handoff; never stops etcd itself.
    async fn hand_over(&mut self) -> StopOutcome {
        let no_handoff = |reason: String| StopOutcome::NoHandoff { reason };
        let local_url = self.me.client_url();
        let Some(mut local) = self.short_client(&local_url).await else {
            return no_handoff("the local etcd does not answer".into());
        };
        let Some(me) = member_status(&mut local, LOOK_TIMEOUT).await else {
            return no_handoff("the local etcd does not answer its status".into());
        };
        if me.leader != me.member_id || me.leader == 0 {
            return StopOutcome::Follower;
        }
        let list = match tokio::time::timeout(LOOK_TIMEOUT, local.member_list()).await {
            Ok(Ok(list)) => list,
            _ => return no_handoff("no member list from the local etcd".into()),
        };
        let mut others = Vec::new();
        for m in list.members() {
            if m.id() == me.member_id || m.is_learner() {
                continue;
            }
            let Some(url) = m.client_urls().first().filter(|u| !u.is_empty()) else {
                continue;
            };
            others.push((m.id(), url.clone()));
        }
        let mut clients = Vec::new();
        for (id, url) in &others {
            clients.push((id.to_string(), self.short_client(url).await));
        }
        let statuses = member_statuses(clients, LOOK_TIMEOUT).await;
        let members: Vec<HandoffMember> = list
            .members()
            .iter()
            .map(|m| HandoffMember {
                id: m.id(),
                is_learner: m.is_learner(),
                status: if m.id() == me.member_id {
                    Some(me)
                } else {
                    statuses
                        .iter()
                        .find(|(id, _)| *id == m.id().to_string())
                        .and_then(|(_, s)| *s)
                },
            })
            .collect();
        match plan_handoff(&me, &members) {
            Handoff::NotLeader => StopOutcome::Follower,
            Handoff::Skip { reason } => no_handoff(reason),
            Handoff::MoveTo { member_id } => {
                tracing::info!(
                    to = format!("{member_id:x}"),
                    "etcd leader stopping: moving leadership"
                );
                match tokio::time::timeout(MOVE_LEADER_TIMEOUT, move_leader(&local, member_id))
                    .await
                {
                    Ok(Ok(())) => StopOutcome::HandedOver { to: member_id },
                    Ok(Err(e)) => no_handoff(format!("MoveLeader to {member_id:x} failed: {e}")),
                    Err(_) => no_handoff(format!(
                        "MoveLeader to {member_id:x} did not finish within {MOVE_LEADER_TIMEOUT:?}"
                    )),
                }
            }
        }
    }

    /// A client for one endpoint, from the cache or connected within [`LOOK_TIMEOUT`].
    async fn short_client(&mut self, endpoint: &str) -> Option<Client> {
        if let Some(c) = self.clients.get(endpoint) {
            return Some(c.clone());
        }
        let endpoints = [endpoint.to_string()];
        let connect = self.tls.connect(&endpoints, LOOK_TIMEOUT);
        let client = tokio::time::timeout(LOOK_TIMEOUT, connect)
            .await
            .ok()?
            .ok()?;
        self.clients.insert(endpoint.to_string(), client.clone());
        Some(client)
    }
}

/// MoveLeader to `target` through the local (leading) member; done as soon as the local member follows `target`,
/// without waiting for etcd's answer to the call (it comes at etcd's next tick, up to 100 ms later).
async fn move_leader(local: &Client, target: u64) -> Result<(), etcd_client::Error> {
    let mut mover = local.clone();
    let mut watcher = local.clone();
    let call = mover.move_leader(target);
    tokio::pin!(call);
    loop {
        tokio::select! {
            answer = &mut call => return answer.map(|_| ()),
            () = tokio::time::sleep(LEADER_POLL) => {
                if let Ok(Ok(status)) = tokio::time::timeout(LOOK_TIMEOUT, watcher.status()).await {
                    if status.leader() == target {
                        return Ok(());
                    }
                }
            }
        }
    }
}
