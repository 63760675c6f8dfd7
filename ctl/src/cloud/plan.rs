//! A plan: the typed changes an update makes, printed in a stable order. An empty plan is a result.
//!
//! Each kind's `diff` returns its own typed changes (what its `apply` performs); each of those shows in the
//! plan as one [`Change`]: the stage it is applied in, the resource kind and name, the action and the fields.

use std::fmt;

/// The levels of the resources' dependency graph, in the order they are reconciled. The engine runs them in
/// this order ([`Stage::ALL`]); a plan prints in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// The VPC, and the tags of the shared resources the cluster uses: everything else lives in the VPC.
    Vpc,
    /// Subnets, the internet gateway, NAT gateways with their Elastic IPs, route tables.
    Network,
    /// etcd's volumes, one per member in its group's zone (they must exist before an instance needs one).
    EtcdVolumes,
    /// Security groups and their rules, IAM roles, policies and instance profiles.
    SecurityAndIam,
    /// The API's network load balancer, target group and listener.
    LoadBalancer,
    /// Node specs in the state store: they name the load balancer.
    NodeSpecs,
    /// Launch templates: they carry the node spec's hash.
    LaunchTemplates,
    /// Auto Scaling Groups: they launch from the launch templates.
    AutoScalingGroups,
    /// Owned groups the spec no longer has (deleted only with `--prune`).
    Leftovers,
}

impl Stage {
    pub const ALL: [Stage; 9] = [
        Stage::Vpc,
        Stage::Network,
        Stage::EtcdVolumes,
        Stage::SecurityAndIam,
        Stage::LoadBalancer,
        Stage::NodeSpecs,
        Stage::LaunchTemplates,
        Stage::AutoScalingGroups,
        Stage::Leftovers,
    ];

    /// What `update cluster --yes` says it is reconciling.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::Vpc => "the VPC",
            Stage::Network => "network",
            Stage::EtcdVolumes => "etcd volumes",
            Stage::SecurityAndIam => "security groups and IAM",
            Stage::LoadBalancer => "API load balancer",
            Stage::NodeSpecs => "node specs",
            Stage::LaunchTemplates => "launch templates",
            Stage::AutoScalingGroups => "auto scaling groups",
            Stage::Leftovers => "leftovers",
        }
    }
}

/// The kind of resource a change is about, as a plan names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Vpc,
    Subnet,
    InternetGateway,
    NatGateway,
    RouteTable,
    EtcdVolume,
    SecurityGroup,
    SecurityGroupRules,
    IamRole,
    IamRolePolicy,
    InstanceProfile,
    LoadBalancer,
    TargetGroup,
    Listener,
    NodeSpec,
    LaunchTemplate,
    AutoScalingGroup,
    /// A published service-account discovery document (IRSA).
    OidcDocument,
    /// The IAM OIDC provider trusting the cluster's issuer (IRSA).
    OidcProvider,
    /// The cluster's termination queue (`spec.terminationHandling`).
    SqsQueue,
    /// An EventBridge rule putting AWS's warnings into the termination queue.
    EventRule,
    /// A group's terminating lifecycle hook.
    LifecycleHook,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Vpc => "Vpc",
            Kind::Subnet => "Subnet",
            Kind::InternetGateway => "InternetGateway",
            Kind::NatGateway => "NatGateway",
            Kind::RouteTable => "RouteTable",
            Kind::EtcdVolume => "EtcdVolume",
            Kind::SecurityGroup => "SecurityGroup",
            Kind::SecurityGroupRules => "SecurityGroupRules",
            Kind::IamRole => "IamRole",
            Kind::IamRolePolicy => "IamRolePolicy",
            Kind::InstanceProfile => "InstanceProfile",
            Kind::LoadBalancer => "LoadBalancer",
            Kind::TargetGroup => "TargetGroup",
            Kind::Listener => "Listener",
            Kind::NodeSpec => "NodeSpec",
            Kind::LaunchTemplate => "LaunchTemplate",
            Kind::AutoScalingGroup => "AutoScalingGroup",
            Kind::OidcDocument => "OidcDocument",
            Kind::OidcProvider => "OidcProvider",
            Kind::SqsQueue => "SqsQueue",
            Kind::EventRule => "EventRule",
            Kind::LifecycleHook => "LifecycleHook",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Create,
    Update,
    /// Delete and create again: an immutable field changed and the resource allows it (a node spec object).
    Replace,
    /// A shared resource gets the cluster's `shared` tag; nothing else about it changes.
    TagShared,
    /// Owned, no longer wanted: deleted only with `--prune`.
    Delete,
}

impl Action {
    fn symbol(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update | Action::TagShared => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }
}

/// One field's change; `from` is `None` for a new resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    pub field: String,
    pub from: Option<String>,
    pub to: String,
}

/// One resource's change, as the plan shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Resources print in the order they are applied.
    pub stage: Stage,
    pub kind: Kind,
    pub name: String,
    pub action: Action,
    pub fields: Vec<FieldChange>,
}

impl Change {
    pub fn new(stage: Stage, kind: Kind, name: impl Into<String>, action: Action) -> Self {
        Change {
            stage,
            kind,
            name: name.into(),
            action,
            fields: Vec::new(),
        }
    }

    pub fn field(mut self, field: &str, from: Option<String>, to: impl Into<String>) -> Self {
        self.fields.push(FieldChange {
            field: field.to_string(),
            from,
            to: to.into(),
        });
        self
    }
}

/// A kind's typed change: what its `apply` performs, and the lines it shows as in a plan (usually one).
pub trait Planned {
    fn planned(&self) -> Vec<Change>;
}

/// All changes of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<Change>,
}

impl Plan {
    pub fn push(&mut self, change: Change) {
        self.changes.push(change);
    }

    /// Adds a kind's typed changes.
    pub fn record<P: Planned>(&mut self, changes: &[P]) {
        self.changes
            .extend(changes.iter().flat_map(Planned::planned));
    }

    /// True when nothing is to be created, changed, or deleted.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Changes in the stable order they print in: by stage, then kind, name and action.
    pub fn sorted(&self) -> Vec<&Change> {
        let mut changes: Vec<&Change> = self.changes.iter().collect();
        changes.sort_by(|a, b| {
            (a.stage, a.kind.as_str(), &a.name, a.action).cmp(&(
                b.stage,
                b.kind.as_str(),
                &b.name,
                b.action,
            ))
        });
        changes
    }

    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }
}

/// Text shown when a value is only known once its resource exists.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

/// A value that may only exist once its resource does.
pub fn or_known_after_apply(value: Option<&String>) -> String {
    value
        .cloned()
        .unwrap_or_else(|| KNOWN_AFTER_APPLY.to_string())
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "No changes: the cluster's resources match its spec.");
        }
        for change in self.sorted() {
            let suffix = match change.action {
                // A service-account role whose entry left the spec goes with --yes
                // (kinds::service_account_roles): nothing but that role's trust depends on it.
                Action::Delete if change.kind == Kind::IamRole => "",
                Action::Delete => "   (only with --prune)",
                Action::TagShared => "   (shared: tagged, never modified)",
                _ => "",
            };
            writeln!(
                f,
                "{:>3} {} {}{suffix}",
                change.action.symbol(),
                change.kind,
                change.name
            )?;
            for field in &change.fields {
                match &field.from {
                    Some(from) => writeln!(f, "        {}: {from} -> {}", field.field, field.to)?,
                    None => writeln!(f, "        {}: {}", field.field, field.to)?,
                }
            }
        }
        writeln!(
            f,
            "\nPlan: {} to create, {} to update, {} to replace, {} shared to tag, {} to delete.",
            self.count(Action::Create),
            self.count(Action::Update),
            self.count(Action::Replace),
            self.count(Action::TagShared),
            self.count(Action::Delete)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_print_in_a_stable_order() {
        let mut plan = Plan::default();
        plan.push(
            Change::new(
                Stage::LaunchTemplates,
                Kind::LaunchTemplate,
                "nodes.c",
                Action::Update,
            )
            .field("instanceType", Some("t3.medium".into()), "m6i.large"),
        );
        plan.push(
            Change::new(Stage::Vpc, Kind::Vpc, "c", Action::Create).field(
                "cidr",
                None,
                "172.20.0.0/16",
            ),
        );
        plan.push(Change::new(
            Stage::Leftovers,
            Kind::AutoScalingGroup,
            "old.c",
            Action::Delete,
        ));
        assert_eq!(
            plan.to_string(),
            "  + Vpc c\n        cidr: 172.20.0.0/16\n  ~ LaunchTemplate nodes.c\n        instanceType: t3.medium -> m6i.large\n\
             \x20 - AutoScalingGroup old.c   (only with --prune)\n\nPlan: 1 to create, 1 to update, 0 to replace, 0 shared to tag, 1 to delete.\n"
        );
        assert_eq!(
            Plan::default().to_string(),
            "No changes: the cluster's resources match its spec.\n"
        );
    }
}
