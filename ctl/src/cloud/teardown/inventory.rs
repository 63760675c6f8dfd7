//! What a teardown found: plain, serializable data (no SDK types), so the rounds logic and the preview are pure
//! and testable. Built by `discover` from the cluster's ownership tags and its deterministic names.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cloud::aws::ownership_tag;
pub use crate::cloud::kinds::deletion::{claim, Claim, Resource, ResourceKind};

/// Everything of a cluster a teardown found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Inventory {
    #[serde(default)]
    pub resources: Vec<Resource>,
}

impl Inventory {
    /// An inventory of these resources, sorted by kind (in [`ResourceKind::ALL`] order) then id.
    pub fn from_resources(mut resources: Vec<Resource>) -> Self {
        resources.sort();
        resources.dedup_by(|a, b| a.kind == b.kind && a.id == b.id);
        Inventory { resources }
    }

    pub fn is_empty(&self) -> bool {
        self.resources.is_empty()
    }

    /// The resources of one kind.
    pub fn of(&self, kind: ResourceKind) -> Vec<Resource> {
        self.resources
            .iter()
            .filter(|r| r.kind == kind)
            .cloned()
            .collect()
    }

    /// How many resources of each kind were found (kinds with none are left out).
    pub fn counts(&self) -> BTreeMap<ResourceKind, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.resources {
            *counts.entry(r.kind).or_insert(0) += 1;
        }
        counts
    }

    /// Resources the cluster owns (everything but shared tags): what `--unregister` refuses to orphan.
    pub fn owned(&self) -> Vec<&Resource> {
        self.resources
            .iter()
            .filter(|r| r.kind != ResourceKind::SharedTag)
            .collect()
    }

    /// Resources the cluster only untags.
    pub fn untagged(&self) -> Vec<&Resource> {
        self.resources
            .iter()
            .filter(|r| r.kind == ResourceKind::SharedTag)
            .collect()
    }
}

/// The preview of a teardown: what would be deleted, by kind, and what is kept (untagged). Pure.
pub fn render_preview(inventory: &Inventory, cluster: &str) -> String {
    let mut out = String::new();
    let owned = inventory.owned();
    if owned.is_empty() {
        out.push_str(&format!("No AWS resource is owned by cluster {cluster}.\n"));
    } else {
        out.push_str(&format!(
            "Would delete {} AWS resource(s) owned by cluster {cluster}:\n",
            owned.len()
        ));
        for kind in ResourceKind::ALL {
            let of_kind: Vec<&&Resource> = owned.iter().filter(|r| r.kind == kind).collect();
            if of_kind.is_empty() {
                continue;
            }
            out.push_str(&format!("  {kind} ({})\n", of_kind.len()));
            for r in of_kind {
                out.push_str(&format!("    - {}\n", describe(r)));
            }
        }
    }
    let kept = inventory.untagged();
    if !kept.is_empty() {
        out.push_str(&format!(
            "Would keep {} resource(s), removing only the tag {}:\n",
            kept.len(),
            ownership_tag(cluster)
        ));
        for r in kept {
            out.push_str(&format!("    ~ {}\n", describe_kept(r)));
        }
    }
    out
}

fn describe(r: &Resource) -> String {
    match &r.state {
        Some(state) => format!("{} [{state}]", r.label()),
        None => r.label(),
    }
}

/// A kept resource and why it is kept.
pub fn describe_kept(r: &Resource) -> String {
    if r.parts.is_empty() {
        format!("{}: shared, not the cluster's own", r.label())
    } else {
        format!(
            "{}: owned, but also tagged for cluster(s) {}: delete it by hand once they no longer use it",
            r.label(),
            r.parts.join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_ownership_tags_decide() {
        let c = "a.example.com";
        assert_eq!(
            claim(
                &tags(&[("kubernetes.io/cluster/a.example.com", "owned")]),
                c
            ),
            Claim::Owned
        );
        assert_eq!(
            claim(
                &tags(&[("kubernetes.io/cluster/a.example.com", "shared")]),
                c
            ),
            Claim::Untag { others: vec![] }
        );
        // Another cluster's resource, even named like ours or carrying our cluster tag of another kind.
        assert_eq!(
            claim(
                &tags(&[
                    ("kubernetes.io/cluster/b.example.com", "owned"),
                    ("Name", "a.example.com"),
                    ("ballast.dev/cluster", "a.example.com")
                ]),
                c
            ),
            Claim::None
        );
        assert_eq!(claim(&tags(&[]), c), Claim::None);
    }

    #[test]
    fn a_resource_two_clusters_claim_is_only_untagged() {
        let c = "a.example.com";
        assert_eq!(
            claim(
                &tags(&[
                    ("kubernetes.io/cluster/a.example.com", "owned"),
                    ("kubernetes.io/cluster/b.example.com", "shared"),
                ]),
                c
            ),
            Claim::Untag {
                others: vec!["b.example.com".into()]
            }
        );
    }

    #[test]
    fn the_preview_lists_by_kind_and_says_what_is_kept() {
        let inv = Inventory::from_resources(vec![
            Resource::new(ResourceKind::Vpc, "vpc-1", "c.example.com"),
            Resource::new(ResourceKind::Instance, "i-2", "nodes.c.example.com")
                .with_state(Some("running")),
            Resource::new(ResourceKind::Instance, "i-1", "nodes.c.example.com")
                .with_state(Some("running")),
            Resource::new(ResourceKind::SharedTag, "subnet-9", "Subnet"),
            Resource::new(ResourceKind::SharedTag, "vpc-7", "Vpc")
                .with_parts(vec!["b.example.com".into()]),
        ]);
        assert_eq!(
            render_preview(&inv, "c.example.com"),
            "Would delete 3 AWS resource(s) owned by cluster c.example.com:\n\
             \x20 Instance (2)\n\
             \x20   - Instance i-1 (nodes.c.example.com) [running]\n\
             \x20   - Instance i-2 (nodes.c.example.com) [running]\n\
             \x20 Vpc (1)\n\
             \x20   - Vpc vpc-1 (c.example.com)\n\
             Would keep 2 resource(s), removing only the tag kubernetes.io/cluster/c.example.com:\n\
             \x20   ~ Subnet subnet-9: shared, not the cluster's own\n\
             \x20   ~ Vpc vpc-7: owned, but also tagged for cluster(s) b.example.com: delete it by \
             hand once they no longer use it\n"
        );
    }

    #[test]
    fn an_inventory_round_trips_through_yaml() {
        let inv = Inventory::from_resources(vec![Resource::new(
            ResourceKind::RouteTable,
            "rtb-1",
            "public.c",
        )
        .with_parts(vec!["rtbassoc-1".into()])]);
        let text = yaml_serde::to_string(&inv).expect("serializes");
        let back: Inventory = yaml_serde::from_str(&text).expect("parses");
        assert_eq!(back, inv);
    }
}
