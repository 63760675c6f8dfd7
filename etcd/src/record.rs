//! What the supervisors agree on through the state store: `etcd/cluster.json` (the cluster's epoch and who seeds
//! it) and each member's published health (`etcd/health/<instance-id>.json`).
//!
//! They live in `ballast_state::etcd` (types) and `ballast_store::etcd` (reads and writes; the CLI reads and
//! writes them too, without an etcd client); this module re-exports them for the supervisor.

pub use ballast_state::etcd::health::{health_key, health_prefix, HealthReport, REPORT_FRESHNESS};
pub use ballast_state::etcd::record::{ClusterRecord, Origin};
pub use ballast_state::timestamp::now_stamp;
pub use ballast_store::etcd::health::{delete_health, publish_health, read_health};
pub use ballast_store::etcd::record::{read_record, write_record, RecordError, VersionedRecord};
