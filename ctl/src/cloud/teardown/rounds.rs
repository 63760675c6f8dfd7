//! The pure part of a teardown: which kinds may be deleted in a round (their dependents are gone), and which
//! resources are already on their way out (wait, do not ask again). What an AWS error code means for a delete
//! (gone already, not yet, fatal) is [`Outcome`], decided with the deletes in `kinds::deletion`. No I/O here.

use std::collections::BTreeMap;

use super::inventory::{Inventory, Resource, ResourceKind};
pub use crate::cloud::kinds::deletion::Outcome;

/// The kinds that must be gone before a kind can be deleted: the reverse of the order `update cluster` creates
/// them in. Instances go with their Auto Scaling Group; what is left of them (protected from scale-in, or
/// launched by hand with the cluster's tags) is terminated once no group can replace them.
pub fn blockers(kind: ResourceKind) -> &'static [ResourceKind] {
    use ResourceKind::*;
    match kind {
        AutoScalingGroup | LoadBalancer | ClassicLoadBalancer | NatGateway => &[],
        Instance | LaunchTemplate => &[AutoScalingGroup],
        TargetGroup => &[LoadBalancer, AutoScalingGroup],
        ElasticIp => &[NatGateway, Instance],
        InstanceProfile => &[AutoScalingGroup, Instance, LaunchTemplate],
        IamRole => &[InstanceProfile],
        Volume => &[AutoScalingGroup, Instance],
        NetworkInterface => &[
            AutoScalingGroup,
            Instance,
            LoadBalancer,
            ClassicLoadBalancer,
            NatGateway,
        ],
        // A classic load balancer's group (the cloud controller manager's `k8s-elb-...`) is in use until the
        // load balancer is gone.
        SecurityGroup => &[
            AutoScalingGroup,
            Instance,
            LaunchTemplate,
            LoadBalancer,
            ClassicLoadBalancer,
            NetworkInterface,
        ],
        RouteTable => &[NatGateway],
        InternetGateway => &[
            AutoScalingGroup,
            Instance,
            LoadBalancer,
            ClassicLoadBalancer,
            NatGateway,
            ElasticIp,
        ],
        Subnet => &[
            AutoScalingGroup,
            Instance,
            LoadBalancer,
            ClassicLoadBalancer,
            NatGateway,
            NetworkInterface,
            RouteTable,
        ],
        Vpc => &[
            AutoScalingGroup,
            Instance,
            LoadBalancer,
            ClassicLoadBalancer,
            TargetGroup,
            NatGateway,
            NetworkInterface,
            SecurityGroup,
            RouteTable,
            InternetGateway,
            Subnet,
        ],
        // The roles trusting the provider go first; the documents last, so a killed delete still finds the
        // issuer of a provider that is left.
        OidcProvider => &[IamRole],
        DiscoveryDocument => &[IamRole, OidcProvider],
        // The rules go first: a queue whose rules still send to it would only be refilled.
        EventRule => &[],
        SqsQueue => &[EventRule],
        // Shared resources lose the cluster's tag last: until then a run that was interrupted still finds them.
        SharedTag => &[
            AutoScalingGroup,
            Instance,
            LaunchTemplate,
            LoadBalancer,
            ClassicLoadBalancer,
            TargetGroup,
            NatGateway,
            ElasticIp,
            InstanceProfile,
            IamRole,
            Volume,
            NetworkInterface,
            SecurityGroup,
            RouteTable,
            InternetGateway,
            Subnet,
            Vpc,
            OidcProvider,
            DiscoveryDocument,
            EventRule,
            SqsQueue,
        ],
    }
}

/// True when the resource is already being deleted, so asking again is pointless: a teardown only waits
/// for it to disappear.
pub fn on_its_way_out(resource: &Resource) -> bool {
    let state = resource.state.as_deref().unwrap_or("");
    match resource.kind {
        ResourceKind::Instance => matches!(state, "shutting-down" | "terminated"),
        ResourceKind::NatGateway => matches!(state, "deleting" | "deleted"),
        ResourceKind::AutoScalingGroup => state.eq_ignore_ascii_case("Delete in progress"),
        _ => false,
    }
}

/// One round's work: the resources to delete now, grouped by kind in [`ResourceKind::ALL`] order, and those
/// waiting (on their dependents, or on their own deletion in progress).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub delete: Vec<(ResourceKind, Vec<Resource>)>,
    pub waiting: usize,
}

/// What can be deleted now: the resources of every kind none of whose blockers has anything left.
pub fn plan_round(inventory: &Inventory) -> Round {
    let present: BTreeMap<ResourceKind, usize> = inventory.counts();
    let mut round = Round::default();
    for kind in ResourceKind::ALL {
        let resources = inventory.of(kind);
        if resources.is_empty() {
            continue;
        }
        let blocked = blockers(kind)
            .iter()
            .any(|b| present.get(b).is_some_and(|n| *n > 0));
        let (ready, busy): (Vec<Resource>, Vec<Resource>) = resources
            .into_iter()
            .partition(|r| !blocked && !on_its_way_out(r));
        round.waiting += busy.len();
        if !ready.is_empty() {
            round.delete.push((kind, ready));
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(kind: ResourceKind, id: &str) -> Resource {
        Resource::new(kind, id, id)
    }

    fn inventory(resources: &[(ResourceKind, &str)]) -> Inventory {
        Inventory::from_resources(resources.iter().map(|(k, id)| resource(*k, id)).collect())
    }

    fn kinds_of(round: &Round) -> Vec<ResourceKind> {
        round.delete.iter().map(|(k, _)| *k).collect()
    }

    #[test]
    fn a_whole_cluster_starts_with_groups_load_balancer_and_nat_gateways() {
        use ResourceKind::*;
        let all: Vec<(ResourceKind, &str)> = ResourceKind::ALL.iter().map(|k| (*k, "x")).collect();
        let round = plan_round(&inventory(&all));
        assert_eq!(
            kinds_of(&round),
            vec![
                AutoScalingGroup,
                LoadBalancer,
                ClassicLoadBalancer,
                NatGateway,
                EventRule
            ]
        );
        assert_eq!(round.waiting, ResourceKind::ALL.len() - 5);
    }

    #[test]
    fn rounds_follow_the_dependencies_until_nothing_is_left() {
        use ResourceKind::*;
        // Simulate: every resource a round may delete is deleted; record the order of kinds.
        let mut inv = inventory(&ResourceKind::ALL.map(|k| (k, "x")));
        let mut order: Vec<Vec<ResourceKind>> = Vec::new();
        for _ in 0..20 {
            let round = plan_round(&inv);
            if round.delete.is_empty() {
                break;
            }
            let kinds = kinds_of(&round);
            inv.resources.retain(|r| !kinds.contains(&r.kind));
            order.push(kinds);
        }
        assert!(inv.is_empty(), "left: {:?}", inv.resources);
        assert_eq!(
            order,
            vec![
                vec![
                    AutoScalingGroup,
                    LoadBalancer,
                    ClassicLoadBalancer,
                    NatGateway,
                    EventRule
                ],
                vec![Instance, LaunchTemplate, TargetGroup, RouteTable, SqsQueue],
                vec![ElasticIp, InstanceProfile, Volume, NetworkInterface],
                vec![IamRole, SecurityGroup, InternetGateway, Subnet],
                vec![Vpc, OidcProvider],
                vec![DiscoveryDocument],
                vec![SharedTag],
            ]
        );
    }

    #[test]
    fn every_kind_is_blocked_only_by_kinds_that_can_go_before_it() {
        // No cycle: a kind never (transitively) blocks itself.
        for kind in ResourceKind::ALL {
            let mut seen = vec![kind];
            let mut stack: Vec<ResourceKind> = blockers(kind).to_vec();
            while let Some(b) = stack.pop() {
                assert_ne!(b, kind, "{kind:?} blocks itself");
                if !seen.contains(&b) {
                    seen.push(b);
                    stack.extend_from_slice(blockers(b));
                }
            }
        }
    }

    #[test]
    fn a_vpc_waits_for_its_subnets_and_a_subnet_for_its_instances() {
        use ResourceKind::*;
        let round = plan_round(&inventory(&[(Vpc, "vpc-1"), (Subnet, "subnet-1")]));
        assert_eq!(kinds_of(&round), vec![Subnet]);
        assert_eq!(round.waiting, 1);
        let round = plan_round(&inventory(&[(Subnet, "subnet-1"), (Instance, "i-1")]));
        assert_eq!(kinds_of(&round), vec![Instance]);
    }

    #[test]
    fn resources_being_deleted_are_waited_for_not_deleted_again() {
        use ResourceKind::*;
        let mut nat = resource(NatGateway, "nat-1");
        nat.state = Some("deleting".into());
        let mut instance = resource(Instance, "i-1");
        instance.state = Some("shutting-down".into());
        let mut running = resource(Instance, "i-2");
        running.state = Some("running".into());
        let inv = Inventory::from_resources(vec![
            nat,
            instance,
            running,
            resource(ElasticIp, "eipalloc-1"),
        ]);
        let round = plan_round(&inv);
        assert_eq!(round.delete.len(), 1);
        let (kind, ready) = &round.delete[0];
        assert_eq!(*kind, Instance);
        assert_eq!(ready.len(), 1);
        assert_eq!(ready[0].id, "i-2");
        // The NAT gateway being deleted, the shutting-down instance and the address waiting for both.
        assert_eq!(round.waiting, 3);
    }

    #[test]
    fn shared_tags_go_last() {
        use ResourceKind::*;
        let round = plan_round(&inventory(&[(SharedTag, "vpc-1"), (IamRole, "nodes.c")]));
        assert_eq!(kinds_of(&round), vec![IamRole]);
        let round = plan_round(&inventory(&[(SharedTag, "vpc-1")]));
        assert_eq!(kinds_of(&round), vec![SharedTag]);
    }

    #[test]
    fn an_empty_inventory_plans_nothing() {
        assert_eq!(plan_round(&Inventory::default()), Round::default());
    }
}
