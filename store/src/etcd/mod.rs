//! etcd's objects in the state store, read and written: what the supervisors on the control plane (crate
//! `ballast-etcd`) and the CLI (`ballast etcd ...`, `ballast validate cluster`) share, with no etcd client in
//! sight. Their types and the pure judgements are `ballast_state::etcd`'s.
//!
//! - [`record`]: `etcd/cluster.json`, the cluster's epoch and who seeds it (conditional writes);
//! - [`health`]: each member's published health and the judgement of the cluster's reports;
//! - [`backup`]: backups (`etcd/backups/<id>/`), their listing and retention, on-demand requests;
//! - [`restore`]: the restore decision (`ballast etcd restore-backup`), a new epoch naming a backup;
//! - [`stop`]: asking a control-plane node to stop its member before its instance goes
//!   (`etcd/stop-requests/<id>.json`), for the termination handler and `rolling-update`.
//!
//! Talking to etcd (taking a snapshot, membership) stays in `ballast-etcd`.

pub mod backup;
pub mod health;
pub mod record;
pub mod restore;
pub mod stop;
