//! Network load balancers that forward, for a cloud of machines. Each NLB listens twice, as an internet-facing
//! NLB is reached from outside and from inside its VPC:
//! - on a loopback address of the host of its own (so the operator's `ballast` and kubectl reach it), named in the
//!   cloud's hosts file (`<state>/hosts`, which `localcloud env` hands to ballast as `BALLAST_HOSTS_FILE`);
//! - on a node in each of its subnets, as AWS gives an NLB a network interface per subnet: an address of the subnet
//!   ([`VPC_NODE_FROM_TOP`] below its last, then downwards for the next NLB of the subnet; EC2 hands instances the
//!   lowest free ones) on the VPC's bridge in the router namespace. The VPC's resolver answers the NLB's DNS name
//!   with these ([`crate::machine::resolver`]).
//!
//! Each connection goes to one of its target group's targets on the VPC's network.
//!
//! Targets are judged as an NLB's default TCP health check judges them: a target that accepts a TCP connection
//! (from the VPC's router, every [`HEALTH_EVERY`]) is healthy. Connections go to healthy targets in turn; when
//! none is healthy, to every registered one (an NLB "fails open"). Nothing of this leaves the host: the host's
//! side listens on loopback only, and the VPC's side is the cloud's router namespace.
//!
//! Not yet (docs/local-cloud.md): TLS listeners, and the health check's own settings (port, path, thresholds).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::copy_bidirectional;

use crate::machine::network::{add_service_address, Ipv4Net};
use crate::machine::resolver::Names;
use crate::state::{AccessKey, StateDir};

/// An NLB's node in a subnet: this far below the subnet's last address (the broadcast address, which AWS
/// reserves), the next NLB's one further down.
pub const VPC_NODE_FROM_TOP: u32 = 2;

/// How often the load balancers are looked at again (new ones, listeners, targets).
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How often each target is health-checked.
const HEALTH_EVERY: Duration = Duration::from_secs(5);
/// How long a health check or a forwarded connection waits for the target to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// One listener's forwarding: where it listens and where it sends.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Route {
    /// The host's address (loopback) or the NLB's node in a subnet, and the listener's port.
    listen: SocketAddr,
    /// Whether it listens in the router namespace (a node in a subnet) rather than on the host.
    in_vpc: bool,
    /// Registered targets: (address in the VPC, port).
    targets: BTreeSet<SocketAddr>,
}

/// The forwarding state shared by the listeners and the loop.
#[derive(Debug, Default)]
struct Shared {
    /// Targets of each listener (by host address).
    targets: HashMap<SocketAddr, Vec<SocketAddr>>,
    /// Health of each target as last checked.
    healthy: HashMap<SocketAddr, bool>,
    /// Round-robin position per listener.
    next: HashMap<SocketAddr, usize>,
}

/// Runs the load balancers of a cloud of machines until dropped (its task is aborted).
pub struct Balancers {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancers {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancers {
    /// Starts looking at ELBv2 with the operator's keys and forwarding through router namespace `namespace`.
    /// Host addresses are taken from `127.<octet>.0.0/16`.
    /// `names` receives each NLB's DNS name with its nodes' addresses, for the VPCs' resolvers.
    pub fn start(
        state: StateDir,
        endpoint: &str,
        region: &str,
        admin: &AccessKey,
        namespace: String,
        octet: u8,
        names: Names,
    ) -> Balancers {
        let config = crate::aws::sdk_config(endpoint, region, admin);
        let clients = Clients {
            elb: aws_sdk_elasticloadbalancingv2::Client::new(&config),
            ec2: aws_sdk_ec2::Client::new(&config),
        };
        let task = tokio::spawn(run(state, clients, namespace, octet, names));
        Balancers { task }
    }
}

/// The hosts file of a cloud.
pub fn hosts_file(state: &StateDir) -> PathBuf {
    state.root().join("hosts")
}

struct Clients {
    elb: aws_sdk_elasticloadbalancingv2::Client,
    ec2: aws_sdk_ec2::Client,
}

/// One NLB as ELBv2 describes it.
#[derive(Debug, Clone, Default)]
struct Balancer {
    vpc_id: String,
    subnets: Vec<String>,
    /// Listener port -> registered targets.
    ports: BTreeMap<u16, BTreeSet<SocketAddr>>,
}

/// Where the NLBs' nodes are in their subnets: assigned once per (NLB, subnet) for the cloud's life, and put on
/// the VPC's bridge once it exists (a VPC's bridge is made with its first machine).
#[derive(Debug, Default)]
struct VpcNodes {
    subnet_cidrs: HashMap<String, Ipv4Net>,
    assigned: BTreeMap<(String, String), Ipv4Addr>,
    per_subnet: HashMap<String, u32>,
    placed: BTreeSet<Ipv4Addr>,
}

impl VpcNodes {
    /// The placed nodes of every NLB: name -> addresses. Learns subnets' CIDRs it lacks from EC2.
    async fn place(
        &mut self,
        balancers: &BTreeMap<String, Balancer>,
        ec2: &aws_sdk_ec2::Client,
        namespace: &str,
    ) -> BTreeMap<String, Vec<Ipv4Addr>> {
        let unknown: Vec<String> = balancers
            .values()
            .flat_map(|b| b.subnets.iter())
            .filter(|s| !self.subnet_cidrs.contains_key(*s))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !unknown.is_empty() {
            match ec2
                .describe_subnets()
                .set_subnet_ids(Some(unknown))
                .send()
                .await
            {
                Ok(out) => {
                    for subnet in out.subnets() {
                        if let (Some(id), Some(cidr)) = (subnet.subnet_id(), subnet.cidr_block()) {
                            if let Ok(net) = Ipv4Net::parse(cidr, "a subnet's CIDR") {
                                self.subnet_cidrs.insert(id.to_string(), net);
                            }
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %crate::aws::error_chain(&e), "DescribeSubnets"),
            }
        }
        let mut nodes: BTreeMap<String, Vec<Ipv4Addr>> = BTreeMap::new();
        for (name, balancer) in balancers {
            for subnet in &balancer.subnets {
                let Some(cidr) = self.subnet_cidrs.get(subnet) else {
                    continue;
                };
                let key = (name.clone(), subnet.clone());
                let address = match self.assigned.get(&key) {
                    Some(address) => *address,
                    None => {
                        let k = self.per_subnet.entry(subnet.clone()).or_insert(0);
                        let Some(address) = cidr.nth_from_top(VPC_NODE_FROM_TOP + *k) else {
                            tracing::warn!(%name, %subnet, "no address left for a load balancer's node");
                            continue;
                        };
                        *k += 1;
                        self.assigned.insert(key, address);
                        address
                    }
                };
                if !self.placed.contains(&address) {
                    match add_service_address(namespace, &balancer.vpc_id, address) {
                        Ok(()) => {
                            tracing::info!(%name, %subnet, %address, "load balancer node in its subnet");
                            self.placed.insert(address);
                        }
                        // The VPC's bridge comes with its first machine: tried again on the next look.
                        Err(e) => {
                            tracing::debug!(%name, %address, error = %e, "load balancer node not placed yet");
                            continue;
                        }
                    }
                }
                nodes.entry(name.clone()).or_default().push(address);
            }
        }
        nodes
    }
}

async fn run(state: StateDir, clients: Clients, namespace: String, octet: u8, names: Names) {
    let shared = Arc::new(Mutex::new(Shared::default()));
    let mut addresses: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    let mut vpc_nodes = VpcNodes::default();
    let mut listeners: HashMap<SocketAddr, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut checked_at: Option<tokio::time::Instant> = None;
    let mut written = String::new();
    loop {
        match look(&clients.elb, &state).await {
            Ok(balancers) => {
                // Each NLB keeps its host address for the cloud's life.
                for name in balancers.keys() {
                    if !addresses.contains_key(name) {
                        let n = u16::try_from(addresses.len() + 1).unwrap_or(u16::MAX);
                        let [hi, lo] = n.to_be_bytes();
                        addresses.insert(name.clone(), Ipv4Addr::new(127, octet, hi, lo));
                    }
                }
                let nodes = vpc_nodes.place(&balancers, &clients.ec2, &namespace).await;
                let mut routes: Vec<Route> = Vec::new();
                for (name, balancer) in &balancers {
                    let host = addresses.get(name).map(|ip| (*ip, false));
                    let inside = nodes.get(name).into_iter().flatten().map(|ip| (*ip, true));
                    for (ip, in_vpc) in host.into_iter().chain(inside) {
                        for (port, targets) in &balancer.ports {
                            routes.push(Route {
                                listen: SocketAddr::new(ip.into(), *port),
                                in_vpc,
                                targets: targets.clone(),
                            });
                        }
                    }
                }
                names.set(nodes);
                let hosts = hosts_text(&balancers, &addresses);
                if hosts != written {
                    match ballast_common::durable::write(
                        &hosts_file(&state),
                        hosts.as_bytes(),
                        &ballast_common::durable::Options::mode(0o644),
                    ) {
                        Ok(()) => written = hosts,
                        Err(e) => {
                            tracing::warn!(error = %e, "writing the load balancers' hosts file")
                        }
                    }
                }
                apply(&routes, &shared, &mut listeners, &namespace).await;
            }
            Err(e) => tracing::debug!(error = %e, "looking at the load balancers"),
        }
        if checked_at.is_none_or(|at| at.elapsed() >= HEALTH_EVERY) {
            check_health(&shared, &namespace).await;
            checked_at = Some(tokio::time::Instant::now());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// hosts(5) lines for every NLB's DNS name.
fn hosts_text(
    balancers: &BTreeMap<String, Balancer>,
    addresses: &BTreeMap<String, Ipv4Addr>,
) -> String {
    let mut text =
        String::from("# The local cloud's network load balancers, as the host reaches them.\n");
    for name in balancers.keys() {
        if let Some(ip) = addresses.get(name) {
            text.push_str(&format!("{ip} {name}\n"));
        }
    }
    text
}

/// Every network load balancer's DNS name with, per listener port, its target group's registered targets (the
/// instance targets' private addresses from the runner's records).
async fn look(
    elb: &aws_sdk_elasticloadbalancingv2::Client,
    state: &StateDir,
) -> Result<BTreeMap<String, Balancer>, String> {
    fn err<E: std::error::Error + 'static>(what: &str, e: &E) -> String {
        format!("{what}: {}", crate::aws::error_chain(e))
    }
    let instances: HashMap<String, String> = state
        .read_instances()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.stopped_at.is_none() && r.shutdown.is_none())
        .map(|r| (r.instance_id, r.private_ip))
        .collect();
    let described = elb
        .describe_load_balancers()
        .send()
        .await
        .map_err(|e| err("DescribeLoadBalancers", &e))?;
    let mut out = BTreeMap::new();
    for lb in described.load_balancers() {
        let (Some(arn), Some(name)) = (lb.load_balancer_arn(), lb.dns_name()) else {
            continue;
        };
        if lb.r#type().map(|t| t.as_str()) != Some("network") {
            continue;
        }
        let listeners = elb
            .describe_listeners()
            .load_balancer_arn(arn)
            .send()
            .await
            .map_err(|e| err("DescribeListeners", &e))?;
        let mut ports = BTreeMap::new();
        for listener in listeners.listeners() {
            let Some(port) = listener.port().and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            let mut targets = BTreeSet::new();
            for action in listener.default_actions() {
                let Some(group) = action.target_group_arn() else {
                    continue;
                };
                let health = elb
                    .describe_target_health()
                    .target_group_arn(group)
                    .send()
                    .await
                    .map_err(|e| err("DescribeTargetHealth", &e))?;
                for description in health.target_health_descriptions() {
                    let Some(target) = description.target() else {
                        continue;
                    };
                    let (Some(id), Some(target_port)) = (target.id(), target.port()) else {
                        continue;
                    };
                    let address = instances
                        .get(id)
                        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
                        .or_else(|| id.parse::<Ipv4Addr>().ok());
                    if let (Some(ip), Ok(p)) = (address, u16::try_from(target_port)) {
                        targets.insert(SocketAddr::new(ip.into(), p));
                    }
                }
            }
            ports.insert(port, targets);
        }
        out.insert(
            name.to_string(),
            Balancer {
                vpc_id: lb.vpc_id().unwrap_or_default().to_string(),
                subnets: lb
                    .availability_zones()
                    .iter()
                    .filter_map(|z| z.subnet_id().map(str::to_string))
                    .collect(),
                ports,
            },
        );
    }
    Ok(out)
}

/// Listens where `routes` say and nowhere else, and hands the listeners their targets.
async fn apply(
    routes: &[Route],
    shared: &Arc<Mutex<Shared>>,
    listeners: &mut HashMap<SocketAddr, tokio::task::JoinHandle<()>>,
    namespace: &str,
) {
    let wanted: BTreeSet<SocketAddr> = routes.iter().map(|r| r.listen).collect();
    listeners.retain(|addr, task| {
        let keep = wanted.contains(addr);
        if !keep {
            task.abort();
        }
        keep
    });
    {
        let mut s = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.targets = routes
            .iter()
            .map(|r| (r.listen, r.targets.iter().copied().collect()))
            .collect();
        let all: BTreeSet<SocketAddr> = routes
            .iter()
            .flat_map(|r| r.targets.iter().copied())
            .collect();
        s.healthy.retain(|t, _| all.contains(t));
    }
    for route in routes {
        if listeners.contains_key(&route.listen) {
            continue;
        }
        let bound = if route.in_vpc {
            crate::machine::link::listen_in(namespace, route.listen)
        } else {
            tokio::net::TcpListener::bind(route.listen).await
        };
        match bound {
            Ok(listener) => {
                tracing::info!(listen = %route.listen, in_vpc = route.in_vpc, targets = route.targets.len(), "load balancer listening");
                let task = tokio::spawn(serve(
                    listener,
                    route.listen,
                    shared.clone(),
                    namespace.to_string(),
                ));
                listeners.insert(route.listen, task);
            }
            Err(e) => {
                tracing::warn!(listen = %route.listen, error = %e, "a load balancer cannot listen")
            }
        }
    }
}

/// Accepts on one listener and forwards each connection to the next target.
async fn serve(
    listener: tokio::net::TcpListener,
    listen: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    namespace: String,
) {
    loop {
        let Ok((mut inbound, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Some(target) = pick(&shared, listen) else {
            tracing::debug!(%listen, "no target registered: connection closed");
            continue;
        };
        let namespace = namespace.clone();
        tokio::spawn(async move {
            match connect_in(&namespace, target).await {
                Ok(mut outbound) => {
                    let _ = copy_bidirectional(&mut inbound, &mut outbound).await;
                }
                Err(e) => tracing::debug!(%listen, %target, error = %e, "forwarding a connection"),
            }
        });
    }
}

/// The next target of `listen`: healthy ones in turn, every registered one when none is healthy.
fn pick(shared: &Arc<Mutex<Shared>>, listen: SocketAddr) -> Option<SocketAddr> {
    let mut s = shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let registered = s.targets.get(&listen).cloned().unwrap_or_default();
    let healthy: Vec<SocketAddr> = registered
        .iter()
        .copied()
        .filter(|t| s.healthy.get(t).copied().unwrap_or(false))
        .collect();
    let choices = if healthy.is_empty() {
        registered
    } else {
        healthy
    };
    if choices.is_empty() {
        return None;
    }
    let next = s.next.entry(listen).or_insert(0);
    let chosen = choices[*next % choices.len()];
    *next = next.wrapping_add(1);
    Some(chosen)
}

/// A TCP health check of every registered target, from the VPC's router.
async fn check_health(shared: &Arc<Mutex<Shared>>, namespace: &str) {
    let targets: BTreeSet<SocketAddr> = {
        let s = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        s.targets.values().flatten().copied().collect()
    };
    let mut checks = tokio::task::JoinSet::new();
    for target in targets {
        let namespace = namespace.to_string();
        checks.spawn(async move { (target, connect_in(&namespace, target).await.is_ok()) });
    }
    while let Some(Ok((target, ok))) = checks.join_next().await {
        let mut s = shared
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let was = s.healthy.insert(target, ok);
        if was != Some(ok) {
            tracing::info!(%target, healthy = ok, "load balancer target health");
        }
    }
}

/// A TCP connection to `target` made inside network namespace `namespace`, on a thread of its own that enters it
/// and ends (never a pooled thread: it would stay in the namespace for whatever ran on it next).
pub async fn connect_in(
    namespace: &str,
    target: SocketAddr,
) -> std::io::Result<tokio::net::TcpStream> {
    let path = std::path::Path::new("/run/netns").join(namespace);
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("netns-connect".into())
        .spawn(move || {
            let connected = (|| -> std::io::Result<std::net::TcpStream> {
                let ns = std::fs::File::open(&path)?;
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                    |e| std::io::Error::other(format!("entering {}: {e}", path.display())),
                )?;
                let stream = std::net::TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)?;
                stream.set_nonblocking(true)?;
                Ok(stream)
            })();
            let _ = tx.send(connected);
        })?;
    let stream = rx
        .await
        .map_err(|_| std::io::Error::other("the namespace thread ended without an answer"))??;
    tokio::net::TcpStream::from_std(stream)
}
