//! The state store: where `ballast` keeps cluster specs, PKI and secrets, and where nodes fetch their specs.
//!
//! Two backends with the same semantics:
//! - `s3://bucket/prefix`: objects encrypted server-side (SSE-S3, or SSE-KMS with a key); writes conditional
//!   through `If-None-Match: *` (create) and `If-Match: <etag>` (update).
//! - `file:///path`: one file per object, mode 0600 in 0700 directories; a write takes an exclusive lock on
//!   the store, compares the object's current version (its sha256) with the expected one, and writes through
//!   the one durable writer (`ballast_common::durable`: a temporary file, fsync, rename, fsync the directory),
//!   so readers never see half an object and a crash leaves the old one or the new one.
//!
//! A conditional write that loses a race fails with [`StoreError::Conflict`] and changes nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ServerSideEncryption;
use ballast_common::durable::{self, Options};
use ballast_state::digest::sha256_hex;
use sha2::{Digest, Sha256};

use ballast_state::limits::ReadLimit;

pub mod lifecycle;
pub mod posture;

/// Environment variable naming the state store, like kops's KOPS_STATE_STORE.
pub const STATE_ENV: &str = "BALLAST_STATE";
/// Environment variable naming a KMS key for SSE-KMS on an S3 state store.
pub const STATE_KMS_KEY_ENV: &str = "BALLAST_STATE_KMS_KEY";

/// The version of a stored object: its ETag on S3, its sha256 in the file backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Version(pub String);

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object read from the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredObject {
    pub data: Vec<u8>,
    pub version: Version,
}

/// What must hold for a write to happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// Write whatever is there (only for objects no one else writes, e.g. a node's own report).
    None,
    /// The object must not exist yet.
    MustNotExist,
    /// The object must still be at this version.
    MustMatch(Version),
}

/// Failures of the state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not one the store understands.
    #[error("invalid state store URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// No state store was given.
    #[error("no state store given: pass --state s3://BUCKET/PREFIX (or file:///PATH), or set {STATE_ENV}")]
    NotConfigured,
    /// A conditional write lost: someone else changed the object first.
    #[error("{key}: {reason}")]
    Conflict { key: String, reason: String },
    /// File-backend I/O.
    #[error("state store file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file-backend write failed; the writer's error names the file and the step (the old object is intact
    /// unless only the directory's sync failed).
    #[error("state store {source}")]
    Write {
        #[from]
        source: durable::WriteError,
    },
    /// A file store's root that group or others may use: the store sets the mode of nothing it did not create,
    /// so it refuses the directory and says how to make it private (or to use another).
    #[error("{}", open_directory_message(path, *mode, *owner, *uid))]
    OpenDirectory {
        path: PathBuf,
        mode: u32,
        owner: u32,
        uid: u32,
    },
    /// A file store's root that exists and is not a directory (`file:///dev/null`).
    #[error(
        "state store path {} is {kind}, not a directory: a file store is a directory of its own; use another \
         path, e.g. file:///var/lib/ballast/state (Ballast creates it, 0700)",
        path.display()
    )]
    NotADirectory { path: PathBuf, kind: &'static str },
    /// An object larger than the most Ballast reads of its kind (`StateStore::get_bounded`): not read.
    #[error(
        "state store object {key} is larger than {limit} bytes, the most Ballast reads of {what}, and was not \
         read: Ballast and nodeup write far less; delete it (its writer writes it again) and find out who wrote it"
    )]
    TooLarge {
        key: String,
        limit: u64,
        what: &'static str,
        /// The object's version, for a writer that replaces it conditionally.
        version: Version,
    },
    /// An S3 request failed: `message` says what to do (from [`describe_sdk_error`]), `source` is the SDK's
    /// error itself, for callers and logs that want its details.
    #[error("state store {operation} of s3://{bucket}/{key} failed: {message}")]
    S3 {
        operation: &'static str,
        bucket: String,
        key: String,
        message: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The account of the credentials in use could not be read, so no request names the bucket's expected owner
    /// and none is sent.
    #[error(
        "cannot tell which AWS account is in use (sts:GetCallerIdentity: {message}): Ballast names that account \
         as the owner of s3://{bucket} on every request, so that a bucket of that name in another account is \
         never read or written"
    )]
    OwnerUnknown {
        bucket: String,
        message: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Options that apply to every write.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// SSE-KMS key id or ARN for S3 objects; SSE-S3 when `None`.
    pub kms_key_id: Option<String>,
    /// An SDK interceptor for the S3 client (`ballast` counts its calls with one: the state store's reads are
    /// part of what a command costs).
    pub interceptor: Option<aws_sdk_s3::config::SharedInterceptor>,
}

/// A state store, by URL.
#[derive(Debug, Clone)]
pub enum StateStore {
    File(FileStore),
    S3(S3Store),
}

impl StateStore {
    /// Opens the store at `url` (`s3://bucket[/prefix]` or `file:///absolute/path`).
    pub async fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidUrl {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(invalid(
                    "a file store needs an absolute path: file:///var/lib/ballast",
                ));
            }
            let store = FileStore::open(PathBuf::from(path))?;
            tracing::debug!(root = path, "file state store opened");
            return Ok(StateStore::File(store));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(invalid("the bucket name is missing: s3://BUCKET/PREFIX"));
            }
            return Ok(StateStore::S3(
                S3Store::connect(bucket, prefix.trim_matches('/'), options).await,
            ));
        }
        Err(invalid("use s3://BUCKET/PREFIX or file:///PATH"))
    }

    /// The same store, writing with SSE-KMS under `kms_key_id` (SSE-S3 when `None`); a file store is unchanged.
    /// nodeup opens the store before it has read its node spec, which names the key.
    pub fn with_kms_key(self, kms_key_id: Option<String>) -> Self {
        match self {
            StateStore::S3(s3) => StateStore::S3(S3Store { kms_key_id, ..s3 }),
            file => file,
        }
    }

    /// The URL this store was opened with (normalised).
    pub fn url(&self) -> String {
        match self {
            StateStore::File(f) => format!("file://{}", f.root.display()),
            StateStore::S3(s) if s.prefix.is_empty() => format!("s3://{}", s.bucket),
            StateStore::S3(s) => format!("s3://{}/{}", s.bucket, s.prefix),
        }
    }

    /// Reads an object; `None` when it does not exist.
    pub async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        match self {
            StateStore::File(f) => f.get(key),
            StateStore::S3(s) => s.get(key).await,
        }
    }

    /// Reads an object that may be at most `limit.bytes` long: one a node may write (a boot report, etcd's
    /// records, the bootstrap services), whose size Ballast cannot trust. `None` when it does not exist;
    /// [`StoreError::TooLarge`] (with the object's version) when it is larger, after reading no more than the
    /// limit and a byte: on S3 a larger `Content-Length` is refused before the body is read.
    pub async fn get_bounded(
        &self,
        key: &str,
        limit: ReadLimit,
    ) -> Result<Option<StoredObject>, StoreError> {
        match self {
            StateStore::File(f) => f.get_bounded(key, limit),
            StateStore::S3(s) => s.get_bounded(key, limit).await,
        }
    }

    /// Writes an object if `precondition` holds; returns its new version.
    pub async fn put(
        &self,
        key: &str,
        data: &[u8],
        precondition: &Precondition,
    ) -> Result<Version, StoreError> {
        match self {
            StateStore::File(f) => f.put(key, data, precondition),
            StateStore::S3(s) => s.put(key, data, precondition).await,
        }
    }

    /// Deletes an object; deleting a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        match self {
            StateStore::File(f) => f.delete(key),
            StateStore::S3(s) => s.delete(key).await,
        }
    }

    /// When the store last wrote an object, by the store's own clock (S3's LastModified, a file's mtime), in
    /// Unix seconds; `None` when it does not exist. Freshness judged this way is immune to skew between the
    /// writer's clock, the reader's, and the store's.
    pub async fn modified_unix(&self, key: &str) -> Result<Option<i64>, StoreError> {
        match self {
            StateStore::File(f) => f.modified_unix(key),
            StateStore::S3(s) => s.modified_unix(key).await,
        }
    }

    /// Every key starting with `prefix`, sorted.
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = match self {
            StateStore::File(f) => f.list(prefix)?,
            StateStore::S3(s) => s.list(prefix).await?,
        };
        keys.sort();
        Ok(keys)
    }

    /// Every key starting with `prefix` with its object's version, the one [`StateStore::get`] would return: on
    /// S3 one ListObjectsV2 page per 1,000 keys gives every ETag, so a reader that keeps what it read before
    /// needs to read again only the objects whose version changed.
    pub async fn list_versions(
        &self,
        prefix: &str,
    ) -> Result<BTreeMap<String, Version>, StoreError> {
        match self {
            StateStore::File(f) => f.list_versions(prefix),
            StateStore::S3(s) => s.list_versions(prefix).await,
        }
    }
}

fn conflict_reason(precondition: &Precondition) -> String {
    match precondition {
        Precondition::MustNotExist => "already exists".to_string(),
        Precondition::MustMatch(_) => {
            "was changed by someone else since it was read; nothing was written: read it again and retry".to_string()
        }
        Precondition::None => "conflicting write".to_string(),
    }
}

/// Refuses a file store's root that exists and is not a private directory ([`FileStore::open`]); a missing root
/// is fine (the first write creates it 0700). Only looks: it never changes what it finds.
fn check_root(root: &Path, uid: u32) -> Result<(), StoreError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let metadata = match std::fs::metadata(root) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StoreError::Io {
                path: root.to_path_buf(),
                source,
            })
        }
    };
    let file_type = metadata.file_type();
    if !file_type.is_dir() {
        let kind = if file_type.is_file() {
            "a regular file"
        } else if file_type.is_char_device() {
            "a character device"
        } else if file_type.is_block_device() {
            "a block device"
        } else if file_type.is_fifo() {
            "a named pipe"
        } else if file_type.is_socket() {
            "a socket"
        } else {
            "not a file or directory"
        };
        return Err(StoreError::NotADirectory {
            path: root.to_path_buf(),
            kind,
        });
    }
    let mode = metadata.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(StoreError::OpenDirectory {
            path: root.to_path_buf(),
            mode,
            owner: metadata.uid(),
            uid,
        });
    }
    Ok(())
}

/// What is wrong with an open store root and the fix: `chmod 0700` only for a directory of this user's that
/// is not a shared one (sticky, as /tmp is, or the filesystem's root); otherwise a directory of its own inside.
fn open_directory_message(path: &Path, mode: u32, owner: u32, uid: u32) -> String {
    let shown = path.display();
    let shared = mode & 0o1000 != 0 || path.parent().is_none();
    let inside = path.join("ballast-state");
    let elsewhere = format!(
        "use a directory of the store's own instead, e.g. --state file://{} (Ballast creates it, 0700)",
        inside.display()
    );
    let fix = if shared {
        format!("it is shared, so do not change it: {elsewhere}")
    } else if owner != uid {
        format!(
            "if it holds nothing but the state store, `chown {uid} {shown} && chmod 0700 {shown}`; otherwise \
             {elsewhere}"
        )
    } else {
        format!(
            "if it holds nothing but the state store, `chmod 0700 {shown}`; otherwise {elsewhere}"
        )
    };
    let whose = if owner == uid {
        String::new()
    } else {
        format!(" and belongs to uid {owner}, not to this user (uid {uid})")
    };
    format!(
        "state store directory {shown} has mode {mode:04o}{whose}: others could read or change its secrets, and \
         Ballast changes the mode of nothing it did not create; {fix}"
    )
}

/// The `file://` backend.
#[derive(Debug, Clone)]
pub struct FileStore {
    root: PathBuf,
}

impl FileStore {
    pub fn new(root: PathBuf) -> Self {
        FileStore { root }
    }

    /// The store at `root`, after making sure no one else can read or change what is there: a root that exists
    /// must be a directory that group and others have no access to (and that belongs to this user when it is
    /// open to them), or it is refused with the fix to make. The store never changes the mode of anything it
    /// did not create (`--state file:///` must not re-mode the host): a root it creates, on the first write, and
    /// everything under it are 0700 directories and 0600 files. A private root keeps everyone else out of what
    /// lies under it, whatever their modes, so only the root is checked.
    pub fn open(root: PathBuf) -> Result<Self, StoreError> {
        check_root(&root, nix::unistd::geteuid().as_raw())?;
        Ok(FileStore::new(root))
    }

    fn path_of(&self, key: &str) -> Result<PathBuf, StoreError> {
        // Keys are built by `layout`; refuse anything that could step outside the root.
        if key.is_empty()
            || key.starts_with('/')
            || key.split('/').any(|part| part == ".." || part == ".")
        {
            return Err(StoreError::InvalidUrl {
                url: key.to_string(),
                reason: "not a valid object key".to_string(),
            });
        }
        Ok(self.root.join(key))
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
        move |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let path = self.path_of(key)?;
        match std::fs::read(&path) {
            Ok(data) => Ok(Some(StoredObject {
                version: Version(sha256_hex(&data)),
                data,
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io(&path)(e)),
        }
    }

    /// Reads at most `limit.bytes` and one more byte of the object, whatever its size claims.
    fn get_bounded(&self, key: &str, limit: ReadLimit) -> Result<Option<StoredObject>, StoreError> {
        use std::io::Read;
        let path = self.path_of(key)?;
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io(&path)(e)),
        };
        let mut data = Vec::new();
        file.take(limit.bytes.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(Self::io(&path))?;
        if data.len() as u64 > limit.bytes {
            return Err(StoreError::TooLarge {
                key: path.display().to_string(),
                limit: limit.bytes,
                what: limit.what,
                version: self
                    .version_of(&path)?
                    .unwrap_or_else(|| Version(String::new())),
            });
        }
        Ok(Some(StoredObject {
            version: Version(sha256_hex(&data)),
            data,
        }))
    }

    /// The object's version (its sha256) without holding it in memory: a report a node wrote may be of any size.
    fn version_of(&self, path: &Path) -> Result<Option<Version>, StoreError> {
        let mut file = match std::fs::File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Self::io(path)(e)),
        };
        let mut hasher = Sha256::new();
        // Read a piece at a time and hashed as read (sha2 0.11's hasher is no `io::Write` to copy into).
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let read = std::io::Read::read(&mut file, &mut buffer).map_err(Self::io(path))?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
        }
        Ok(Some(Version(hex::encode(hasher.finalize()))))
    }

    fn modified_unix(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let path = self.path_of(key)?;
        match std::fs::metadata(&path).and_then(|m| m.modified()) {
            Ok(time) => Ok(Some(match time.duration_since(std::time::UNIX_EPOCH) {
                Ok(after) => after.as_secs() as i64,
                Err(before) => -(before.duration().as_secs() as i64),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Self::io(&path)(e)),
        }
    }

    /// Holds the store's write lock for the life of the returned file.
    fn lock(&self) -> Result<std::fs::File, StoreError> {
        self.create_dir(&self.root)?;
        let path = self.root.join(".ballast-store.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(Self::io(&path))?;
        file.lock().map_err(Self::io(&path))?;
        Ok(file)
    }

    fn create_dir(&self, dir: &Path) -> Result<(), StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(Self::io(dir))
    }

    fn put(
        &self,
        key: &str,
        data: &[u8],
        precondition: &Precondition,
    ) -> Result<Version, StoreError> {
        let path = self.path_of(key)?;
        let _lock = self.lock()?;
        let current = self.version_of(&path)?;
        let holds = match (precondition, &current) {
            (Precondition::None, _) => true,
            (Precondition::MustNotExist, current) => current.is_none(),
            (Precondition::MustMatch(v), Some(current)) => current == v,
            (Precondition::MustMatch(_), None) => false,
        };
        if !holds {
            return Err(StoreError::Conflict {
                key: key.to_string(),
                reason: conflict_reason(precondition),
            });
        }
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        // Made as every directory of the store is (0700, a failure naming the directory), not by the writer.
        self.create_dir(&dir)?;
        // Under the lock, so the version compared above is still the one this write replaces. The temporary file
        // is hidden (`.<name>...tmp`), so a listing never sees it as an object.
        durable::write(&path, data, &Options::mode(0o600))?;
        Ok(Version(sha256_hex(data)))
    }

    fn delete(&self, key: &str) -> Result<(), StoreError> {
        let path = self.path_of(key)?;
        let _lock = self.lock()?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Self::io(&path)(e)),
        }
        // Leave no empty directories behind, up to the root.
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.root || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    /// A file's version is its sha256 ([`FileStore::get`]), so each listed file is read once, a piece at a time
    /// (a report a node wrote may be of any size).
    fn list_versions(&self, prefix: &str) -> Result<BTreeMap<String, Version>, StoreError> {
        let mut versions = BTreeMap::new();
        for key in self.list(prefix)? {
            if let Some(version) = self.version_of(&self.path_of(&key)?)? {
                versions.insert(key, version);
            }
        }
        Ok(versions)
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(Self::io(&dir)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(Self::io(&dir))?;
                let path = entry.path();
                let name = entry.file_name();
                if name.to_string_lossy().starts_with('.') {
                    continue;
                }
                if entry.file_type().map_err(Self::io(&path))?.is_dir() {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&self.root) {
                    let key = rel.to_string_lossy().to_string();
                    if key.starts_with(prefix) {
                        keys.push(key);
                    }
                }
            }
        }
        Ok(keys)
    }
}

/// The `s3://` backend.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    /// The endpoint the client calls, for errors to name (`crate::sdk::endpoint_of`).
    endpoint: String,
    bucket: String,
    prefix: String,
    kms_key_id: Option<String>,
    /// Who these credentials are (`sts:GetCallerIdentity`), asked once, on the first request.
    sts: aws_sdk_sts::Client,
    /// The STS endpoint `sts` calls, for errors to name.
    sts_endpoint: String,
    /// The account of these credentials: every request names it as the bucket's expected owner
    /// (`x-amz-expected-bucket-owner`), so S3 refuses a bucket of this name in another account (a name taken
    /// by someone else before the operator made it, or after it was deleted) with 403 instead of serving it.
    owner: std::sync::Arc<tokio::sync::OnceCell<String>>,
}

impl S3Store {
    /// Builds a client from the standard AWS configuration (env, profile, IMDS). With a custom endpoint
    /// (`AWS_ENDPOINT_URL`, e.g. the local cloud) path-style addressing is used, since bucket subdomains of a
    /// loopback address do not resolve.
    pub async fn connect(bucket: &str, prefix: &str, options: StoreOptions) -> Self {
        let mut shared = crate::sdk::load(None).await;
        if shared.region().is_none() {
            shared = shared
                .into_builder()
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .build();
        }
        let endpoint = crate::sdk::endpoint_of(&shared, "s3");
        let mut builder = aws_sdk_s3::config::Builder::from(&shared);
        if shared.endpoint_url().is_some() {
            builder = builder.force_path_style(true);
        }
        if let Some(interceptor) = options.interceptor {
            builder.push_interceptor(interceptor);
        }
        S3Store {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            endpoint,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            kms_key_id: options.kms_key_id,
            sts: aws_sdk_sts::Client::new(&shared),
            sts_endpoint: crate::sdk::endpoint_of(&shared, "sts"),
            owner: Default::default(),
        }
    }

    /// The account every request names as the bucket's owner: that of the credentials in use, read once.
    pub(crate) async fn expected_owner(&self) -> Result<&str, StoreError> {
        let owner = self
            .owner
            // Boxed: every store call's future holds this one, and STS's would deepen them all.
            .get_or_try_init(|| {
                Box::pin(caller_account(&self.sts, &self.bucket, &self.sts_endpoint))
            })
            .await?;
        Ok(owner.as_str())
    }

    fn full_key(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    fn error<E, R>(&self, operation: &'static str, key: &str, err: SdkError<E, R>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: fmt::Debug + Send + Sync + 'static,
    {
        StoreError::S3 {
            operation,
            bucket: self.bucket.clone(),
            key: self.full_key(key),
            message: self.describe(&err),
            source: Box::new(err),
        }
    }

    /// [`describe_sdk_error`] for this store's bucket and endpoint.
    pub(crate) fn describe<E, R>(&self, err: &SdkError<E, R>) -> String
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: fmt::Debug + 'static,
    {
        describe_sdk_error(err, &self.bucket, &self.endpoint)
    }

    /// An object of the operator's or Ballast's own, read whole: the one S3 read path, with no bound.
    async fn get(&self, key: &str) -> Result<Option<StoredObject>, StoreError> {
        let unbounded = ReadLimit {
            bytes: u64::MAX,
            what: "an object",
        };
        self.get_bounded(key, unbounded).await
    }

    /// Refuses an object whose `Content-Length` is over the limit without reading its body, and stops reading a
    /// body that runs past the limit whatever the header said.
    async fn get_bounded(
        &self,
        key: &str,
        limit: ReadLimit,
    ) -> Result<Option<StoredObject>, StoreError> {
        let result = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .key(self.full_key(key))
            .send()
            .await;
        let mut output = match result {
            Ok(output) => output,
            Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => return Ok(None),
            Err(e) => return Err(self.error("read", key, e)),
        };
        let version = Version(output.e_tag().unwrap_or_default().to_string());
        let too_large = |version: Version| StoreError::TooLarge {
            key: self.full_key(key),
            limit: limit.bytes,
            what: limit.what,
            version,
        };
        let claimed = output
            .content_length()
            .and_then(|length| u64::try_from(length).ok());
        if claimed.is_some_and(|length| length > limit.bytes) {
            return Err(too_large(version));
        }
        let mut data = Vec::new();
        while let Some(chunk) = output.body.try_next().await.map_err(|e| StoreError::S3 {
            operation: "read",
            bucket: self.bucket.clone(),
            key: self.full_key(key),
            message: format!("reading the body: {e}"),
            source: Box::new(e),
        })? {
            if (data.len() + chunk.len()) as u64 > limit.bytes {
                return Err(too_large(version));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(Some(StoredObject { data, version }))
    }

    async fn modified_unix(&self, key: &str) -> Result<Option<i64>, StoreError> {
        let result = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .key(self.full_key(key))
            .send()
            .await;
        match result {
            Ok(output) => Ok(output.last_modified().map(|t| t.secs())),
            Err(SdkError::ServiceError(e)) if e.err().is_not_found() => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    async fn put(
        &self,
        key: &str,
        data: &[u8],
        precondition: &Precondition,
    ) -> Result<Version, StoreError> {
        let mut request = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .key(self.full_key(key))
            .body(ByteStream::from(data.to_vec()));

        request = match &self.kms_key_id {
            Some(kms) => request
                .server_side_encryption(ServerSideEncryption::AwsKms)
                .ssekms_key_id(kms),
            None => request.server_side_encryption(ServerSideEncryption::Aes256),
        };
        request = match precondition {
            Precondition::None => request,
            Precondition::MustNotExist => request.if_none_match("*"),
            Precondition::MustMatch(v) => request.if_match(&v.0),
        };
        let sent = if crate::sdk::upload_needs_more_time(data.len()) {
            request
                .customize()
                .config_override(
                    aws_sdk_s3::config::Builder::new()
                        .timeout_config(crate::sdk::upload_timeouts(data.len())),
                )
                .send()
                .await
        } else {
            request.send().await
        };
        match sent {
            Ok(output) => Ok(Version(output.e_tag().unwrap_or_default().to_string())),
            Err(e) if is_precondition_failure(&e) => Err(StoreError::Conflict {
                key: key.to_string(),
                reason: conflict_reason(precondition),
            }),
            Err(e) => Err(self.error("write", key, e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .key(self.full_key(key))
            .send()
            .await
            .map_err(|e| self.error("delete", key, e))?;
        Ok(())
    }

    async fn list_versions(&self, prefix: &str) -> Result<BTreeMap<String, Version>, StoreError> {
        let full_prefix = self.full_key(prefix);
        let strip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        let mut versions = BTreeMap::new();
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .expected_bucket_owner(self.expected_owner().await?)
            .prefix(&full_prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.error("list", prefix, e))?;
            for object in page.contents() {
                if let (Some(key), Some(etag)) = (object.key(), object.e_tag()) {
                    versions.insert(
                        key[strip.min(key.len())..].to_string(),
                        Version(etag.to_string()),
                    );
                }
            }
        }
        Ok(versions)
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self.list_versions(prefix).await?.into_keys().collect())
    }
}

/// The AWS account of the credentials `sts` signs with (`sts:GetCallerIdentity`, which needs no permission): what
/// Ballast names as the expected owner (`ExpectedBucketOwner`) of `bucket` on every request to it, the state
/// bucket's here and the IRSA discovery bucket's in `ballast`.
pub async fn caller_account(
    sts: &aws_sdk_sts::Client,
    bucket: &str,
    endpoint: &str,
) -> Result<String, StoreError> {
    let identity =
        sts.get_caller_identity()
            .send()
            .await
            .map_err(|e| StoreError::OwnerUnknown {
                bucket: bucket.to_string(),
                message: describe_sdk_error(&e, bucket, endpoint),
                source: Box::new(e),
            })?;
    identity
        .account()
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .ok_or_else(|| StoreError::OwnerUnknown {
            bucket: bucket.to_string(),
            message: "the answer names no account".to_string(),
            source: "GetCallerIdentity answered without an account".into(),
        })
}

/// 412 PreconditionFailed, or 409 ConditionalRequestConflict (two conditional writes racing on AWS).
fn is_precondition_failure<E>(err: &SdkError<E, HttpResponse>) -> bool {
    matches!(err, SdkError::ServiceError(_))
        && err
            .raw_response()
            .is_some_and(|r| matches!(r.status().as_u16(), 409 | 412))
}

/// A message an operator can act on, in Ballast's words: the AWS error code and message, or what went wrong on
/// the way and what to do, naming the bucket and the `endpoint` called. The SDK's own detail stays in the
/// error's source (printed under `-v`).
pub fn describe_sdk_error<E, R>(err: &SdkError<E, R>, bucket: &str, endpoint: &str) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: fmt::Debug + 'static,
{
    match err {
        SdkError::ServiceError(service) => {
            let e = service.err();
            let code = e.code().unwrap_or("unknown error");
            let message = e.message().unwrap_or("");
            let hint = match code {
                "NoSuchBucket" => format!(
                    ": create the bucket first (e.g. aws s3 mb s3://{bucket}, with versioning and default encryption on)"
                ),
                "AccessDenied" | "AllAccessDisabled" => format!(
                    ": the AWS identity in use may not use this bucket, or bucket {bucket} belongs to another \
                     account (Ballast names the credentials' own account as the bucket's expected owner: a bucket of \
                     that name in another account is refused); use an identity allowed to (docs/security.md says \
                     what Ballast needs)"
                ),
                "InvalidAccessKeyId" | "SignatureDoesNotMatch" | "ExpiredToken" | "InvalidToken" => {
                    ": AWS refused the credentials in use; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE".to_string()
                }
                _ => String::new(),
            };
            format!("{code}: {message}{hint}")
        }
        other => crate::sdk::describe_failure(other, endpoint),
    }
}
