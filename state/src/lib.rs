//! The cluster's declared state, shared by `ballast` and `nodeup`:
//!
//! - [`spec`]: the `Cluster` and `InstanceGroup` types of `ballast.dev/v1alpha1`;
//! - [`document`]: reading and writing them as multi-document YAML, with path-named errors;
//! - [`defaults`] and [`validate`]: every default and every rule, each in one place;
//! - [`generate`]: the spec `ballast create cluster` writes from its flags;
//! - [`pki`]: the cluster's CAs and secrets; [`keyset`]: every key over its life (ids, states, rotation stages),
//!   and [`keystore`]: keysets in the store;
//! - [`limits`]: every bound on input (spec file size and nesting, counts, AWS tag rules);
//! - [`duration`] and [`timestamp`]: the one duration grammar (`15m`, `1h30m`, `7d`) and the one RFC 3339 writer;
//! - [`store`], [`layout`] and [`registry`]: the state store (S3 or files), where things live in it, and
//!   safe (locked, conditional) changes to the clusters it holds;
//! - [`etcd_volume`]: the names and tags of etcd's per-member EBS volumes, shared by `update cluster` and nodeup;
//! - [`etcd`]: etcd's objects in the store (epochs, health reports, backups, restore decisions), shared by the
//!   supervisors of `ballast-etcd` and the CLI, which needs no etcd client.
//!
//! Everything but `store`, `registry`, `keystore` and `etcd` is pure: no I/O.

pub mod addon_report;
pub mod ca_import;
pub mod components;
pub mod defaults;
pub mod document;
pub mod duration;
pub mod error;
pub mod etcd;
pub mod etcd_volume;
pub mod generate;
pub mod keyset;
pub mod keystore;
pub mod layout;
pub mod limits;
pub mod node;
pub mod node_bootstrap;
pub mod pki;
pub mod registry;
pub mod report;
pub mod report_signature;
pub mod rolling_update;
pub mod spec;
pub mod ssh_key;
pub mod store;
pub mod timestamp;
pub mod validate;
