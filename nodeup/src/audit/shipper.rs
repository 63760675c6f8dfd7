//! The audit shipper's I/O: the log's directory listed, the window read, each chunk put under its key, the
//! position written durably (`ballast_common::durable`) after each chunk, and the loop until stopped.
//!
//! Order is what makes it exact: a chunk is uploaded under the key of its sequence number *before* the position
//! moves past it. A crash in between cuts the same sequence number again from the same offset at the next start,
//! and that chunk starts with the first one ([`super::chunk`]), so the key is overwritten with a superset:
//! nothing is shipped twice, nothing skipped.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ballast_common::durable;
use ballast_state::audit::AuditShipping;
use ballast_state::layout::ClusterPaths;
use ballast_store::store::{Precondition, StateStore, StoreError, StoreOptions};

use super::chunk::{chunk_len, complete_len};
use super::cursor::{self, FileId, Listed, Listing, Lost, Next, Position};

/// Where the shipper keeps its position on the node, relative to `--root`.
pub const POSITION_FILE: &str = "var/lib/nodeup/audit-position.json";
/// How often the shipper looks at the log (at most; never less often than the chunk interval).
const POLL: Duration = Duration::from_secs(1);
/// How long the final flush may take when nodeup is stopped: systemd's stop timeout is 90 s, and etcd's
/// supervisor stops in parallel.
pub const FLUSH_DEADLINE: Duration = Duration::from_secs(30);
/// How many times one look follows a file that was renamed between the listing and the read.
const RENAME_RACES: usize = 3;

/// What the shipper is told.
#[derive(Debug, Clone)]
pub struct ShipperConfig {
    /// The live audit log (the API server's `--audit-log-path`), under the node's root.
    pub log_path: PathBuf,
    /// The position file, under the node's root.
    pub position_file: PathBuf,
    pub cluster: String,
    pub instance_id: String,
    /// The longest a complete line waits before it is shipped.
    pub interval: Duration,
    /// The most bytes a chunk holds (a single longer line goes alone).
    pub max_bytes: usize,
}

/// Failures of the shipper, each naming the file or object.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("spec.auditLog in the node spec: chunkInterval {value:?}: {reason}")]
    Interval { value: String, reason: String },
    #[error("opening the audit destination {url}: {source}")]
    Destination {
        url: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error("listing the audit log's directory {dir}: {source}")]
    List {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the audit log {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("uploading audit chunk {key}: {source}")]
    Upload {
        key: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error("the audit position {path} is not readable JSON ({source}): move it aside to ship from the oldest file present")]
    PositionParse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading the audit position {path}: {source}")]
    PositionRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    PositionWrite(#[from] durable::WriteError),
}

impl ShipperConfig {
    /// From a control-plane node spec's settings, for the node with root `root`.
    pub fn from_node_spec(
        root: &Path,
        audit_log_path: &str,
        shipping: &AuditShipping,
        cluster: &str,
        instance_id: &str,
    ) -> Result<Self, AuditError> {
        let interval =
            ballast_state::duration::parse_duration(&shipping.chunk_interval).map_err(|e| {
                AuditError::Interval {
                    value: shipping.chunk_interval.clone(),
                    reason: e.to_string(),
                }
            })?;
        Ok(ShipperConfig {
            log_path: crate::write::under_root(root, audit_log_path),
            position_file: root.join(POSITION_FILE),
            cluster: cluster.to_string(),
            instance_id: instance_id.to_string(),
            interval,
            max_bytes: usize::try_from(shipping.chunk_max_bytes).unwrap_or(usize::MAX),
        })
    }
}

/// Opens where chunks go: the node spec's destination with its key (SSE-KMS), or SSE-S3.
pub async fn open_destination(shipping: &AuditShipping) -> Result<StateStore, AuditError> {
    StateStore::open(
        &shipping.destination,
        StoreOptions {
            kms_key_id: shipping.kms_key_id.clone(),
            interceptor: None,
        },
    )
    .await
    .map_err(|source| AuditError::Destination {
        url: shipping.destination.clone(),
        source: Box::new(source),
    })
}

/// What one look did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shipped {
    pub chunks: u64,
    pub bytes: u64,
}

/// Follows the audit log and ships it.
pub struct Shipper {
    config: ShipperConfig,
    store: StateStore,
    paths: ClusterPaths,
    position: Position,
    /// Since when complete lines have been waiting to be shipped (`None`: nothing waits).
    waiting_since: Option<Instant>,
}

impl Shipper {
    /// The shipper, at the position kept on the node (or at the start when there is none).
    pub fn new(config: ShipperConfig, store: StateStore) -> Result<Self, AuditError> {
        let position = read_position(&config.position_file)?;
        Ok(Shipper {
            paths: ClusterPaths::new(&config.cluster),
            config,
            store,
            position,
            waiting_since: None,
        })
    }

    pub fn position(&self) -> Position {
        self.position
    }

    /// Ships what is due until `stop` resolves, then flushes every line written so far (within
    /// [`FLUSH_DEADLINE`]). An upload that fails is retried at the next look, under the same key.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) -> Shipped {
        let mut total = Shipped::default();
        let mut tick = tokio::time::interval(POLL.min(self.config.interval));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                _ = tick.tick() => match self.look(false).await {
                    Ok(shipped) => total = add(total, shipped),
                    Err(e) => tracing::warn!(error = %ballast_common::error_chain(&e), "audit shipping: will retry"),
                },
            }
        }
        let flushed = tokio::time::timeout(FLUSH_DEADLINE, async {
            loop {
                match self.look(true).await {
                    Ok(shipped) => return Ok(shipped),
                    Err(e) => {
                        tracing::warn!(error = %ballast_common::error_chain(&e), "audit shipping: the final flush will retry");
                        tokio::time::sleep(POLL).await;
                    }
                }
            }
        })
        .await;
        match flushed {
            Ok(Ok::<Shipped, AuditError>(shipped)) => {
                total = add(total, shipped);
                tracing::info!(
                    chunks = shipped.chunks,
                    bytes = shipped.bytes,
                    next_sequence = self.position.next_sequence,
                    "audit log flushed"
                );
            }
            Ok(Err(_)) | Err(_) => tracing::error!(
                deadline_secs = FLUSH_DEADLINE.as_secs(),
                "audit log: the final flush did not finish; what is left ships when nodeup next runs on this node"
            ),
        }
        total
    }

    /// One look: ships every chunk that is due (all complete lines when `flush`).
    pub async fn look(&mut self, flush: bool) -> Result<Shipped, AuditError> {
        let mut shipped = Shipped::default();
        let mut races = 0;
        // Once the interval has run out, everything complete is shipped in this look.
        let mut due_by_time = false;
        loop {
            let listing = self.list()?;
            match cursor::next(&self.position, &listing) {
                Next::Idle => {
                    self.waiting_since = None;
                    return Ok(shipped);
                }
                Next::Move { position, lost } => {
                    match lost {
                        Some(Lost::Truncated) => tracing::warn!(
                            path = %self.config.log_path.display(),
                            "the audit log was truncated in place: lines written since the last look are lost"
                        ),
                        Some(Lost::FileRemoved) => tracing::warn!(
                            "the audit file being shipped was removed (--audit-log-maxbackup) before it was shipped: \
                             its unshipped lines are lost"
                        ),
                        None => {}
                    }
                    self.position = position;
                    write_position(&self.config.position_file, &self.position)?;
                }
                Next::Read {
                    name,
                    id,
                    from,
                    to,
                    rotated,
                } => {
                    let path = self.dir().join(&name);
                    let Some(window) = read_window(&path, id, from, to, self.config.max_bytes)?
                    else {
                        // Renamed since the listing: look again.
                        races += 1;
                        if races > RENAME_RACES {
                            return Ok(shipped);
                        }
                        continue;
                    };
                    let waiting = complete_len(&window, rotated);
                    if waiting == 0 {
                        self.waiting_since = None;
                        return Ok(shipped);
                    }
                    let since = *self.waiting_since.get_or_insert_with(Instant::now);
                    due_by_time |= since.elapsed() >= self.config.interval;
                    let due = flush || rotated || due_by_time || waiting >= self.config.max_bytes;
                    if !due {
                        return Ok(shipped);
                    }
                    let Some(len) = chunk_len(&window, self.config.max_bytes, rotated) else {
                        return Ok(shipped);
                    };
                    self.upload(&window[..len]).await?;
                    self.position.offset = from + len as u64;
                    self.position.next_sequence += 1;
                    write_position(&self.config.position_file, &self.position)?;
                    shipped.chunks += 1;
                    shipped.bytes += len as u64;
                    // What is left waited at least as long as what was just shipped.
                }
            }
        }
    }

    async fn upload(&self, chunk: &[u8]) -> Result<(), AuditError> {
        let key = self
            .paths
            .audit_chunk(&self.config.instance_id, self.position.next_sequence);
        // No precondition: the same sequence number uploaded again (after a crash) replaces the object with
        // one that starts with it.
        self.store
            .put(&key, chunk, &Precondition::None)
            .await
            .map_err(|source| AuditError::Upload {
                key: key.clone(),
                source: Box::new(source),
            })?;
        tracing::debug!(key = %key, bytes = chunk.len(), "audit chunk shipped");
        Ok(())
    }

    fn dir(&self) -> PathBuf {
        self.config
            .log_path
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
    }

    /// The live file and its backups, by inode.
    fn list(&self) -> Result<Listing, AuditError> {
        let dir = self.dir();
        let live_name = self
            .config
            .log_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // The API server has not created its log directory yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listing::default()),
            Err(source) => return Err(AuditError::List { dir, source }),
        };
        let mut live = None;
        let mut rotated = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| AuditError::List {
                dir: dir.clone(),
                source,
            })?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_live = name == live_name;
            if !is_live && !cursor::is_backup_of(&live_name, &name) {
                continue;
            }
            // A file renamed or removed since the listing is simply not listed this time.
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let listed = Listed {
                name,
                id: FileId {
                    dev: meta.dev(),
                    ino: meta.ino(),
                },
                len: meta.len(),
            };
            if is_live {
                live = Some(listed);
            } else {
                rotated.push(listed);
            }
        }
        Ok(Listing::new(live, rotated))
    }
}

fn add(a: Shipped, b: Shipped) -> Shipped {
    Shipped {
        chunks: a.chunks + b.chunks,
        bytes: a.bytes + b.bytes,
    }
}

/// Reads `[from, to)` of the file at `path`, at most `max` bytes unless no line ends within them (then up to
/// the first newline, or `to`); `None` when the file at `path` is no longer `id` (renamed meanwhile).
fn read_window(
    path: &Path,
    id: FileId,
    from: u64,
    to: u64,
    max: usize,
) -> Result<Option<Vec<u8>>, AuditError> {
    let read_err = |source| AuditError::Read {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_err(e)),
    };
    let meta = file.metadata().map_err(read_err)?;
    if (meta.dev(), meta.ino()) != (id.dev, id.ino) {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(from)).map_err(read_err)?;
    let available = to.saturating_sub(from);
    let first = available.min(max as u64);
    let mut window = Vec::with_capacity(usize::try_from(first).unwrap_or(0));
    (&mut file)
        .take(first)
        .read_to_end(&mut window)
        .map_err(read_err)?;
    if !window.contains(&b'\n') && available > first {
        // One line longer than a chunk: read on to its end (bounded by the file, itself bounded by the API
        // server's --audit-log-maxsize).
        let mut rest = Vec::new();
        (&mut file)
            .take(available - first)
            .read_to_end(&mut rest)
            .map_err(read_err)?;
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(rest.len(), |i| i + 1);
        window.extend_from_slice(&rest[..end]);
    }
    Ok(Some(window))
}

fn read_position(path: &Path) -> Result<Position, AuditError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| AuditError::PositionParse {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Position::default()),
        Err(source) => Err(AuditError::PositionRead {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_position(path: &Path, position: &Position) -> Result<(), AuditError> {
    let json = serde_json::to_vec(position).unwrap_or_default();
    durable::write(
        path,
        &json,
        &durable::Options::mode(0o600).create_parents(0o700),
    )?;
    Ok(())
}
