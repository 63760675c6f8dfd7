//! The state store and everything that reads or writes it; the pure types it holds are crate `ballast-state`'s.
//!
//! - [`store`]: the state store itself (S3 or a directory), conditional writes, bounded reads, and
//!   [`store::posture`], the S3 bucket's safety settings;
//! - [`registry`]: safe (locked, conditional) changes to the clusters the store holds;
//! - [`cluster_id`]: the cluster's id, written once, that its AWS resources carry;
//! - [`keystore`]: keysets and their keys' material in the store, rotation stages, SSH public keys;
//! - [`etcd`]: etcd's objects read and written (epochs, health reports, backups, restore decisions), shared by
//!   the supervisors of `ballast-etcd` and the CLI, which needs no etcd client;
//! - [`node_bootstrap`]: the node bootstrap services' addresses, read and published;
//! - [`local_file`]: files named from outside Ballast (path flags), read under a limit.

pub mod cluster_id;
pub mod etcd;
pub mod keystore;
pub mod local_file;
pub mod lock_holder;
pub mod node_bootstrap;
pub mod registry;
pub mod sdk;
pub mod store;
