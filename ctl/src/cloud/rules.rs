//! A security group's ingress rule, as the model wants it: a leaf module, so that the model and the CNI's needs
//! (`cni`, which the model reads) both use it without using each other.

use ballast_state::spec::Role;

/// Where traffic may come from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    Cidr(String),
    /// The security group of this role.
    Group(Role),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct IngressRule {
    /// `tcp`, `udp` or `-1` (all).
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub source: Source,
}
