//! Observing: the record, the control-plane instances, the members that answer, the local etcd and data dir,
//! and whether a backup is due. Everything `decide` needs, read in one round.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use etcd_client::Client;

use super::{unlisted, Supervisor, SupervisorError};
use crate::backup;
use crate::decide::{
    client_url, ClusterView, LocalData, LocalEtcd, MemberStatus, MemberView, Observation,
};
use crate::peers::PeerInstance;
use crate::process::EtcdProcess;
use crate::record::{now_stamp, read_health, read_record};

impl Supervisor {
    /// `reuse_listing`: an EC2 listing younger than this may stand in for a new one (the last round was steady
    /// and quiet, or waiting for another learner).
    pub(super) async fn observe(
        &mut self,
        reuse_listing: Option<Duration>,
    ) -> Result<Observation, SupervisorError> {
        let reusable = self
            .listed
            .as_ref()
            .filter(|(at, _)| reuse_listing.is_some_and(|max| at.elapsed() < max))
            .map(|(_, listed)| listed.clone());
        let mut instances = if let Some(listed) = reusable {
            self.record = read_record(&self.store, &self.paths).await?;
            listed
        } else {
            let (record, instances) = tokio::join!(
                read_record(&self.store, &self.paths),
                self.peers.instances()
            );
            self.record = record?;
            let instances = instances?;
            // Before etcd starts (the first round) and whenever a volume moves: every member's name resolves to
            // the instance holding its volume.
            self.update_peer_hosts(&instances).await?;
            self.listed = Some((Instant::now(), instances.clone()));
            instances
        };
        let running = self.process.as_mut().is_some_and(EtcdProcess::is_running);
        if !running {
            if let Some(p) = self.process.take() {
                tracing::warn!(pid = p.pid(), "etcd exited");
                p.kill().await;
            }
        }

        // Ask every alive control-plane instance (and ourselves while etcd runs) for its status, concurrently.
        let mut ips: Vec<String> = instances
            .iter()
            .filter(|i| {
                i.state.is_alive() && !i.private_ip.is_empty() && i.private_ip != self.me.ip
            })
            .map(|i| i.private_ip.clone())
            .collect();
        ips.sort();
        ips.dedup();
        if running {
            ips.push(self.me.ip.clone());
        }
        let mut clients = Vec::new();
        for ip in &ips {
            let endpoint = client_url(ip);
            clients.push((ip.clone(), self.client_for(&endpoint).await.ok()));
        }
        let timeout = self.config.request_timeout;
        let answers = member_statuses(clients, timeout).await;
        let mut statuses: Vec<(String, MemberStatus)> = Vec::new();
        for (ip, status) in answers {
            match status {
                Some(s) => statuses.push((ip, s)),
                None => {
                    self.clients.remove(&client_url(&ip));
                }
            }
        }
        let local_etcd = if !running {
            LocalEtcd::Stopped
        } else {
            statuses
                .iter()
                .find(|(ip, _)| *ip == self.me.ip)
                .map_or(LocalEtcd::Unresponsive, |(_, s)| LocalEtcd::Running(*s))
        };
        let cluster = self.cluster_view(&statuses).await;
        self.view = cluster.clone();
        let unlisted = self
            .look_up_unlisted(&mut instances, cluster.as_ref())
            .await;

        let has_member_data = self.local.has_member_data();
        if let Some(record) = &self.record {
            let seed_of_epoch = record.record.seed.as_deref() == Some(self.me.instance_id.as_str())
                && self.local.epoch() == Some(record.record.epoch)
                && (has_member_data || matches!(local_etcd, LocalEtcd::Running(_)));
            if seed_of_epoch
                && self
                    .local
                    .seeded_epoch()
                    .is_none_or(|e| e < record.record.epoch)
            {
                self.local.set_seeded(record.record.epoch)?;
            }
        }
        // The member the data belongs to travels with it (a re-attached volume): recorded once etcd answers on it.
        if let LocalEtcd::Running(st) = local_etcd {
            if has_member_data && st.member_id != 0 && self.local.member_id() != Some(st.member_id)
            {
                self.local.set_member_id(st.member_id)?;
            }
        }
        let local_data = LocalData {
            present: has_member_data || (running && self.local.epoch().is_some()),
            epoch: self.local.epoch(),
            seeded_epoch: self.local.seeded_epoch(),
            member_id: has_member_data.then(|| self.local.member_id()).flatten(),
        };
        let (_, now_unix) = now_stamp();
        let (reports, epoch_backup_revision) = if cluster.is_none() && !local_data.present {
            let epoch = self.record.as_ref().map(|r| r.record.epoch);
            let revision = backup::list_backups(&self.store, &self.paths)
                .await?
                .iter()
                .filter(|b| Some(b.epoch) == epoch)
                .map(|b| b.revision)
                .max();
            (read_health(&self.store, &self.paths).await?, revision)
        } else {
            (Vec::new(), None)
        };
        let leader =
            matches!(local_etcd, LocalEtcd::Running(s) if s.leader == s.member_id && s.leader != 0);
        let backup_due = self.backup_due(now_unix, leader).await;
        Ok(Observation {
            me: self.me.clone(),
            record: self.record.as_ref().map(|r| r.record.clone()),
            local_data,
            local_etcd,
            instances,
            unlisted,
            cluster,
            reports,
            epoch_backup_revision,
            now_unix,
            backup_due,
            member_volume: self.config.member_volume,
            peer_hosts: self.peer_hosts.clone(),
        })
    }

    /// Keeps the hosts file's block of peer names current (peer URLs by name only). A failed DescribeVolumes
    /// keeps the other members' last known addresses (logged); this member's own entry is always written.
    async fn update_peer_hosts(
        &mut self,
        instances: &[PeerInstance],
    ) -> Result<(), SupervisorError> {
        let Some(names) = self.config.peer_names.clone() else {
            return Ok(());
        };
        let volumes = match self.peers.member_volumes().await {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::warn!(error = %e, "listing the etcd volumes for the peer names; keeping the last addresses");
                None
            }
        };
        let wanted = match volumes {
            Some(volumes) => crate::hosts::entries(
                &self.config.cluster_name,
                &volumes,
                instances,
                &names.member,
                &self.me.ip,
            ),
            None => {
                let mut last = self.peer_hosts.clone();
                if let Some(own) = &self.me.peer_name {
                    last.insert(own.clone(), self.me.ip.clone());
                }
                last
            }
        };
        if wanted != self.peer_hosts || self.peer_hosts.is_empty() {
            if crate::hosts::update_file(&names.hosts_file, &wanted)? {
                tracing::info!(hosts = ?wanted, file = %names.hosts_file.display(), "etcd peer names updated");
            }
            self.peer_hosts = wanted;
        }
        Ok(())
    }

    /// The member list of the cluster that answers best: one with a leader, the most members answering, ours
    /// on a tie.
    async fn cluster_view(&mut self, statuses: &[(String, MemberStatus)]) -> Option<ClusterView> {
        let mut groups: HashMap<u64, Vec<&(String, MemberStatus)>> = HashMap::new();
        for s in statuses {
            groups.entry(s.1.cluster_id).or_default().push(s);
        }
        let cluster_id = groups
            .iter()
            .max_by_key(|(_, g)| {
                (
                    g.iter().any(|(_, s)| s.leader != 0),
                    g.len(),
                    g.iter().any(|(ip, _)| *ip == self.me.ip),
                )
            })
            .map(|(id, _)| *id)?;
        let mut group: Vec<(String, MemberStatus)> =
            groups.remove(&cluster_id)?.into_iter().cloned().collect();
        // Ask the leader first, then voters, then anyone (3.4 serves the member list locally).
        group.sort_by_key(|(_, s)| (s.member_id != s.leader, s.is_learner));
        for (ip, _) in &group {
            let endpoint = client_url(ip);
            let Ok(mut client) = self.client_for(&endpoint).await else {
                continue;
            };
            let timeout = self.config.request_timeout;
            let Ok(Ok(list)) = tokio::time::timeout(timeout, client.member_list()).await else {
                self.clients.remove(&endpoint);
                continue;
            };
            let members = list
                .members()
                .iter()
                .map(|m| MemberView {
                    id: m.id(),
                    name: m.name().to_string(),
                    peer_url: m.peer_urls().first().cloned().unwrap_or_default(),
                    client_url: m.client_urls().first().cloned().unwrap_or_default(),
                    is_learner: m.is_learner(),
                    status: group
                        .iter()
                        .find(|(_, s)| s.member_id == m.id())
                        .map(|(_, s)| *s),
                })
                .collect();
            return Some(ClusterView {
                cluster_id,
                members,
            });
        }
        None
    }

    /// Looks up by id the members' instances the cluster's listing missed: those found join `instances` (with
    /// their state), the others are tracked as absent. Returns how long each has been absent without a break.
    async fn look_up_unlisted(
        &mut self,
        instances: &mut Vec<PeerInstance>,
        view: Option<&ClusterView>,
    ) -> BTreeMap<String, Duration> {
        let asked = unlisted::ids_to_look_up(&self.me, instances, view);
        let found = if asked.is_empty() {
            Some(Vec::new())
        } else {
            match self.peers.lookup(&asked).await {
                Ok(found) => Some(found),
                Err(e) => {
                    // Unknown, never absent: the absence starts over.
                    tracing::warn!(error = %e, "looking up unlisted members' instances");
                    None
                }
            }
        };
        let now = Instant::now();
        self.unlisted_since =
            unlisted::track_absence(&self.unlisted_since, &asked, found.as_deref(), now);
        instances.extend(found.unwrap_or_default());
        unlisted::absent_for(&self.unlisted_since, now)
    }

    async fn backup_due(&mut self, now_unix: i64, leader: bool) -> bool {
        if leader
            && matches!(
                self.store
                    .modified_unix(&backup::request_key(&self.paths))
                    .await,
                Ok(Some(_))
            )
        {
            return true;
        }
        let Some(interval) = self.config.backup_interval else {
            return false;
        };
        if self.last_backup_unix.is_none() {
            // Once per process: the newest backup in the store.
            if let Ok(list) = backup::list_backups(&self.store, &self.paths).await {
                self.last_backup_unix = Some(list.last().map_or(0, |b| b.created_unix));
            }
        }
        self.last_backup_unix
            .is_some_and(|last| now_unix - last >= interval.as_secs() as i64)
    }
}

/// One member's status through its client, bounded by `timeout`; None when it does not answer in time.
pub(super) async fn member_status(client: &mut Client, timeout: Duration) -> Option<MemberStatus> {
    match tokio::time::timeout(timeout, client.status()).await {
        Ok(Ok(s)) => Some(MemberStatus {
            member_id: s.header().map_or(0, |h| h.member_id()),
            cluster_id: s.header().map_or(0, |h| h.cluster_id()),
            raft_index: s.raft_index(),
            is_learner: s.is_learner(),
            leader: s.leader(),
        }),
        _ => None,
    }
}

/// Status of every client concurrently, each bounded by `timeout`.
pub(super) async fn member_statuses(
    clients: Vec<(String, Option<Client>)>,
    timeout: Duration,
) -> Vec<(String, Option<MemberStatus>)> {
    let mut set = tokio::task::JoinSet::new();
    for (ip, client) in clients {
        set.spawn(async move {
            let Some(mut client) = client else {
                return (ip, None);
            };
            let status = member_status(&mut client, timeout).await;
            (ip, status)
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            out.push(r);
        }
    }
    out
}
