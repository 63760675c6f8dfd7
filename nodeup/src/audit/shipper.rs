//! The audit shipper's I/O: the log's directory opened and listed without following a link
//! ([`super::log_dir`], each file judged by [`super::trust`]), the window read, each chunk put under its key,
//! the position written durably (`ballast_common::durable`) after each chunk, and the loop until stopped.
//!
//! Order is what makes it exact: a chunk is cut, and its length kept in the position as pending, before its
//! first upload; it is put write-once (`If-None-Match: *`) under the key of its sequence number *before* the
//! position moves past it. A retry (after a lost answer, or a crash in between) puts the same bytes under the
//! same key, and a key already taken is that chunk, already stored: nothing is shipped twice, nothing skipped,
//! and nothing stored is ever overwritten.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ballast_common::durable;
use ballast_state::audit::AuditShipping;
use ballast_state::layout::ClusterPaths;
use ballast_store::store::{Precondition, StateStore, StoreError, StoreOptions};

use super::chunk::{chunk_len, complete_len};
use super::cursor::{self, FileId, Listed, Listing, Lost, Next, Position};
use super::log_dir::{LogDir, Opened};
use super::trust::{self, Refusal, Warnings};

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
    /// The node's root (`/` on a node): the log is opened beneath it, following no link.
    pub root: PathBuf,
    /// The live audit log (the API server's `--audit-log-path`), a path on the node (beneath `root`).
    pub log_path: PathBuf,
    /// Who writes the log: only its regular files owned by this user are shipped ([`trust::API_SERVER_UID`]).
    pub owner: u32,
    /// The position file, under the node's root.
    pub position_file: PathBuf,
    pub cluster: String,
    pub instance_id: String,
    /// Whose chunks these are, as the key names them: the instance role session's `aws:userid`
    /// (`<role-id>:<instance-id>`), the only audit prefix the node's IAM policy lets it write; the instance id
    /// on a file store (no IAM). [`crate::tail_publish::writer_for`] finds it.
    pub writer: String,
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
            root: root.to_path_buf(),
            log_path: PathBuf::from(audit_log_path),
            owner: trust::API_SERVER_UID,
            position_file: root.join(POSITION_FILE),
            cluster: cluster.to_string(),
            instance_id: instance_id.to_string(),
            writer: instance_id.to_string(),
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

/// What putting a chunk found.
enum Put {
    Stored,
    /// The key holds this chunk already.
    AlreadyStored,
    /// The key holds an earlier position's chunk.
    TakenByEarlierPosition,
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
    /// The files (and directories) refused, each said once per change.
    warnings: Warnings,
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
            warnings: Warnings::default(),
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
            let (dir, listing) = self.list()?;
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
                    let Some(dir) = dir.as_ref() else {
                        return Ok(shipped);
                    };
                    let window = match read_window(dir, &name, id, from, to, &self.window_rules())?
                    {
                        Window::Read(window) => window,
                        Window::Refused(refusal) => {
                            self.warn(&dir.path().join(&name), refusal);
                            return Ok(shipped);
                        }
                        Window::Moved => {
                            // Renamed since the listing: look again.
                            races += 1;
                            if races > RENAME_RACES {
                                return Ok(shipped);
                            }
                            continue;
                        }
                    };
                    let len = match self.position.pending {
                        // Cut before: the same bytes again, whatever was written since.
                        Some(pending) => match usize::try_from(pending) {
                            Ok(len) if len <= window.len() => len,
                            _ => {
                                // Shorter than the chunk cut from it: changed in place. Its number may be
                                // taken: give it up.
                                tracing::warn!(
                                    file = %dir.path().join(&name).display(),
                                    "the audit file changed under a chunk being shipped: its lines are cut again"
                                );
                                self.position.pending = None;
                                self.position.next_sequence += 1;
                                write_position(&self.config.position_file, &self.position)?;
                                continue;
                            }
                        },
                        None => {
                            let waiting = complete_len(&window, rotated);
                            if waiting == 0 {
                                self.waiting_since = None;
                                return Ok(shipped);
                            }
                            let since = *self.waiting_since.get_or_insert_with(Instant::now);
                            due_by_time |= since.elapsed() >= self.config.interval;
                            let due =
                                flush || rotated || due_by_time || waiting >= self.config.max_bytes;
                            if !due {
                                return Ok(shipped);
                            }
                            let Some(len) = chunk_len(&window, self.config.max_bytes, rotated)
                            else {
                                return Ok(shipped);
                            };
                            // Kept before the first upload: a retry puts these bytes, never another cut.
                            self.position.pending = Some(len as u64);
                            write_position(&self.config.position_file, &self.position)?;
                            len
                        }
                    };
                    match self.upload(&window[..len]).await? {
                        Put::Stored | Put::AlreadyStored => {}
                        Put::TakenByEarlierPosition => {
                            // The same chunk under the next number.
                            self.position.next_sequence += 1;
                            write_position(&self.config.position_file, &self.position)?;
                            continue;
                        }
                    }
                    self.position.offset = from + len as u64;
                    self.position.next_sequence += 1;
                    self.position.pending = None;
                    self.position.fresh = false;
                    write_position(&self.config.position_file, &self.position)?;
                    shipped.chunks += 1;
                    shipped.bytes += len as u64;
                    // What is left waited at least as long as what was just shipped.
                }
            }
        }
    }

    /// Puts the pending chunk under its key, write-once (`If-None-Match: *`). A key already taken is this chunk
    /// (an earlier attempt landed and its answer was lost, or nodeup died before it kept the position), unless
    /// the position started from nothing, when it is an earlier position's chunk.
    async fn upload(&self, chunk: &[u8]) -> Result<Put, AuditError> {
        let key = self
            .paths
            .audit_chunk(&self.config.writer, self.position.next_sequence);
        match self
            .store
            .put(&key, chunk, &Precondition::MustNotExist)
            .await
        {
            Ok(_) => {
                tracing::debug!(key = %key, bytes = chunk.len(), "audit chunk shipped");
                Ok(Put::Stored)
            }
            Err(StoreError::Conflict { .. }) if !self.position.fresh => {
                tracing::debug!(key = %key, "audit chunk already stored by an earlier attempt");
                Ok(Put::AlreadyStored)
            }
            Err(StoreError::Conflict { .. }) => {
                tracing::warn!(
                    key = %key,
                    "an audit chunk of an earlier position (moved aside or lost) is under this key: left as it \
                     is, this chunk goes under the next number"
                );
                Ok(Put::TakenByEarlierPosition)
            }
            Err(source) => Err(AuditError::Upload {
                key,
                source: Box::new(source),
            }),
        }
    }

    fn window_rules(&self) -> WindowRules {
        WindowRules {
            max: self.config.max_bytes,
            owner: self.config.owner,
        }
    }

    /// Logs a refusal the first time it is seen for `path` (and again when it changes).
    fn warn(&mut self, path: &Path, refusal: Refusal) {
        let shown = path.display().to_string();
        if let Some(refusal) = self.warnings.note(&shown, Err(refusal)) {
            tracing::warn!(
                path = %shown,
                "not shipping {shown} as the audit log: {refusal}; only a regular file the API server writes is \
                 shipped (see what made it: `ls -la` its directory)"
            );
        }
    }

    /// The live file and its backups, by inode, with the directory they are in (`None`: no directory yet, or
    /// one refused). Files that are not the API server's are left out (and said).
    fn list(&mut self) -> Result<(Option<LogDir>, Listing), AuditError> {
        let dir_path = self
            .config
            .log_path
            .parent()
            .map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
        let live_name = self
            .config
            .log_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let shown_dir = crate::write::under_root(&self.config.root, &dir_path.to_string_lossy());
        let list_err = |source| AuditError::List {
            dir: shown_dir.clone(),
            source,
        };
        let dir = match LogDir::open(&self.config.root, &dir_path).map_err(list_err)? {
            Opened::Dir(dir) => dir,
            // The API server has not created its log directory yet.
            Opened::Absent => return Ok((None, Listing::default())),
            Opened::Refused { path, refusal } => {
                self.warn(&path, refusal);
                return Ok((None, Listing::default()));
            }
        };
        let mut live = None;
        let mut rotated = Vec::new();
        let mut present = Vec::new();
        for name in dir.names().map_err(list_err)? {
            let is_live = name == live_name;
            if !is_live && !cursor::is_backup_of(&live_name, &name) {
                continue;
            }
            // A file renamed or removed since the listing is simply not listed this time.
            let Some(stat) = dir.stat(&name).map_err(list_err)? else {
                continue;
            };
            let path = dir.path().join(&name);
            present.push(path.display().to_string());
            if let Err(refusal) = trust::judge(&stat.facts, self.config.owner) {
                self.warn(&path, refusal);
                continue;
            }
            self.warnings.note(&path.display().to_string(), Ok(()));
            let listed = Listed {
                name,
                id: FileId {
                    dev: stat.dev,
                    ino: stat.ino,
                },
                len: stat.len,
            };
            if is_live {
                live = Some(listed);
            } else {
                rotated.push(listed);
            }
        }
        present.push(dir.path().display().to_string());
        self.warnings.keep_only(&present);
        Ok((Some(dir), Listing::new(live, rotated)))
    }
}

fn add(a: Shipped, b: Shipped) -> Shipped {
    Shipped {
        chunks: a.chunks + b.chunks,
        bytes: a.bytes + b.bytes,
    }
}

/// How a window is read: at most `max` bytes, of a file owned by `owner`.
struct WindowRules {
    max: usize,
    owner: u32,
}

/// What reading a window found.
enum Window {
    Read(Vec<u8>),
    /// The name is no longer the file listed (renamed or removed meanwhile).
    Moved,
    /// The name is now something that is not shipped (a link made since the listing, ...).
    Refused(Refusal),
}

/// Reads `[from, to)` of the file `name` in `dir`, at most `rules.max` bytes unless no line ends within them
/// (then up to the first newline, or `to`). The file is opened without following a link and judged by `fstat`
/// of the descriptor that is read, never by its name.
fn read_window(
    dir: &LogDir,
    name: &str,
    id: FileId,
    from: u64,
    to: u64,
    rules: &WindowRules,
) -> Result<Window, AuditError> {
    let path = dir.path().join(name);
    let read_err = |source| AuditError::Read {
        path: path.clone(),
        source,
    };
    let Some((file, stat)) = dir.open_file(name).map_err(read_err)? else {
        return Ok(Window::Moved);
    };
    if let Err(refusal) = trust::judge(&stat.facts, rules.owner) {
        return Ok(Window::Refused(refusal));
    }
    let Some(mut file) = file else {
        return Ok(Window::Moved);
    };
    if (stat.dev, stat.ino) != (id.dev, id.ino) {
        return Ok(Window::Moved);
    }
    file.seek(SeekFrom::Start(from)).map_err(read_err)?;
    let available = to.saturating_sub(from);
    let first = available.min(rules.max as u64);
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
    Ok(Window::Read(window))
}

fn read_position(path: &Path) -> Result<Position, AuditError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| AuditError::PositionParse {
            path: path.to_path_buf(),
            source,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Position::fresh()),
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{symlink, PermissionsExt};

    use super::*;

    const CLUSTER: &str = "audit.example.com";
    const INSTANCE: &str = "i-0123456789abcdef0";
    /// The instance role session's aws:userid: the chunks' keys are named by it.
    const WRITER: &str = "AROAEXAMPLEROLEID0000:i-0123456789abcdef0";
    const LINE: &[u8] = b"{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\"}\n";
    const KEY: &[u8] = b"-----BEGIN EC PRIVATE KEY-----\nsecret\n-----END EC PRIVATE KEY-----\n";

    /// A node's root in a temporary directory, its audit log's directory made, and a file store beside it.
    struct Node {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        store_dir: PathBuf,
    }

    impl Node {
        fn new() -> Self {
            let tmp = tempfile::tempdir().expect("a temporary directory");
            let root = tmp.path().join("root");
            std::fs::create_dir_all(root.join("var/log/kubernetes")).expect("the log directory");
            std::fs::create_dir_all(root.join("etc/kubernetes/pki")).expect("the pki directory");
            write(&root.join("etc/kubernetes/pki/ca.key"), KEY);
            let store_dir = tmp.path().join("store");
            Node {
                _tmp: tmp,
                root,
                store_dir,
            }
        }

        fn log_dir(&self) -> PathBuf {
            self.root.join("var/log/kubernetes")
        }

        fn ca_key(&self) -> PathBuf {
            self.root.join("etc/kubernetes/pki/ca.key")
        }

        /// One flushing look of a shipper started afresh; what is in the store under the instance's prefix,
        /// concatenated in key order.
        async fn ship(&self) -> Vec<u8> {
            let store = self.store().await;
            let config = ShipperConfig {
                root: self.root.clone(),
                log_path: PathBuf::from("/var/log/kubernetes/audit.log"),
                position_file: self.root.join(POSITION_FILE),
                cluster: CLUSTER.to_string(),
                instance_id: INSTANCE.to_string(),
                writer: WRITER.to_string(),
                interval: Duration::from_secs(5),
                max_bytes: 1 << 20,
                owner: nix::unistd::geteuid().as_raw(),
            };
            let mut shipper = Shipper::new(config, store.clone()).expect("the shipper");
            shipper.look(true).await.expect("a look");
            self.chunks().await.concat()
        }

        async fn store(&self) -> StateStore {
            let url = format!("file://{}", self.store_dir.display());
            StateStore::open(&url, StoreOptions::default())
                .await
                .expect("the file store")
        }

        /// The chunks under the writer's prefix, in key order.
        async fn chunks(&self) -> Vec<Vec<u8>> {
            let store = self.store().await;
            let paths = ClusterPaths::new(CLUSTER);
            let mut keys = store
                .list(&paths.audit_instance_prefix(WRITER))
                .await
                .expect("the chunks listed");
            keys.sort();
            let mut chunks = Vec::new();
            for key in keys {
                let object = store.get(&key).await.expect("a chunk").expect("present");
                chunks.push(object.data);
            }
            chunks
        }

        fn position(&self) -> Position {
            read_position(&self.root.join(POSITION_FILE)).expect("the position")
        }

        fn set_position(&self, position: &Position) {
            write_position(&self.root.join(POSITION_FILE), position).expect("the position written");
        }

        fn append(&self, data: &[u8]) {
            use std::io::Write;
            let log = self.log_dir().join("audit.log");
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("the log opened");
            file.write_all(data).expect("appended");
            std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600))
                .expect("its mode");
        }
    }

    fn write(path: &Path, data: &[u8]) {
        std::fs::write(path, data).expect("a file written");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("its mode");
    }

    #[tokio::test]
    async fn the_api_servers_own_log_is_shipped_under_the_writers_key() {
        let node = Node::new();
        write(&node.log_dir().join("audit.log"), LINE);
        assert_eq!(node.ship().await, LINE);
        let keys = node
            .store()
            .await
            .list(&ClusterPaths::new(CLUSTER).audit_prefix())
            .await
            .expect("listed");
        assert_eq!(
            keys,
            vec![format!(
                "{CLUSTER}/audit/{WRITER}/00000000000000000000.jsonl"
            )]
        );
    }

    /// nodeup died after a chunk landed and before it kept its position (or the answer was lost): the retry
    /// finds the key taken, by that same chunk (kept pending, cut once), and goes on; nothing twice, nothing lost.
    #[tokio::test]
    async fn a_chunk_retried_after_it_landed_converges() {
        let node = Node::new();
        node.append(LINE);
        node.ship().await;
        let after = node.position();
        assert_eq!(
            (after.next_sequence, after.pending, after.fresh),
            (1, None, false)
        );
        // Back to just before the position was kept: the chunk pending, its key already taken.
        node.set_position(&Position {
            offset: 0,
            next_sequence: 0,
            pending: Some(LINE.len() as u64),
            ..after
        });
        node.append(b"{\"second\":true}\n");
        let shipped = node.ship().await;
        assert_eq!(shipped, [LINE, b"{\"second\":true}\n"].concat());
        assert_eq!(node.chunks().await.len(), 2);
        assert_eq!(node.position().next_sequence, 2);
    }

    /// A chunk is never overwritten: a position moved aside starts from nothing, and the chunks already stored
    /// stay as they are; what is shipped again goes under the next free numbers.
    #[tokio::test]
    async fn a_stored_chunk_is_never_overwritten() {
        let node = Node::new();
        node.append(LINE);
        node.ship().await;
        let first = node.chunks().await;
        std::fs::remove_file(node.root.join(POSITION_FILE)).expect("the position moved aside");
        node.append(b"{\"second\":true}\n");
        node.ship().await;
        let chunks = node.chunks().await;
        assert_eq!(chunks[0], first[0], "the first chunk was overwritten");
        assert_eq!(
            chunks[1..].concat(),
            [LINE, b"{\"second\":true}\n"].concat()
        );
        assert!(!node.position().fresh);
    }

    #[tokio::test]
    async fn a_link_to_a_ca_key_is_never_shipped() {
        let node = Node::new();
        symlink(node.ca_key(), node.log_dir().join("audit.log")).expect("a link");
        assert_eq!(node.ship().await, b"");
        // A relative one, and a backup's name, alike.
        std::fs::remove_file(node.log_dir().join("audit.log")).expect("removed");
        symlink(
            "../../../etc/kubernetes/pki/ca.key",
            node.log_dir().join("audit-2026-12-02T16-00-00.000.log"),
        )
        .expect("a link");
        assert_eq!(node.ship().await, b"");
    }

    #[tokio::test]
    async fn a_link_out_of_the_nodes_root_is_never_shipped() {
        let node = Node::new();
        let outside = node
            .root
            .parent()
            .expect("the temporary directory")
            .join("host-secret");
        write(&outside, KEY);
        symlink(&outside, node.log_dir().join("audit.log")).expect("a link");
        assert_eq!(node.ship().await, b"");
    }

    #[tokio::test]
    async fn a_linked_log_directory_is_never_read() {
        let node = Node::new();
        // The directory replaced by a link to one holding a regular file named as the log.
        std::fs::remove_dir(node.log_dir()).expect("removed");
        write(&node.root.join("etc/kubernetes/pki/audit.log"), KEY);
        symlink(node.root.join("etc/kubernetes/pki"), node.log_dir()).expect("a link");
        assert_eq!(node.ship().await, b"");
        // A link higher up (`/var/log`) is refused as well.
        std::fs::remove_file(node.log_dir()).expect("removed");
        std::fs::rename(node.root.join("var/log"), node.root.join("var/elsewhere")).expect("moved");
        std::fs::create_dir_all(node.root.join("var/elsewhere/kubernetes")).expect("made");
        write(&node.root.join("var/elsewhere/kubernetes/audit.log"), LINE);
        symlink(node.root.join("var/elsewhere"), node.root.join("var/log")).expect("a link");
        assert_eq!(node.ship().await, b"");
    }

    #[tokio::test]
    async fn a_hard_link_a_fifo_and_a_strangers_file_are_never_shipped() {
        let node = Node::new();
        let log = node.log_dir().join("audit.log");
        std::fs::hard_link(node.ca_key(), &log).expect("a hard link");
        assert_eq!(node.ship().await, b"");
        std::fs::remove_file(&log).expect("removed");
        // A FIFO neither ships nor hangs the shipper.
        nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("a FIFO");
        assert_eq!(node.ship().await, b"");
        std::fs::remove_file(&log).expect("removed");
        // Writable by others: not only the API server's writing.
        write(&log, LINE);
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o666)).expect("its mode");
        assert_eq!(node.ship().await, b"");
        // Once it is the API server's file again, it ships.
        std::fs::set_permissions(&log, std::fs::Permissions::from_mode(0o600)).expect("its mode");
        assert_eq!(node.ship().await, LINE);
    }

    #[tokio::test]
    async fn a_file_of_another_owner_is_never_shipped() {
        if !nix::unistd::geteuid().is_root() {
            // Only root can give a file away; the rule itself is trust.rs's unit test.
            return;
        }
        let node = Node::new();
        let log = node.log_dir().join("audit.log");
        write(&log, LINE);
        nix::unistd::chown(&log, Some(nix::unistd::Uid::from_raw(1000)), None).expect("chown");
        assert_eq!(node.ship().await, b"");
    }

    /// A link made between the listing and the read is judged by `fstat` of what was opened: never followed.
    #[test]
    fn a_window_is_read_only_from_the_file_judged() {
        let node = Node::new();
        let log = node.log_dir().join("audit.log");
        write(&log, LINE);
        let Ok(Opened::Dir(dir)) = LogDir::open(&node.root, Path::new("/var/log/kubernetes"))
        else {
            panic!("the log directory opens");
        };
        let stat = dir.stat("audit.log").expect("stat").expect("present");
        let id = FileId {
            dev: stat.dev,
            ino: stat.ino,
        };
        let rules = WindowRules {
            max: 1 << 20,
            owner: nix::unistd::geteuid().as_raw(),
        };
        assert!(matches!(
            read_window(&dir, "audit.log", id, 0, LINE.len() as u64, &rules),
            Ok(Window::Read(w)) if w == LINE
        ));
        std::fs::remove_file(&log).expect("removed");
        symlink(node.ca_key(), &log).expect("a link");
        assert!(matches!(
            read_window(&dir, "audit.log", id, 0, KEY.len() as u64, &rules),
            Ok(Window::Refused(Refusal::Symlink))
        ));
    }
}
