//! Instances that are machines (`docs/local-cloud.md`, "Machines"): each its own network, mount, PID, UTS, IPC
//! and cgroup namespaces and cgroup, its root an overlay of the baked image, systemd as PID 1; run by runc, as
//! kind's and Talos's docker provisioners run their nodes (KVM boots no guest on these hosts).
//!
//! - [`spec`]: the machine's OCI runtime spec, pure.
//! - [`runtime`]: booting, entering, stopping and power-cutting machines (runc, overlay mounts).
//! - [`network`]: each local cloud's router namespace, a bridge per VPC, a namespace per machine on its subnet.
//! - [`link`]: IMDS and the AWS API on each machine's own link-local addresses.
//! - [`disks`]: EBS volumes as loop devices, shown in a machine as a Nitro instance's NVMe devices.

pub mod disks;
pub mod link;
pub mod network;
pub mod resolver;
pub mod routes;
pub mod runtime;
pub mod spec;

pub use network::{CloudNetwork, Ipv4Net, NetworkError};
pub use runtime::{Machine, MachineError, MachineRuntime, Stopped};
pub use spec::{MachineBind, MachineSpec};
