//! What the supervisors agree on through the state store: `etcd/cluster.json` (the cluster's epoch and who seeds
//! it) and each member's published health (`etcd/health/<instance-id>.json`).
//!
//! They live in `ballast_state::etcd` (the CLI reads and writes them too, without an etcd client); this module
//! re-exports them for the supervisor.

pub use ballast_state::etcd::health::{
    delete_health, health_key, health_prefix, publish_health, read_health, HealthReport,
    REPORT_FRESHNESS,
};
pub use ballast_state::etcd::record::{
    read_record, write_record, ClusterRecord, Origin, RecordError, VersionedRecord,
};
pub use ballast_state::timestamp::now_stamp;
