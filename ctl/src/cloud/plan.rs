//! A plan: the typed changes an update makes, printed in a stable order. An empty plan is a result.

use std::fmt;

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

/// One resource's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Stage order: resources print in the order they are applied.
    pub stage: u8,
    pub kind: &'static str,
    pub name: String,
    pub action: Action,
    pub fields: Vec<FieldChange>,
}

impl Change {
    pub fn new(stage: u8, kind: &'static str, name: impl Into<String>, action: Action) -> Self {
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

/// All changes of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Vec<Change>,
}

impl Plan {
    pub fn push(&mut self, change: Change) {
        self.changes.push(change);
    }

    /// True when nothing is to be created, changed, or deleted.
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Changes in the stable order they print in.
    pub fn sorted(&self) -> Vec<&Change> {
        let mut changes: Vec<&Change> = self.changes.iter().collect();
        changes.sort_by(|a, b| {
            (a.stage, a.kind, &a.name, a.action).cmp(&(b.stage, b.kind, &b.name, b.action))
        });
        changes
    }

    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }
}

/// Text shown when a value is only known once its resource exists.
pub const KNOWN_AFTER_APPLY: &str = "(known after apply)";

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return writeln!(f, "No changes: the cluster's resources match its spec.");
        }
        for change in self.sorted() {
            let suffix = match change.action {
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
            Change::new(5, "LaunchTemplate", "nodes.c", Action::Update).field(
                "instanceType",
                Some("t3.medium".into()),
                "m6i.large",
            ),
        );
        plan.push(Change::new(0, "Vpc", "c", Action::Create).field("cidr", None, "172.20.0.0/16"));
        plan.push(Change::new(6, "AutoScalingGroup", "old.c", Action::Delete));
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
