//! The cluster's declared state, shared by `ballast` and `nodeup`:
//!
//! - [`spec`]: the `Cluster` and `InstanceGroup` types of `ballast.dev/v1alpha1`;
//! - [`document`]: reading and writing them as multi-document YAML, with path-named errors;
//! - [`defaults`] and [`validate`]: every default and every rule, each in one place;
//! - [`generate`]: the spec `ballast create cluster` writes from its flags;
//! - [`pki`]: the cluster's CAs and secrets;
//! - [`store`], [`layout`] and [`registry`]: the state store (S3 or files), where things live in it, and
//!   safe (locked, conditional) changes to the clusters it holds.
//!
//! Everything but `store` and `registry` is pure: no I/O.

pub mod components;
pub mod defaults;
pub mod document;
pub mod error;
pub mod generate;
pub mod layout;
pub mod node;
pub mod pki;
pub mod registry;
pub mod report;
pub mod spec;
pub mod store;
pub mod validate;
