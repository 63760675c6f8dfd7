//! The clusters kept in a state store: reading them, and changing them safely.
//!
//! Every change follows the same path: validate the whole resulting config (a spec error writes nothing),
//! take the cluster's lock, read the current objects again and validate again, write each changed object
//! conditionally (on the version the writer read, so an edit made against stale data is refused), write the
//! completed spec last, release the lock. `cluster.yaml` is the commit point of a create (written last) and of
//! a delete (removed first), so a crash leaves either a whole cluster or leftovers that the next create or
//! delete clears, never a cluster that half exists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::store::{Precondition, StateStore, StoreError, Version};
use ballast_state::defaults::complete;
use ballast_state::document::{parse_objects, to_yaml_documents, SpecObject};
use ballast_state::error::{FieldError, SpecErrors};
use ballast_state::layout::{ClusterPaths, InvalidClusterName, CLUSTER_SPEC_SUFFIX};
use ballast_state::pki::{ClusterSecrets, PkiError};
use ballast_state::spec::{Cluster, ClusterConfig, InstanceGroup};
use ballast_state::timestamp::unix_rfc3339;
use ballast_state::validate::validate;

/// How long a writer's lock holds before another writer may take it over. Writes take seconds; this only
/// matters when a writer died holding the lock.
pub const LOCK_TTL_SECS: i64 = 120;

/// Failures reading or changing the clusters in a state store.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The cluster has no `cluster.yaml` in the store.
    #[error(
        "cluster {cluster:?} not found in {store}: `ballast get clusters` lists the clusters there"
    )]
    ClusterNotFound { cluster: String, store: String },
    /// `create` of a cluster that exists.
    #[error("cluster {cluster:?} already exists in {store}: use `ballast replace -f` or `ballast edit cluster` to change it")]
    ClusterExists { cluster: String, store: String },
    /// A cluster name that is not a DNS name: refused before it becomes a key prefix.
    #[error("{0}")]
    InvalidClusterName(#[from] InvalidClusterName),
    #[error("instance group {group:?} not found in cluster {cluster:?}: `ballast get instancegroups` lists them")]
    InstanceGroupNotFound { cluster: String, group: String },
    #[error("instance group {group:?} already exists in cluster {cluster:?}: use `ballast replace -f` to change it")]
    InstanceGroupExists { cluster: String, group: String },
    /// The resulting spec is invalid; nothing was written.
    #[error("{0}\nnothing was changed")]
    Invalid(SpecErrors),
    /// Another writer holds the cluster's lock.
    #[error(
        "cluster {cluster:?} is being changed by {holder} (`{command}`, since {}); nothing was written \
         after waiting {} for it (--lock-wait). Retry when it is done; if that command died, its lock \
         expires 2 minutes after its last renewal by the state store's clock (about {} by its holder's)",
        lock_stamp(.since),
        lock_waited(.waited_secs),
        lock_stamp(.expires)
    )]
    Locked {
        cluster: String,
        holder: String,
        command: String,
        /// When the holder took the lock and when it expires (Unix seconds): numbers, not text, to keep every
        /// `Result` of the registry small.
        since: i64,
        expires: i64,
        /// How long this writer waited for the lock (0: it did not wait).
        waited_secs: u64,
    },
    /// A conditional write lost a race.
    #[error("conflict: {0}")]
    Conflict(#[source] StoreError),
    /// An object in the store does not parse.
    // Not `ballast replace -f`: replace loads the cluster first and fails on this same object.
    #[error("{0}\nthe stored object is damaged, and commands that load this cluster fail until it is mended: put a good copy back in its place (an earlier version, if the bucket keeps versions)")]
    Corrupt(SpecErrors),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// The cluster's id (`crate::cluster_id`) could not be read or written.
    #[error(transparent)]
    ClusterId(#[from] crate::cluster_id::ClusterIdError),
    #[error("serializing {what}: {source}")]
    Serialize {
        what: String,
        #[source]
        source: yaml_serde::Error,
    },
}

impl From<StoreError> for RegistryError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } => RegistryError::Conflict(e),
            other => RegistryError::Store(other),
        }
    }
}

/// Who is writing, for the lock record and error messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Writer {
    /// `user@host pid N`
    pub holder: String,
    /// The command line, e.g. `ballast edit cluster`.
    pub command: String,
}

impl Writer {
    /// This process, running `command`.
    pub fn current(command: &str) -> Self {
        let user = std::env::var("USER").unwrap_or_else(|_| "unknown".to_string());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown-host".to_string());
        Writer {
            holder: format!("{user}@{host} pid {}", std::process::id()),
            command: command.to_string(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct LockRecord {
    #[serde(flatten)]
    writer: Writer,
    token: String,
    acquired_at: i64,
    expires_at: i64,
    /// The holding process, so that a lock whose holder died on this machine is taken over at once
    /// (`crate::lock_holder`). Absent from locks an older Ballast wrote, and where `/proc` does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<crate::lock_holder::HolderProcess>,
}

/// A held lock; release it with [`Registry::unlock`], keep it with [`Registry::keep_lock`].
#[derive(Debug)]
struct Lock {
    key: String,
    token: String,
    /// The record as written, and the version the store gave it: a renewal rewrites it on that version, so a
    /// writer whose lock was taken over learns it instead of writing on.
    data: Vec<u8>,
    version: Version,
    renewed: tokio::time::Instant,
}

/// A cluster as stored, with the versions of its objects (for conditional writes).
#[derive(Debug, Clone)]
pub struct StoredCluster {
    pub config: ClusterConfig,
    pub cluster_version: Version,
    pub group_versions: BTreeMap<String, Version>,
}

impl StoredCluster {
    /// The precondition for rewriting instance group `name`: its version, or "must not exist" for a new one.
    pub fn group_precondition(&self, name: &str) -> Precondition {
        self.group_versions
            .get(name)
            .map_or(Precondition::MustNotExist, |v| {
                Precondition::MustMatch(v.clone())
            })
    }
}

/// A change to one cluster's spec objects.
#[derive(Debug, Clone, Default)]
pub struct SpecChange {
    /// The new Cluster object, written only if the stored one is still at this precondition.
    pub cluster: Option<(Cluster, Precondition)>,
    pub put_groups: Vec<(InstanceGroup, Precondition)>,
    /// Groups to delete, with the version they must still have.
    pub delete_groups: Vec<(String, Version)>,
}

impl SpecChange {
    pub fn is_empty(&self) -> bool {
        self.cluster.is_none() && self.put_groups.is_empty() && self.delete_groups.is_empty()
    }
}

/// The clusters in one state store.
#[derive(Debug, Clone)]
pub struct Registry {
    store: StateStore,
    /// How long a writer waits for another writer's lock before giving up (0: not at all).
    lock_wait: std::time::Duration,
    /// How often a holder renews its lock while it works ([`LOCK_RENEWAL`]; shorter in tests).
    lock_renewal: std::time::Duration,
}

/// The longest a writer may wait for the cluster's lock: a lock lives [`LOCK_TTL_SECS`], so a longer wait only
/// outlives writers that died.
pub const MAX_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(600);
/// How often a waiting writer tries the lock again.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(500);
/// A holder rewrites its lock this often while it works, so a long delete never outlives [`LOCK_TTL_SECS`].
const LOCK_RENEWAL: std::time::Duration = std::time::Duration::from_secs(LOCK_TTL_SECS as u64 / 4);

impl Registry {
    pub fn new(store: StateStore) -> Self {
        Registry {
            store,
            lock_wait: std::time::Duration::ZERO,
            lock_renewal: LOCK_RENEWAL,
        }
    }

    /// Waits up to `wait` (at most [`MAX_LOCK_WAIT`]) for a lock another writer holds, instead of failing at once.
    pub fn with_lock_wait(self, wait: std::time::Duration) -> Self {
        Registry {
            lock_wait: wait.min(MAX_LOCK_WAIT),
            ..self
        }
    }

    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// Names of the clusters in the store, sorted.
    pub async fn list_clusters(&self) -> Result<Vec<String>, RegistryError> {
        let keys = self.store.list("").await?;
        Ok(keys
            .iter()
            .filter_map(|k| k.strip_suffix(CLUSTER_SPEC_SUFFIX))
            .filter(|name| !name.contains('/'))
            .map(str::to_string)
            .collect())
    }

    /// The cluster as written, with object versions.
    pub async fn load(&self, name: &str) -> Result<StoredCluster, RegistryError> {
        let paths = ClusterPaths::checked(name)?;
        let Some(object) = self.store.get(&paths.cluster_spec()).await? else {
            return Err(RegistryError::ClusterNotFound {
                cluster: name.to_string(),
                store: self.store.url(),
            });
        };
        let cluster = match parse_stored(&paths.cluster_spec(), &object.data)? {
            SpecObject::Cluster(c) => c,
            other => {
                return Err(corrupt(
                    &paths.cluster_spec(),
                    format!("holds {}, not a Cluster", other.reference()),
                ))
            }
        };
        check_name_matches_key(
            &paths.cluster_spec(),
            "Cluster",
            &cluster.metadata.name,
            name,
        )?;
        let mut instance_groups = Vec::new();
        let mut group_versions = BTreeMap::new();
        for key in self.store.list(&paths.instance_groups_prefix()).await? {
            let Some(stored) = self.store.get(&key).await? else {
                continue; // deleted since listed
            };
            match parse_stored(&key, &stored.data)? {
                SpecObject::InstanceGroup(ig) => {
                    let key_name = key
                        .strip_prefix(&paths.instance_groups_prefix())
                        .and_then(|rest| rest.strip_suffix(".yaml"))
                        .unwrap_or(&key);
                    check_name_matches_key(&key, "InstanceGroup", &ig.metadata.name, key_name)?;
                    group_versions.insert(ig.metadata.name.clone(), stored.version);
                    instance_groups.push(ig);
                }
                other => {
                    return Err(corrupt(
                        &key,
                        format!("holds {}, not an InstanceGroup", other.reference()),
                    ))
                }
            }
        }
        Ok(StoredCluster {
            config: ClusterConfig {
                cluster,
                instance_groups,
            },
            cluster_version: object.version,
            group_versions,
        })
    }

    /// The completed spec as last written.
    pub async fn load_completed(&self, name: &str) -> Result<ClusterConfig, RegistryError> {
        let paths = ClusterPaths::checked(name)?;
        let Some(object) = self.store.get(&paths.completed()).await? else {
            return Err(RegistryError::ClusterNotFound {
                cluster: name.to_string(),
                store: self.store.url(),
            });
        };
        let text = String::from_utf8_lossy(&object.data);
        let objects = parse_objects(&paths.completed(), &text).map_err(RegistryError::Corrupt)?;
        let mut cluster = None;
        let mut instance_groups = Vec::new();
        for object in objects {
            match object {
                SpecObject::Cluster(c) => cluster = Some(c),
                SpecObject::InstanceGroup(ig) => instance_groups.push(ig),
            }
        }
        let cluster =
            cluster.ok_or_else(|| corrupt(&paths.completed(), "holds no Cluster".to_string()))?;
        Ok(ClusterConfig {
            cluster,
            instance_groups,
        })
    }

    /// Stores a new cluster with its secrets. Fails if it exists; writes nothing if the spec is invalid.
    pub async fn create(
        &self,
        config: &ClusterConfig,
        secrets: &ClusterSecrets,
        writer: &Writer,
    ) -> Result<ClusterConfig, RegistryError> {
        let completed = check(config)?;
        let name = config.name().to_string();
        let paths = ClusterPaths::checked(&name)?;
        let mut lock = self.lock(&name, writer).await?;
        let result = async {
            if self.store.get(&paths.cluster_spec()).await?.is_some() {
                return Err(RegistryError::ClusterExists {
                    cluster: name.clone(),
                    store: self.store.url(),
                });
            }
            // Leftovers of a create or delete that died half way: this create replaces them. etcd backups a
            // `delete cluster` kept stay: they are what a restore of the old cluster's data needs (a new cluster's
            // etcd never restores one on its own: backups of another epoch are not its own).
            // A leftover id is this store's own earlier cluster's (a delete that died before its AWS resources
            // were gone): kept, so the next `delete cluster` still finds them as this cluster's.
            self.delete_all_but(
                &paths,
                &mut lock,
                &[paths.cluster_id()],
                &[paths.etcd_backups()],
            )
            .await?;
            crate::cluster_id::ensure(&self.store, &name).await?;
            let secret_objects =
                secrets
                    .objects(&paths)
                    .map_err(|source| RegistryError::Serialize {
                        what: "secrets".into(),
                        source,
                    })?;
            for object in secret_objects {
                self.store
                    .put(&object.key, &object.data, &Precondition::MustNotExist)
                    .await?;
            }
            for ig in &config.instance_groups {
                let data = to_yaml(ig, &ig.metadata.name)?;
                self.store
                    .put(
                        &paths.instance_group(&ig.metadata.name),
                        &data,
                        &Precondition::MustNotExist,
                    )
                    .await?;
            }
            self.write_completed(&paths, &completed).await?;
            let data = to_yaml(&config.cluster, &name)?;
            self.store
                .put(&paths.cluster_spec(), &data, &Precondition::MustNotExist)
                .await?;
            Ok(completed)
        }
        .await;
        self.unlock(lock).await?;
        result
    }

    /// Applies a change to an existing cluster; returns the new completed config.
    pub async fn change(
        &self,
        name: &str,
        change: &SpecChange,
        writer: &Writer,
    ) -> Result<ClusterConfig, RegistryError> {
        // Validate first without the lock, so a spec error writes nothing at all.
        let current = self.load(name).await?;
        let changed = check(&merged(&current.config, change))?;
        check_version_change(&current.config, &changed)?;
        if change.is_empty() {
            return Ok(complete(&current.config));
        }
        let lock = self.lock(name, writer).await?;
        let result = self.change_locked(name, change).await;
        self.unlock(lock).await?;
        result
    }

    async fn change_locked(
        &self,
        name: &str,
        change: &SpecChange,
    ) -> Result<ClusterConfig, RegistryError> {
        let paths = ClusterPaths::new(name);
        // Someone may have changed other objects between our read and the lock: validate what will be.
        let current = self.load(name).await?;
        let config = merged(&current.config, change);
        let completed = check(&config)?;
        check_version_change(&current.config, &completed)?;
        if let Some((cluster, precondition)) = &change.cluster {
            let data = to_yaml(cluster, name)?;
            self.store
                .put(&paths.cluster_spec(), &data, precondition)
                .await?;
        }
        for (ig, precondition) in &change.put_groups {
            let data = to_yaml(ig, &ig.metadata.name)?;
            self.store
                .put(
                    &paths.instance_group(&ig.metadata.name),
                    &data,
                    precondition,
                )
                .await?;
        }
        for (group, version) in &change.delete_groups {
            // Under the lock, a version check then a delete cannot interleave with another writer.
            match current.group_versions.get(group) {
                Some(v) if v == version => self.store.delete(&paths.instance_group(group)).await?,
                Some(_) => {
                    return Err(RegistryError::Conflict(StoreError::Conflict {
                        key: paths.instance_group(group),
                        reason: "was changed by someone else since it was read; not deleted".into(),
                    }))
                }
                None => {}
            }
        }
        self.write_completed(&paths, &completed).await?;
        Ok(completed)
    }

    /// Removes every object of the cluster from the store but those under the `keep` key prefixes (e.g. its
    /// etcd backups). Returns how many objects were deleted.
    ///
    /// `cluster.yaml` goes first (the cluster stops existing), `completed.yaml` last: a delete that dies half way
    /// leaves the completed spec, so the next `delete cluster` still knows the cluster's region.
    pub async fn delete(
        &self,
        name: &str,
        writer: &Writer,
        keep: &[String],
    ) -> Result<usize, RegistryError> {
        let paths = ClusterPaths::checked(name)?;
        let existing = self.store.list(&paths.prefix()).await?;
        // Kept when asked (`delete cluster --unregister --force` leaves AWS resources that carry the id: a
        // later sweep with `--region` still knows them as this store's cluster's).
        let id_kept = keep
            .iter()
            .any(|p| paths.cluster_id().starts_with(p.as_str()));
        // A kept id alone is no cluster: a second unregister finds nothing to delete.
        if existing
            .iter()
            .all(|key| id_kept && *key == paths.cluster_id())
        {
            return Err(RegistryError::ClusterNotFound {
                cluster: name.to_string(),
                store: self.store.url(),
            });
        }
        let mut lock = self.lock(name, writer).await?;
        let result = async {
            // The cluster stops existing first; what follows only clears its leftovers.
            self.store.delete(&paths.cluster_spec()).await?;
            let n = self
                .delete_all_but(
                    &paths,
                    &mut lock,
                    &[paths.completed(), paths.cluster_id()],
                    keep,
                )
                .await?;
            self.store.delete(&paths.completed()).await?;
            if !id_kept {
                self.store.delete(&paths.cluster_id()).await?;
            }
            let ends = [paths.cluster_spec(), paths.completed(), paths.cluster_id()];
            Ok(n + ends
                .iter()
                .filter(|key| existing.contains(key) && !(id_kept && **key == paths.cluster_id()))
                .count())
        }
        .await;
        self.unlock(lock).await?;
        result
    }

    /// Every key of the cluster, for previews of a delete.
    pub async fn objects(&self, name: &str) -> Result<Vec<String>, RegistryError> {
        Ok(self
            .store
            .list(&ClusterPaths::checked(name)?.prefix())
            .await?)
    }

    /// Deletes the cluster's objects but its lock, the `keep` keys and those under the `keep_prefixes`, keeping
    /// the lock as it goes (a cluster with many reports and backups can take longer than the lock's TTL).
    async fn delete_all_but(
        &self,
        paths: &ClusterPaths,
        lock: &mut Lock,
        keep: &[String],
        keep_prefixes: &[String],
    ) -> Result<usize, RegistryError> {
        let mut n = 0;
        for key in self.store.list(&paths.prefix()).await? {
            let kept = key == lock.key
                || keep.contains(&key)
                || keep_prefixes.iter().any(|p| key.starts_with(p.as_str()));
            if !kept {
                self.keep_lock(lock).await?;
                self.store.delete(&key).await?;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn write_completed(
        &self,
        paths: &ClusterPaths,
        completed: &ClusterConfig,
    ) -> Result<(), RegistryError> {
        let mut objects = vec![SpecObject::Cluster(completed.cluster.clone())];
        objects.extend(
            completed
                .instance_groups
                .iter()
                .cloned()
                .map(SpecObject::InstanceGroup),
        );
        let text = to_yaml_documents(&objects).map_err(|source| RegistryError::Serialize {
            what: "the completed spec".into(),
            source,
        })?;
        // Only lock holders write it, and it is derived: last writer wins by design.
        self.store
            .put(&paths.completed(), text.as_bytes(), &Precondition::None)
            .await?;
        Ok(())
    }

    /// Runs `work` holding the cluster's lock (`update cluster --yes`: two applies at once would both change AWS),
    /// renewing it every [`LOCK_RENEWAL`] while `work` runs, then releases it. A lock another writer holds is
    /// [`RegistryError::Locked`], naming the holder, and `work` does not start. When a renewal finds the lock
    /// taken over (this process stalled past the lock's TTL), `work` is stopped where it is and the error is a
    /// conflict: the other writer now owns the cluster.
    pub async fn while_locked<T, E>(
        &self,
        cluster: &str,
        writer: &Writer,
        work: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<Result<T, E>, RegistryError> {
        let mut lock = self.lock(cluster, writer).await?;
        let outcome = {
            tokio::pin!(work);
            loop {
                tokio::select! {
                    done = &mut work => break Ok(done),
                    () = tokio::time::sleep(self.lock_renewal) => {
                        if let Err(e) = self.keep_lock(&mut lock).await {
                            break Err(e);
                        }
                    }
                }
            }
        };
        match outcome {
            Ok(done) => {
                self.unlock(lock).await?;
                Ok(done)
            }
            // Taken over: the lock is not ours to release.
            Err(e) => Err(e),
        }
    }

    /// Takes the cluster's lock, waiting up to `lock_wait` while another writer holds it.
    async fn lock(&self, cluster: &str, writer: &Writer) -> Result<Lock, RegistryError> {
        let started = tokio::time::Instant::now();
        loop {
            match self.try_lock(cluster, writer).await {
                Err(RegistryError::Locked {
                    cluster,
                    holder,
                    command,
                    since,
                    expires,
                    ..
                }) => {
                    let waited = started.elapsed();
                    if waited >= self.lock_wait {
                        return Err(RegistryError::Locked {
                            cluster,
                            holder,
                            command,
                            since,
                            expires,
                            waited_secs: waited.as_secs_f64().round() as u64,
                        });
                    }
                    tracing::info!(%cluster, %holder, "waiting for the cluster's lock");
                    tokio::time::sleep(LOCK_RETRY.min(self.lock_wait - waited)).await;
                }
                other => return other,
            }
        }
    }

    async fn try_lock(&self, cluster: &str, writer: &Writer) -> Result<Lock, RegistryError> {
        let paths = ClusterPaths::checked(cluster)?;
        let key = paths.lock();
        let now = OffsetDateTime::now_utc().unix_timestamp();
        let record = LockRecord {
            writer: writer.clone(),
            token: hex::encode(rand::random::<[u8; 16]>()),
            acquired_at: now,
            expires_at: now + LOCK_TTL_SECS,
            process: crate::lock_holder::HolderProcess::current(),
        };
        let data = serde_json::to_vec_pretty(&record).map_err(|e| RegistryError::Serialize {
            what: "the lock".into(),
            source: <yaml_serde::Error as serde::ser::Error>::custom(e),
        })?;
        let lock = |version| Lock {
            key: key.clone(),
            token: record.token.clone(),
            data: data.clone(),
            version,
            renewed: tokio::time::Instant::now(),
        };
        let held = match self
            .store
            .put(&key, &data, &Precondition::MustNotExist)
            .await
        {
            Ok(version) => return Ok(lock(version)),
            Err(StoreError::Conflict { .. }) => self.store.get(&key).await?,
            Err(e) => return Err(e.into()),
        };
        let Some(held) = held else {
            // Released between our write and read: one more try decides it.
            let version = self
                .store
                .put(&key, &data, &Precondition::MustNotExist)
                .await?;
            return Ok(lock(version));
        };
        // Whether the holder is gone is judged by the store's clock: the age of the lock object as the store
        // dated it (renewals rewrite it) against the store's now. The holder's and our own clocks may be off by
        // any amount, and the record's times (the holder's clock) are only shown to the operator.
        let age = self.age_by_store_clock(&paths, &key).await?;
        let holder: Option<LockRecord> = serde_json::from_slice(&held.data).ok();
        let holder_gone = holder
            .as_ref()
            .and_then(|h| h.process.as_ref())
            .is_some_and(|p| p.is_gone());
        if holder_gone {
            tracing::warn!(
                %cluster,
                holder = holder.as_ref().map(|h| h.writer.holder.as_str()).unwrap_or_default(),
                "taking over the lock of a process that died on this machine"
            );
        }
        match holder {
            Some(h) if !holder_gone && age.is_none_or(|age| age <= LOCK_TTL_SECS) => {
                Err(RegistryError::Locked {
                    cluster: cluster.to_string(),
                    holder: h.writer.holder,
                    command: h.writer.command,
                    since: h.acquired_at,
                    expires: h.expires_at,
                    waited_secs: 0,
                })
            }
            // Expired, its holder gone, or unreadable: take it over, conditionally, so two takers cannot both win.
            _ => {
                let version = self
                    .store
                    .put(&key, &data, &Precondition::MustMatch(held.version))
                    .await?;
                Ok(lock(version))
            }
        }
    }

    /// How long ago, by the store's clock, the store last wrote `key` (None: it is gone). The store's now is
    /// read as the date it gives a marker written for the purpose.
    async fn age_by_store_clock(
        &self,
        paths: &ClusterPaths,
        key: &str,
    ) -> Result<Option<i64>, RegistryError> {
        let Some(written) = self.store.modified_unix(key).await? else {
            return Ok(None);
        };
        let marker = paths.lock_clock_marker();
        self.store
            .put(&marker, b"{}\n", &Precondition::None)
            .await?;
        let store_now = self.store.modified_unix(&marker).await?;
        // Best effort: a leftover marker is harmless (only this function reads it, and rewrites it first).
        let _ = self.store.delete(&marker).await;
        Ok(store_now.map(|now| now.saturating_sub(written)))
    }

    /// Renews `lock` when it was last written [`LOCK_RENEWAL`] ago, so work that takes longer than the lock's
    /// TTL keeps it. Fails with a conflict when another writer took the lock over meanwhile: stop writing then.
    async fn keep_lock(&self, lock: &mut Lock) -> Result<(), RegistryError> {
        if lock.renewed.elapsed() < self.lock_renewal {
            return Ok(());
        }
        // The record says, by the holder's clock, until when it holds now (shown to operators who wait).
        let mut record: Option<LockRecord> = serde_json::from_slice(&lock.data).ok();
        if let Some(record) = record.as_mut() {
            record.expires_at = OffsetDateTime::now_utc().unix_timestamp() + LOCK_TTL_SECS;
            lock.data = serde_json::to_vec_pretty(record).unwrap_or_else(|_| lock.data.clone());
        }
        lock.version = self
            .store
            .put(
                &lock.key,
                &lock.data,
                &Precondition::MustMatch(lock.version.clone()),
            )
            .await?;
        lock.renewed = tokio::time::Instant::now();
        Ok(())
    }

    async fn unlock(&self, lock: Lock) -> Result<(), RegistryError> {
        if let Some(held) = self.store.get(&lock.key).await? {
            let record: Option<LockRecord> = serde_json::from_slice(&held.data).ok();
            // Only remove our own lock: after an expiry someone else may hold it now.
            if record.is_some_and(|r| r.token == lock.token) {
                self.store.delete(&lock.key).await?;
            }
        }
        Ok(())
    }
}

/// Validates the completed form of `config`; returns it, or every error.
pub fn check(config: &ClusterConfig) -> Result<ClusterConfig, RegistryError> {
    let completed = complete(config);
    let errors = validate(&completed);
    if errors.is_empty() {
        Ok(completed)
    } else {
        Err(RegistryError::Invalid(SpecErrors::new(
            &format!("cluster {:?}", config.name()),
            errors,
        )))
    }
}

/// [`check`] for a cluster about to be created: it also refuses a Kubernetes release past its end of life, kept
/// in the manifest only for clusters already at it (`ballast_state::validate::new_cluster_version_problem`).
pub fn check_new(config: &ClusterConfig) -> Result<ClusterConfig, RegistryError> {
    let completed = check(config)?;
    let version = completed.cluster.spec.kubernetes_version.as_deref();
    match version.and_then(ballast_state::validate::new_cluster_version_problem) {
        None => Ok(completed),
        Some(problem) => Err(version_refused(config, problem)),
    }
}

/// A refusal of `config`'s `spec.kubernetesVersion`, saying why.
fn version_refused(config: &ClusterConfig, problem: String) -> RegistryError {
    RegistryError::Invalid(SpecErrors::new(
        &format!("cluster {:?}", config.name()),
        vec![FieldError::new(
            &format!("{}/{}", ballast_state::spec::KIND_CLUSTER, config.name()),
            "spec.kubernetesVersion",
            problem,
        )],
    ))
}

/// Refuses a `kubernetesVersion` change that skips a minor or goes back (judged on the completed specs, so a
/// version left to its default counts as the default).
pub fn check_version_change(
    current: &ClusterConfig,
    changed: &ClusterConfig,
) -> Result<(), RegistryError> {
    let old = complete(current).cluster.spec.kubernetes_version;
    let new = changed.cluster.spec.kubernetes_version.clone();
    let (Some(old), Some(new)) = (old, new) else {
        return Ok(());
    };
    match ballast_state::rolling_update::version_change_problem(&old, &new) {
        None => Ok(()),
        Some(problem) => Err(version_refused(changed, problem)),
    }
}

/// `current` with `change` applied, in memory.
pub fn merged(current: &ClusterConfig, change: &SpecChange) -> ClusterConfig {
    let mut config = current.clone();
    if let Some((cluster, _)) = &change.cluster {
        config.cluster = cluster.clone();
    }
    for (ig, _) in &change.put_groups {
        match config
            .instance_groups
            .iter_mut()
            .find(|g| g.metadata.name == ig.metadata.name)
        {
            Some(existing) => *existing = ig.clone(),
            None => config.instance_groups.push(ig.clone()),
        }
    }
    config.instance_groups.retain(|g| {
        !change
            .delete_groups
            .iter()
            .any(|(name, _)| name == &g.metadata.name)
    });
    config
        .instance_groups
        .sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    config
}

fn parse_stored(key: &str, data: &[u8]) -> Result<SpecObject, RegistryError> {
    let text = String::from_utf8_lossy(data);
    let mut objects = parse_objects(key, &text).map_err(RegistryError::Corrupt)?;
    if objects.len() != 1 {
        return Err(corrupt(
            key,
            format!("holds {} objects, expected one", objects.len()),
        ));
    }
    Ok(objects.remove(0))
}

/// Refuses an object whose name is not the one its key gives: every reader finds objects by key, so an
/// `instancegroups/nodes.yaml` holding `evil` would otherwise load, and be written back, as `evil`.
fn check_name_matches_key(
    key: &str,
    kind: &str,
    held: &str,
    expected: &str,
) -> Result<(), RegistryError> {
    if held == expected {
        return Ok(());
    }
    Err(corrupt(
        key,
        format!("holds {kind}/{held}, but its key is for {kind}/{expected}"),
    ))
}

fn lock_stamp(unix: &i64) -> String {
    unix_rfc3339(*unix)
}

fn lock_waited(secs: &u64) -> String {
    ballast_state::duration::human_duration(std::time::Duration::from_secs(*secs))
}

fn corrupt(key: &str, message: String) -> RegistryError {
    RegistryError::Corrupt(SpecErrors::new(
        key,
        vec![FieldError::new(key, "", message)],
    ))
}

fn to_yaml<T: Serialize>(object: &T, what: &str) -> Result<Vec<u8>, RegistryError> {
    yaml_serde::to_string(object)
        .map(String::into_bytes)
        .map_err(|source| RegistryError::Serialize {
            what: what.to_string(),
            source,
        })
}

#[cfg(test)]
mod lock_tests {
    use super::*;
    use crate::store::StoreOptions;

    const NAME: &str = "renew.example.com";

    /// Dates the file-store object `key` `secs` seconds in the past, as a store would have if it was written then.
    fn age(root: &std::path::Path, key: &str, secs: u64) {
        let file = std::fs::File::options()
            .write(true)
            .open(root.join(key))
            .expect("the object's file");
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs))
            .expect("set mtime");
    }

    #[tokio::test]
    async fn a_holder_renews_its_lock_and_learns_when_it_was_taken_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("state");
        let store = StateStore::open(
            &format!("file://{}", root.display()),
            StoreOptions::default(),
        )
        .await
        .expect("file store");
        let mut registry = Registry::new(store);
        registry.lock_renewal = std::time::Duration::ZERO;
        let key = ClusterPaths::new(NAME).lock();
        let mut lock = registry
            .try_lock(NAME, &Writer::current("ballast test"))
            .await
            .expect("the lock");

        // Written ten minutes ago by the store's clock: another writer would take it over.
        age(&root, &key, 600);
        let paths = ClusterPaths::new(NAME);
        let stale = registry
            .age_by_store_clock(&paths, &key)
            .await
            .expect("age");
        assert!(stale.is_some_and(|a| a > LOCK_TTL_SECS), "{stale:?}");

        // Renewed, it is fresh again by the store's clock, and still ours.
        registry.keep_lock(&mut lock).await.expect("renewed");
        let fresh = registry
            .age_by_store_clock(&paths, &key)
            .await
            .expect("age");
        assert!(fresh.is_some_and(|a| a <= 1), "{fresh:?}");
        let other = registry
            .try_lock(NAME, &Writer::current("ballast other"))
            .await
            .expect_err("a renewed lock is held");
        assert!(matches!(other, RegistryError::Locked { .. }), "{other}");

        // Taken over by another writer (after an expiry): the next renewal fails instead of writing on.
        registry
            .store
            .put(&key, b"{\"token\": \"someone else\"}", &Precondition::None)
            .await
            .expect("takeover");
        let lost = registry.keep_lock(&mut lock).await.expect_err("taken over");
        assert!(matches!(lost, RegistryError::Conflict(_)), "{lost}");
    }

    #[tokio::test]
    async fn work_under_the_lock_runs_once_the_lock_is_ours_and_a_held_lock_names_its_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = StateStore::open(
            &format!("file://{}", dir.path().join("state").display()),
            StoreOptions::default(),
        )
        .await
        .expect("file store");
        let mut registry = Registry::new(store);
        // Renewed on every tick while the work runs.
        registry.lock_renewal = std::time::Duration::from_millis(1);
        let key = ClusterPaths::new(NAME).lock();
        let first = Writer {
            holder: "alice@laptop pid 1".into(),
            command: "ballast update cluster --yes".into(),
        };
        let second = Writer {
            holder: "bob@desk pid 2".into(),
            command: "ballast update cluster --yes".into(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let holder = registry.while_locked(NAME, &first, async {
            // While the first holds the lock, the second is refused, naming the first, and its work never runs.
            let mut ran = false;
            let refused = registry
                .while_locked(NAME, &second, async {
                    ran = true;
                    Ok::<(), ()>(())
                })
                .await
                .expect_err("held by the first");
            assert!(!ran, "the second's work ran under a held lock");
            let _ = tx.send(());
            Ok::<RegistryError, ()>(refused)
        });
        let refused = holder.await.expect("the first's lock").expect("its work");
        rx.await.expect("the first's work ran");
        match &refused {
            RegistryError::Locked { holder, .. } => assert_eq!(holder, "alice@laptop pid 1"),
            other => panic!("not a held lock: {other}"),
        }
        assert!(
            refused.to_string().contains("alice@laptop pid 1"),
            "{refused}"
        );
        // Released after the work: the next writer takes it at once.
        assert!(registry.store.get(&key).await.expect("get").is_none());
        registry
            .while_locked(NAME, &second, async { Ok::<(), ()>(()) })
            .await
            .expect("free again")
            .expect("work");
    }
}
