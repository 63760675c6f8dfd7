//! Shipping the API server's audit log off a control-plane node (docs/audit.md).
//!
//! The API server writes JSON lines to `--audit-log-path` and rotates the file itself (`--audit-log-maxsize`,
//! `--audit-log-maxbackup`: the live file is renamed to `audit-<time>.log` and a new one created). The shipper
//! follows that file by its inode across renames, cuts the complete lines into chunks bounded by size and by
//! `chunkInterval`, and puts each chunk under a key that orders them (`ballast_state::layout`'s `audit_chunk`),
//! keeping its position durably on the node so that a restart neither ships a line twice nor skips one.
//!
//! [`cursor`] (pure) decides which file to read next and from where; [`chunk`] (pure) where a chunk ends;
//! [`trust`] (pure) which files may be shipped at all (the API server's own regular files, never a link);
//! [`log_dir`] opens the log's directory beneath the node's root and its files without following a link;
//! [`shipper`] does the reading, the write-once uploads under keys bound to the node's IAM identity and the
//! durable position, and runs beside the etcd supervisor until nodeup is told to stop, when it flushes what is
//! left.

pub mod chunk;
pub mod cursor;
pub mod log_dir;
pub mod shipper;
pub mod trust;
