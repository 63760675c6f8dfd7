//! Where workers find the bootstrap service (I/O): each control-plane node publishes its service's address in
//! the state store once the service listens (`ballast_state::node_bootstrap`), and workers read that one object.
//! EC2 (the cluster's running control-plane instances) is the fallback: when nothing is published yet for long,
//! the object cannot be read, or no published service answers.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ballast_etcd::peers::{Ec2Peers, PeerInstance, Peers, PeersError};
use ballast_state::layout::ClusterPaths;
use ballast_state::node_bootstrap::NodeBootstrapService;
use ballast_store::node_bootstrap::{publish_service, read_services};
use ballast_store::store::StateStore;

/// How long a worker relies on the published addresses alone before it also asks EC2, and how often it asks
/// EC2 after that while no service answers. Long enough that a scale-up, whose control plane is up, never
/// asks; short enough that a cluster whose control plane publishes nothing (an older nodeup) costs a worker
/// half a minute.
pub const EC2_FALLBACK_AFTER: Duration = Duration::from_secs(30);

/// How long a control-plane node waits, once its service listens, before it publishes the address. Publishing
/// costs an EC2 listing and two state-store calls; right after the service starts, a replacement's etcd
/// supervisor makes its first round (its own EC2 listing, on the path of the member's return: in one logged
/// replacement on the local cloud it took 131 ms with the publish beside it, about 100 ms without). A worker
/// looks again within seconds, and the entries of the other control-plane nodes answer it meanwhile.
pub const PUBLISH_AFTER: Duration = Duration::from_secs(1);

/// How often a control-plane node publishes again after its first publish, unless `--bootstrap-republish-every`
/// says otherwise. What it catches: the entry of a control-plane instance gone without a replacement booting (a
/// control-plane scale-down), whose address answers nothing and costs each worker that tries it first a connect
/// timeout ([`super::client::CONNECT_TIMEOUT`]). A republish costs an EC2 listing and one read of the object; it
/// writes only when the list changed.
pub const REPUBLISH_EVERY: Duration = Duration::from_secs(60);

/// The shortest republish interval the flag accepts: each republish is an EC2 listing, and a cluster's control
/// plane listing several times a second would count against the account's EC2 request throttle on AWS.
pub const REPUBLISH_EVERY_MIN: Duration = Duration::from_secs(1);

/// The longest: a gone node's entry lasts up to one interval, costing each worker that tries it a connect
/// timeout, and a failed publish waits that long for its retry.
pub const REPUBLISH_EVERY_MAX: Duration = Duration::from_secs(60 * 60);

/// Keeps this control-plane node's service published, for as long as the node runs: the first publish
/// [`PUBLISH_AFTER`] the service listens, then one every `every` (the flag's value, [`REPUBLISH_EVERY`] by default).
pub async fn keep_published(
    store: StateStore,
    cluster: String,
    region: String,
    own: NodeBootstrapService,
    every: Duration,
) {
    tokio::time::sleep(PUBLISH_AFTER).await;
    let peers = Ec2Peers::in_region(&cluster, &region).await;
    let paths = ClusterPaths::new(&cluster);
    loop {
        publish(&store, &paths, &peers, &own).await;
        tokio::time::sleep(every).await;
    }
}

/// Publishes this control-plane node's service address and drops the entries of control-plane instances EC2
/// no longer lists as alive. A failure is logged and not fatal: workers then find this node through EC2, and
/// the next republish tries again.
async fn publish(
    store: &StateStore,
    paths: &ClusterPaths,
    peers: &Ec2Peers,
    own: &NodeBootstrapService,
) {
    let live: Option<Vec<String>> = match live_control_plane(peers).await {
        Ok(instances) => Some(instances.into_iter().map(|i| i.instance_id).collect()),
        Err(e) => {
            tracing::warn!(error = %e, "listing control-plane instances: keeping every published bootstrap service");
            None
        }
    };
    match publish_service(store, paths, own, live.as_deref()).await {
        Ok(published) if published.written => tracing::info!(
            key = %paths.node_bootstrap_services(),
            address = %own.address,
            services = published.services.services.len(),
            "node bootstrap service published"
        ),
        Ok(_) => tracing::debug!("the published node bootstrap services are current"),
        Err(e) => tracing::warn!(
            error = %e,
            "publishing the node bootstrap service's address; workers will find it through EC2"
        ),
    }
}

/// Where a worker looks for the service, round after round.
pub struct ServiceFinder<'a> {
    store: &'a StateStore,
    paths: ClusterPaths,
    peers: Ec2Peers,
    /// When EC2 was last asked (the start, before it ever was).
    ec2_asked: Instant,
}

impl<'a> ServiceFinder<'a> {
    /// `aws`: the worker's configuration (its region, its instance role's credentials), shared with its request.
    pub fn new(store: &'a StateStore, cluster: &str, aws: &aws_config::SdkConfig) -> Self {
        ServiceFinder {
            store,
            paths: ClusterPaths::new(cluster),
            peers: Ec2Peers::new(aws_sdk_ec2::Client::new(aws), cluster),
            ec2_asked: Instant::now(),
        }
    }

    /// This round's addresses: the published ones, and EC2's too at most every [`EC2_FALLBACK_AFTER`] (the
    /// previous rounds found no service that answered). `last` gets what failed.
    pub async fn addresses(&mut self, last: &mut String) -> Vec<SocketAddr> {
        let mut addresses = match read_services(self.store, &self.paths).await {
            Ok(Some(services)) => services.addresses(),
            Ok(None) => {
                *last = "no control-plane node published its bootstrap service yet".into();
                Vec::new()
            }
            Err(e) => {
                *last = format!("reading the published bootstrap services: {e}");
                Vec::new()
            }
        };
        if self.ec2_asked.elapsed() >= EC2_FALLBACK_AFTER {
            self.ec2_asked = Instant::now();
            tracing::info!(
                "no published bootstrap service answered: asking EC2 for the control-plane nodes"
            );
            match live_control_plane(&self.peers).await {
                Ok(instances) => {
                    let found = instances
                        .iter()
                        .filter_map(|i| i.private_ip.parse().ok())
                        .map(|ip| SocketAddr::new(ip, super::PORT));
                    for address in found {
                        if !addresses.contains(&address) {
                            addresses.push(address);
                        }
                    }
                }
                Err(e) => *last = format!("listing control-plane nodes: {e}"),
            }
        }
        addresses
    }
}

/// The cluster's control-plane instances EC2 lists as pending or running.
async fn live_control_plane(peers: &Ec2Peers) -> Result<Vec<PeerInstance>, PeersError> {
    let mut instances = peers.instances().await?;
    instances.retain(|i| i.state.is_alive());
    Ok(instances)
}
