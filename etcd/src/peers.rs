//! Who the control plane is: the cluster's control-plane instances and their states, from EC2 (or a test's
//! stand-in). A member is removed only when this says its instance is terminated, or no longer lists it at all
//! (EC2 forgets a terminated instance about an hour after terminating it; see `decide::UNLISTED_GRACE`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use aws_sdk_ec2::error::{DisplayErrorContext, SdkError};
use aws_sdk_ec2::operation::describe_instances::DescribeInstancesError;
use aws_sdk_ec2::operation::describe_volumes::DescribeVolumesError;
use aws_sdk_ec2::types::Filter;

/// An instance's lifecycle state, as EC2 reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InstanceState {
    Pending,
    Running,
    ShuttingDown,
    Stopping,
    Stopped,
    Terminated,
    Unknown,
}

impl InstanceState {
    /// Whether the instance is gone for good: its etcd member can never come back.
    pub fn is_terminated(self) -> bool {
        matches!(
            self,
            InstanceState::Terminated | InstanceState::ShuttingDown
        )
    }

    /// EC2's name for the state.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Pending => "pending",
            InstanceState::Running => "running",
            InstanceState::ShuttingDown => "shutting-down",
            InstanceState::Stopping => "stopping",
            InstanceState::Stopped => "stopped",
            InstanceState::Terminated => "terminated",
            InstanceState::Unknown => "unknown",
        }
    }

    /// Whether the instance is, or is about to be, running.
    pub fn is_alive(self) -> bool {
        matches!(self, InstanceState::Pending | InstanceState::Running)
    }

    fn from_ec2(name: Option<&aws_sdk_ec2::types::InstanceStateName>) -> Self {
        use aws_sdk_ec2::types::InstanceStateName as N;
        match name {
            Some(N::Pending) => InstanceState::Pending,
            Some(N::Running) => InstanceState::Running,
            Some(N::ShuttingDown) => InstanceState::ShuttingDown,
            Some(N::Stopping) => InstanceState::Stopping,
            Some(N::Stopped) => InstanceState::Stopped,
            Some(N::Terminated) => InstanceState::Terminated,
            _ => InstanceState::Unknown,
        }
    }
}

/// One control-plane instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInstance {
    pub instance_id: String,
    /// Its private IPv4 address (EC2 keeps it on terminated instances for as long as it lists them; it may be
    /// empty then).
    pub private_ip: String,
    pub state: InstanceState,
}

/// One etcd member's volume: the member (its `ballast.dev/etcd-member` tag) and the instance EC2 says it is
/// attached to (attaching or attached), if any. Whoever holds the volume *is* the member's peer name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberVolume {
    pub member: String,
    pub attached_to: Option<String>,
}

/// Failures finding the control plane.
#[derive(Debug, thiserror::Error)]
pub enum PeersError {
    /// DescribeInstances failed; the message carries the SDK's whole context (its `Display` alone says little).
    #[error("listing the control-plane instances of cluster {cluster:?}: {}", DisplayErrorContext(source.as_ref()))]
    Describe {
        cluster: String,
        #[source]
        source: Box<SdkError<DescribeInstancesError>>,
    },
    /// DescribeInstances by instance id failed: what became of those instances is unknown (never "absent").
    #[error("looking up instances {instance_ids:?} by id: {}", DisplayErrorContext(source.as_ref()))]
    Lookup {
        instance_ids: Vec<String>,
        #[source]
        source: Box<SdkError<DescribeInstancesError>>,
    },
    /// DescribeVolumes of the cluster's etcd volumes failed: the peer names keep the addresses they had.
    #[error("listing the etcd volumes of cluster {cluster:?}: {}", DisplayErrorContext(source.as_ref()))]
    Volumes {
        cluster: String,
        #[source]
        source: Box<SdkError<DescribeVolumesError>>,
    },
}

/// The boxed future of [`Peers::member_volumes`].
pub type VolumesFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<MemberVolume>, PeersError>> + Send + 'a>>;

/// The boxed future of [`Peers::instances`].
pub type PeersFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<PeerInstance>, PeersError>> + Send + 'a>>;

/// The cluster's control-plane instances, terminated ones included while the cloud still lists them.
pub trait Peers: Send + Sync {
    fn instances(&self) -> PeersFuture<'_>;

    /// The instances the cloud lists with these ids, whatever their tags and state. An id the cloud does not know
    /// (any more) is simply missing from the answer; an error means the cloud could not say, never "absent".
    fn lookup<'a>(&'a self, instance_ids: &'a [String]) -> PeersFuture<'a>;

    /// The cluster's etcd member volumes and who holds each (for the peer names, `hosts`).
    fn member_volumes(&self) -> VolumesFuture<'_>;
}

/// EC2: DescribeInstances filtered by the tags `ballast.dev/cluster=<name>` and `ballast.dev/role=control-plane`.
#[derive(Debug, Clone)]
pub struct Ec2Peers {
    client: aws_sdk_ec2::Client,
    cluster: String,
}

/// The tag naming an instance's cluster.
pub const CLUSTER_TAG: &str = "ballast.dev/cluster";
/// The tag naming an instance's role.
pub const ROLE_TAG: &str = "ballast.dev/role";

impl Ec2Peers {
    pub fn new(client: aws_sdk_ec2::Client, cluster: &str) -> Self {
        Ec2Peers {
            client,
            cluster: cluster.to_string(),
        }
    }

    /// A client from the standard AWS configuration (environment, profile, IMDS role credentials).
    pub async fn from_env(cluster: &str) -> Self {
        let config = ballast_store::sdk::load(None).await;
        Self::new(aws_sdk_ec2::Client::new(&config), cluster)
    }

    /// The same, in the instance's own region (from its identity: a node's environment names none).
    pub async fn in_region(cluster: &str, region: &str) -> Self {
        let config = ballast_store::sdk::load(Some(region)).await;
        Self::new(aws_sdk_ec2::Client::new(&config), cluster)
    }

    async fn describe(&self) -> Result<Vec<PeerInstance>, PeersError> {
        let filters = vec![
            Filter::builder()
                .name(format!("tag:{CLUSTER_TAG}"))
                .values(&self.cluster)
                .build(),
            Filter::builder()
                .name(format!("tag:{ROLE_TAG}"))
                .values("control-plane")
                .build(),
        ];
        self.describe_filtered(filters)
            .await
            .map_err(|source| PeersError::Describe {
                cluster: self.cluster.clone(),
                source: Box::new(source),
            })
    }

    /// By id with the `instance-id` *filter*, not `InstanceIds`: an id EC2 does not know is then left out of the
    /// answer instead of failing the whole call (`InvalidInstanceID.NotFound`), so the ids it still knows are
    /// answered and the rest are known to be absent.
    async fn lookup_ids(&self, instance_ids: &[String]) -> Result<Vec<PeerInstance>, PeersError> {
        let mut out = Vec::new();
        // A filter takes at most 200 values.
        for chunk in instance_ids.chunks(100) {
            let filter = Filter::builder()
                .name("instance-id")
                .set_values(Some(chunk.to_vec()))
                .build();
            let found = self
                .describe_filtered(vec![filter])
                .await
                .map_err(|source| PeersError::Lookup {
                    instance_ids: instance_ids.to_vec(),
                    source: Box::new(source),
                })?;
            out.extend(found);
        }
        Ok(out)
    }

    async fn describe_filtered(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<PeerInstance>, SdkError<DescribeInstancesError>> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .describe_instances()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page?;
            for reservation in page.reservations() {
                for instance in reservation.instances() {
                    let Some(id) = instance.instance_id() else {
                        continue;
                    };
                    out.push(PeerInstance {
                        instance_id: id.to_string(),
                        private_ip: instance
                            .private_ip_address()
                            .unwrap_or_default()
                            .to_string(),
                        state: InstanceState::from_ec2(instance.state().and_then(|s| s.name())),
                    });
                }
            }
        }
        Ok(out)
    }
}

impl Ec2Peers {
    /// DescribeVolumes by the cluster's ownership tag and the member tag (the control-plane role may describe
    /// exactly these).
    async fn describe_member_volumes(&self) -> Result<Vec<MemberVolume>, PeersError> {
        use ballast_state::etcd_volume::ETCD_MEMBER_TAG;
        let filters = vec![
            Filter::builder()
                .name(format!("tag:kubernetes.io/cluster/{}", self.cluster))
                .values("owned")
                .build(),
            Filter::builder()
                .name("tag-key")
                .values(ETCD_MEMBER_TAG)
                .build(),
        ];
        let mut out = Vec::new();
        let mut pages = self
            .client
            .describe_volumes()
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|source| PeersError::Volumes {
                cluster: self.cluster.clone(),
                source: Box::new(source),
            })?;
            for v in page.volumes() {
                let Some(member) = v
                    .tags()
                    .iter()
                    .find(|t| t.key() == Some(ETCD_MEMBER_TAG))
                    .and_then(|t| t.value())
                else {
                    continue;
                };
                use aws_sdk_ec2::types::VolumeAttachmentState as A;
                let attached_to = v
                    .attachments()
                    .iter()
                    .find(|a| matches!(a.state(), Some(A::Attached | A::Attaching)))
                    .and_then(|a| a.instance_id())
                    .map(str::to_string);
                out.push(MemberVolume {
                    member: member.to_string(),
                    attached_to,
                });
            }
        }
        Ok(out)
    }
}

impl Peers for Ec2Peers {
    fn instances(&self) -> PeersFuture<'_> {
        Box::pin(self.describe())
    }

    fn member_volumes(&self) -> VolumesFuture<'_> {
        Box::pin(self.describe_member_volumes())
    }

    fn lookup<'a>(&'a self, instance_ids: &'a [String]) -> PeersFuture<'a> {
        Box::pin(self.lookup_ids(instance_ids))
    }
}

/// A stand-in for EC2 that tests (and benchmarks) change at will.
#[derive(Debug, Clone, Default)]
pub struct StaticPeers {
    inner: Arc<Mutex<Vec<PeerInstance>>>,
    volumes: Arc<Mutex<Vec<MemberVolume>>>,
    /// How many times the instances were listed (what would be DescribeInstances calls on EC2).
    listings: Arc<std::sync::atomic::AtomicUsize>,
}

impl StaticPeers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) an instance.
    pub fn set(&self, instance_id: &str, private_ip: &str, state: InstanceState) {
        let mut list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|p| p.instance_id != instance_id);
        list.push(PeerInstance {
            instance_id: instance_id.to_string(),
            private_ip: private_ip.to_string(),
            state,
        });
    }

    /// Marks an instance terminated.
    pub fn terminate(&self, instance_id: &str) {
        let mut list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        for p in list.iter_mut().filter(|p| p.instance_id == instance_id) {
            p.state = InstanceState::Terminated;
        }
    }

    /// EC2 forgets an instance (as it does about an hour after terminating it): it is no longer listed, and a
    /// lookup by its id finds nothing.
    pub fn forget(&self, instance_id: &str) {
        let mut list = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|p| p.instance_id != instance_id);
    }

    /// Attaches member `member`'s volume to `instance_id` (detached with `None`).
    pub fn attach(&self, member: &str, instance_id: Option<&str>) {
        let mut list = self.volumes.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|v| v.member != member);
        list.push(MemberVolume {
            member: member.to_string(),
            attached_to: instance_id.map(str::to_string),
        });
    }

    /// How many times the instances were listed so far, by every supervisor sharing this stand-in.
    pub fn listings(&self) -> usize {
        self.listings.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Vec<PeerInstance> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Peers for StaticPeers {
    fn instances(&self) -> PeersFuture<'_> {
        self.listings
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let list = self.snapshot();
        Box::pin(async move { Ok(list) })
    }

    /// Only what it lists: a test's stand-in has no instances outside the cluster's tags.
    fn lookup<'a>(&'a self, instance_ids: &'a [String]) -> PeersFuture<'a> {
        let mut list = self.snapshot();
        list.retain(|p| instance_ids.contains(&p.instance_id));
        Box::pin(async move { Ok(list) })
    }

    fn member_volumes(&self) -> VolumesFuture<'_> {
        let list = self
            .volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Box::pin(async move { Ok(list) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn static_lookup_finds_only_listed_ids_and_forgotten_ones_are_absent() {
        let peers = StaticPeers::new();
        peers.set("i-a", "10.0.0.1", InstanceState::Running);
        peers.set("i-b", "10.0.0.2", InstanceState::Running);
        peers.terminate("i-b");
        let asked = vec!["i-b".to_string(), "i-zzz".to_string()];
        let found = peers.lookup(&asked).await.expect("static lookup");
        assert_eq!(found.len(), 1, "an unknown id is left out, not an error");
        assert_eq!(found[0].instance_id, "i-b");
        assert_eq!(found[0].state, InstanceState::Terminated);

        peers.forget("i-b");
        assert!(peers
            .lookup(&asked)
            .await
            .expect("static lookup")
            .is_empty());
        let listed = peers.instances().await.expect("static listing");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].instance_id, "i-a");
    }
}
