//! What the cluster's nodes publish in the state store and the CLI reads back: nodeup's boot reports, judged
//! against the node specs (`nodes`, read through the operator's `cache`), and how many etcd members the
//! supervisors' health reports should name. A leaf below `commands` (`get instances`, `validate cluster`,
//! `etcd status`) and `roll` (a rolling update's looks), so that neither imports the other for it.

pub mod cache;
pub mod nodes;

use ballast_state::spec::ClusterConfig;

/// The number of etcd members the cluster's completed spec wants (one per control-plane group by default).
pub fn expected_members(completed: &ClusterConfig) -> usize {
    completed
        .cluster
        .spec
        .etcd
        .as_ref()
        .map_or(0, |e| e.members.len())
}
