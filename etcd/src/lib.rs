//! Ballast's etcd supervisor: what keeps a control plane's etcd alive while Auto Scaling replaces instances.
//!
//! On control-plane nodes, nodeup runs [`Supervisor::run`] after boot. Each round it observes (the local etcd
//! process and data dir, the control-plane instances from EC2 through [`Peers`], the members that answer, and
//! `etcd/cluster.json` in the state store), [`decide`]s one step, acts, and requeues. See `docs/etcd.md`.
//!
//! - [`decide`]: the pure decision, with every safety rule as a table test;
//! - [`record`]: `etcd/cluster.json` (the cluster's epoch and seed) and published health;
//! - [`peers`]: the control-plane instances and the members' volumes (EC2, or a stand-in for tests);
//! - [`hosts`]: peer URLs by name, resolved through a block of `/etc/hosts` kept current from EC2;
//! - [`process`] and [`client`]: the etcd child process and TLS clients;
//! - [`backup`]: snapshots in the state store, listing, and the restore decision;
//! - [`supervisor`]: the loop.

pub mod backup;
pub mod client;
pub mod decide;
pub mod hosts;
pub mod peers;
pub mod process;
pub mod record;
pub mod supervisor;
#[cfg(feature = "testing")]
pub mod testing;

pub use decide::{decide, Observation, Step};
pub use peers::{Ec2Peers, InstanceState, PeerInstance, Peers, StaticPeers};
pub use supervisor::{PeerNames, Supervisor, SupervisorConfig};
