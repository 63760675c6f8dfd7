//! etcd's objects in the state store: what the supervisors on the control plane (crate `ballast-etcd`) and
//! the CLI (`ballast etcd ...`, `ballast validate cluster`) share, with no etcd client in sight.
//!
//! - [`record`]: `etcd/cluster.json`, the cluster's epoch and who seeds it (conditional writes);
//! - [`health`]: each member's published health (`etcd/health/<instance-id>.json`) and the judgement of them;
//! - [`backup`]: backups (`etcd/backups/<id>/`), their listing and retention, on-demand requests;
//! - [`restore`]: the restore decision (`ballast etcd restore-backup`), a new epoch naming a backup.
//!
//! Talking to etcd (taking a snapshot, membership) stays in `ballast-etcd`, which re-exports these modules.

pub mod backup;
pub mod health;
pub mod record;
pub mod restore;

use serde::Serialize;

/// Pretty JSON and a final newline, as every etcd object in the store is written.
fn json_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail (string keys, no non-finite floats).
    let mut data = serde_json::to_vec_pretty(value).unwrap_or_default();
    data.push(b'\n');
    data
}
