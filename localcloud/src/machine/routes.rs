//! A VPC's route tables, carried out by the cloud's router for a cloud of machines: each route whose target is an
//! instance (kubenet's route to a node's PodCIDR, written by the cloud controller manager) becomes a route of the
//! router namespace to that instance's private address. Each VPC has a routing table of its own there, looked up
//! for packets arriving on its bridge (`ip rule iif <bridge>`), so one VPC's routes never steer another's traffic;
//! what no such route matches falls through to the bridges' own subnet routes and the unreachable private ranges.
//!
//! As on AWS, an instance whose source/destination check is on is no route's target: EC2 drops traffic to it
//! for addresses not its own, so the router holds no such route (a packet for it is answered unreachable) until
//! the check is turned off (`ModifyInstanceAttribute`, which the route controller calls itself).
//!
//! Which routes are wanted is pure ([`wanted`]); [`VpcRoutes`] polls EC2 and applies the difference with `ip`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::time::Duration;

use super::network::{bridge_name, ip, Ipv4Net};
use crate::state::{AccessKey, StateDir};

/// How often the route tables are read again.
const LOOK_EVERY: Duration = Duration::from_secs(2);
/// The first routing table id the VPCs' tables take in the router namespace (and their rules' priority base).
const FIRST_TABLE: u32 = 1000;

/// One route of a VPC route table whose target is an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRoute {
    pub vpc_id: String,
    pub destination: String,
    pub instance_id: String,
}

/// The routes a router holds per VPC: (destination CIDR, the target instance's address).
pub type VpcRouteSet = BTreeMap<String, BTreeSet<(String, Ipv4Addr)>>;

/// What the router knows of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTarget {
    pub private_ip: Ipv4Addr,
    pub source_dest_check: bool,
}

/// The routes the router should hold, per VPC: (destination, the target instance's address). A route is left
/// out when its destination is not an IPv4 CIDR, its instance is not running, or its instance's
/// source/destination check is on (the second value names those, for the log).
pub fn wanted(
    routes: &[InstanceRoute],
    instances: &HashMap<String, RouteTarget>,
) -> (VpcRouteSet, Vec<String>) {
    let mut out = VpcRouteSet::new();
    let mut skipped = Vec::new();
    for route in routes {
        if Ipv4Net::parse(&route.destination, "a route's destination").is_err() {
            skipped.push(format!("{}: not an IPv4 CIDR", route.destination));
            continue;
        }
        match instances.get(&route.instance_id) {
            None => skipped.push(format!(
                "{} -> {}: the instance is not running",
                route.destination, route.instance_id
            )),
            Some(target) if target.source_dest_check => skipped.push(format!(
                "{} -> {}: its source/destination check is on",
                route.destination, route.instance_id
            )),
            Some(target) => {
                out.entry(route.vpc_id.clone())
                    .or_default()
                    .insert((route.destination.clone(), target.private_ip));
            }
        }
    }
    (out, skipped)
}

/// Carries out the VPCs' instance routes until dropped (its task is aborted).
pub struct VpcRoutes {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for VpcRoutes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl VpcRoutes {
    /// Starts reading EC2 with the operator's keys and routing in router namespace `namespace`.
    pub fn start(
        state: StateDir,
        endpoint: &str,
        region: &str,
        admin: &AccessKey,
        namespace: String,
    ) -> VpcRoutes {
        let config = crate::aws::sdk_config(endpoint, region, admin);
        let ec2 = aws_sdk_ec2::Client::new(&config);
        VpcRoutes {
            task: tokio::spawn(run(state, ec2, namespace)),
        }
    }
}

/// The router's state: each VPC's table id, whether its rule is in place, and the routes it holds.
#[derive(Debug, Default)]
struct Router {
    tables: BTreeMap<String, u32>,
    ruled: BTreeSet<String>,
    held: VpcRouteSet,
}

async fn run(state: StateDir, ec2: aws_sdk_ec2::Client, namespace: String) {
    let mut router = Router::default();
    let mut last_skipped: Vec<String> = Vec::new();
    loop {
        match read(&ec2, &state).await {
            Ok((routes, instances)) => {
                let (want, skipped) = wanted(&routes, &instances);
                if skipped != last_skipped {
                    for s in &skipped {
                        tracing::info!("VPC route not carried: {s}");
                    }
                    last_skipped = skipped;
                }
                apply(&namespace, &want, &mut router);
            }
            Err(e) => tracing::debug!(error = %e, "reading the route tables"),
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// Every route table's instance routes, and the running instances' addresses and checks.
async fn read(
    ec2: &aws_sdk_ec2::Client,
    state: &StateDir,
) -> Result<(Vec<InstanceRoute>, HashMap<String, RouteTarget>), String> {
    let tables = ec2
        .describe_route_tables()
        .send()
        .await
        .map_err(|e| format!("DescribeRouteTables: {}", crate::aws::error_chain(&e)))?;
    let mut routes = Vec::new();
    for table in tables.route_tables() {
        let vpc = table.vpc_id().unwrap_or_default();
        for route in table.routes() {
            if let (Some(destination), Some(instance)) =
                (route.destination_cidr_block(), route.instance_id())
            {
                routes.push(InstanceRoute {
                    vpc_id: vpc.to_string(),
                    destination: destination.to_string(),
                    instance_id: instance.to_string(),
                });
            }
        }
    }
    let running: HashMap<String, Ipv4Addr> = state
        .read_instances()
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.stopped_at.is_none() && r.shutdown.is_none() && r.machine.is_some())
        .filter_map(|r| Some((r.instance_id, r.private_ip.parse().ok()?)))
        .collect();
    let mut instances = HashMap::new();
    let targets: Vec<String> = routes
        .iter()
        .map(|r| r.instance_id.clone())
        .filter(|id| running.contains_key(id))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if !targets.is_empty() {
        let described = ec2
            .describe_instances()
            .set_instance_ids(Some(targets))
            .send()
            .await
            .map_err(|e| format!("DescribeInstances: {}", crate::aws::error_chain(&e)))?;
        for instance in described.reservations().iter().flat_map(|r| r.instances()) {
            let Some(id) = instance.instance_id() else {
                continue;
            };
            if let Some(address) = running.get(id) {
                instances.insert(
                    id.to_string(),
                    RouteTarget {
                        private_ip: *address,
                        source_dest_check: instance.source_dest_check().unwrap_or(true),
                    },
                );
            }
        }
    }
    Ok((routes, instances))
}

/// Makes the router hold exactly `want`: each VPC's rule once its bridge exists, routes added and removed.
fn apply(
    namespace: &str,
    want: &BTreeMap<String, BTreeSet<(String, Ipv4Addr)>>,
    router: &mut Router,
) {
    let vpcs: BTreeSet<String> = want.keys().chain(router.held.keys()).cloned().collect();
    for vpc in &vpcs {
        let next = FIRST_TABLE + u32::try_from(router.tables.len()).unwrap_or(0);
        let table = *router.tables.entry(vpc.clone()).or_insert(next);
        let bridge = bridge_name(vpc);
        if !router.ruled.contains(vpc) {
            let (id, priority) = (table.to_string(), table.to_string());
            // The VPC's bridge comes with its first machine: tried again on the next look.
            match ip(&[
                "-n", namespace, "rule", "add", "iif", &bridge, "lookup", &id, "priority",
                &priority,
            ]) {
                Ok(()) => {
                    router.ruled.insert(vpc.clone());
                }
                Err(e) => {
                    tracing::debug!(%vpc, error = %e, "the VPC's routing rule is not in place yet");
                    continue;
                }
            }
        }
        let empty = BTreeSet::new();
        let wanted = want.get(vpc).unwrap_or(&empty);
        let held = router.held.entry(vpc.clone()).or_default();
        let id = table.to_string();
        for (destination, target) in wanted.difference(&held.clone()) {
            let via = target.to_string();
            match ip(&[
                "-n",
                namespace,
                "route",
                "replace",
                destination,
                "via",
                &via,
                "dev",
                &bridge,
                "onlink",
                "table",
                &id,
            ]) {
                Ok(()) => {
                    tracing::info!(%vpc, %destination, %via, "VPC route");
                    held.retain(|(d, _)| d != destination);
                    held.insert((destination.clone(), *target));
                }
                Err(e) => {
                    tracing::warn!(%vpc, %destination, error = %e, "a VPC route cannot be set")
                }
            }
        }
        for (destination, via) in held.clone().difference(wanted) {
            if wanted.iter().any(|(d, _)| d == destination) {
                continue;
            }
            match ip(&["-n", namespace, "route", "del", destination, "table", &id]) {
                Ok(()) => {
                    tracing::info!(%vpc, %destination, %via, "VPC route removed");
                    held.remove(&(destination.clone(), *via));
                }
                Err(e) => {
                    tracing::warn!(%vpc, %destination, error = %e, "a VPC route cannot be removed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(vpc: &str, destination: &str, instance: &str) -> InstanceRoute {
        InstanceRoute {
            vpc_id: vpc.into(),
            destination: destination.into(),
            instance_id: instance.into(),
        }
    }

    #[test]
    fn only_running_instances_with_the_check_off_are_targets() {
        let instances = HashMap::from([
            (
                "i-a".to_string(),
                RouteTarget {
                    private_ip: Ipv4Addr::new(172, 20, 0, 4),
                    source_dest_check: false,
                },
            ),
            (
                "i-b".to_string(),
                RouteTarget {
                    private_ip: Ipv4Addr::new(172, 20, 0, 5),
                    source_dest_check: true,
                },
            ),
        ]);
        let (want, skipped) = wanted(
            &[
                route("vpc-1", "100.96.1.0/24", "i-a"),
                route("vpc-2", "100.96.1.0/24", "i-a"),
                route("vpc-1", "100.96.2.0/24", "i-b"),
                route("vpc-1", "100.96.3.0/24", "i-gone"),
                route("vpc-1", "2600::/64", "i-a"),
            ],
            &instances,
        );
        assert_eq!(
            want,
            BTreeMap::from([
                (
                    "vpc-1".to_string(),
                    BTreeSet::from([("100.96.1.0/24".to_string(), Ipv4Addr::new(172, 20, 0, 4))])
                ),
                (
                    "vpc-2".to_string(),
                    BTreeSet::from([("100.96.1.0/24".to_string(), Ipv4Addr::new(172, 20, 0, 4))])
                ),
            ])
        );
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(
            skipped[0].contains("source/destination check is on"),
            "{skipped:?}"
        );
        assert!(skipped[1].contains("not running"), "{skipped:?}");
        assert!(skipped[2].contains("not an IPv4 CIDR"), "{skipped:?}");
    }
}
