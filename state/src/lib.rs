//! The cluster's declared state, shared by `ballast` and `nodeup`, and pure: no I/O, no async (reading and
//! writing it in the state store is crate `ballast-store`'s):
//!
//! - [`spec`]: the `Cluster` and `InstanceGroup` types of `ballast.dev/v1alpha1`;
//! - [`document`]: reading and writing them as multi-document YAML, with path-named errors;
//! - [`defaults`] and [`validate`]: every default and every rule, each in one place;
//! - [`generate`]: the spec `ballast create cluster` writes from its flags;
//! - [`pki`]: the cluster's CAs and secrets; [`keyset`]: every key over its life (ids, states, rotation stages);
//!   [`key_material`]: a key's fingerprint, a CA's dates, a fresh key for a stage; [`ca_import`]: an operator's
//!   CA checked;
//! - [`limits`]: every bound on input (spec file size and nesting, counts, AWS tag rules);
//! - [`duration`] and [`timestamp`]: the one duration grammar (`15m`, `1h30m`, `7d`) and the one RFC 3339 writer;
//! - [`layout`]: where things live in the state store (paths only); [`digest`]: the sha256 things are named by;
//! - [`etcd_volume`]: the names and tags of etcd's per-member EBS volumes, shared by `update cluster` and nodeup;
//! - [`etcd`]: etcd's objects in the store as types (epochs, health reports, backups) and the judgement of
//!   them; [`node_bootstrap`]: where workers find the node bootstrap service;
//! - [`node`], [`report`], [`report_signature`], [`addon_report`]: what a node is given and what it reports;
//! - [`components`] and [`rolling_update`]: the versions a cluster runs and how a change of them rolls;
//! - [`group_aws`]: an instance group's AWS settings (mixed instances and spot, protection, lifetime, extra
//!   security groups, external load balancers, public IPs), their rules in [`group_aws_rules`];
//! - [`irsa`]: IAM roles for service accounts: the issuer, the roles' names and trust, the discovery documents;
//! - [`terminal`]: outside text made safe to print (control characters escaped), for tables and errors.

pub mod addon_report;
pub mod audit;
pub mod autoscaler;
pub mod ca_import;
pub mod components;
pub mod defaults;
pub mod digest;
pub mod document;
pub mod duration;
pub mod ebs;
pub mod error;
pub mod etcd;
pub mod etcd_timing;
pub mod etcd_volume;
pub mod generate;
pub mod group_aws;
pub mod group_aws_rules;
pub mod group_volumes;
pub mod irsa;
pub mod issuer;
pub mod key_material;
pub mod keyset;
pub mod kms;
pub mod layout;
pub mod limits;
pub mod log_tail;
pub mod node;
pub mod node_bootstrap;
pub mod pki;
pub mod redact;
pub mod report;
pub mod report_signature;
pub mod rolling_update;
pub mod spec;
pub mod ssh_key;
pub mod terminal;
pub mod termination;
pub mod timestamp;
pub mod validate;
