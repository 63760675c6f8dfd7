//! etcd's objects in the state store, as types and pure judgements: what the supervisors on the control plane
//! (crate `ballast-etcd`) and the CLI (`ballast etcd ...`, `ballast validate cluster`) share, with no etcd
//! client and no store in sight. Reading and writing them is `ballast_store::etcd`'s.
//!
//! - [`record`]: `etcd/cluster.json`, the cluster's epoch and who seeds it;
//! - [`health`]: each member's published health (`etcd/health/<instance-id>.json`) and the judgement of them;
//! - [`backup`]: a backup's metadata, ids, keys and snapshot checksum;
//! - [`timing`]: etcd's heartbeat interval and election timeout from the spec, held to etcd's own bounds.

pub mod backup;
pub mod health;
pub mod record;

use serde::Serialize;

/// Pretty JSON and a final newline, as every etcd object in the store is written.
pub fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (string keys, no non-finite floats).
    let mut data = serde_json::to_vec_pretty(value).unwrap_or_default();
    data.push(b'\n');
    data
}
