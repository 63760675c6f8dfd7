//! The real servers `images/pin.sh` is tested against, each on a free loopback port and stopped on drop:
//!
//! - [`Registry`]: Debian's `docker-registry` (the CNCF distribution registry, 2.8), with a config and storage in
//!   a temp dir and no auth, into which the test pushes images it builds itself through the registry's HTTP API
//!   (blob uploads started with POST and finished with one PUT of the whole blob, then manifests and indexes
//!   PUT by digest or tag);
//! - [`FileServer`]: `python3 -m http.server` serving a temp dir of release files.
//!
//! A missing tool panics with what to install: these tests fail, never skip.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// Panics, saying what to install, unless `tool` is on PATH.
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` is not installed, and the pin.sh tests need it: `apt-get install -y {package}` \
         (tools/install-deps installs it)"
    );
}

/// A port on 127.0.0.1 nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("cannot find a free loopback port: {e}"))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An HTTP answer: status, headers (names lowercased), body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// One HTTP/1.1 exchange over a fresh connection (`Connection: close`).
fn http(port: u16, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    try_http(port, method, target, headers, body).unwrap_or_else(|e| panic!("{e}"))
}

/// [`http`], with a connection or read failure as an error (a server just started may still drop one).
fn try_http(
    port: u16,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .map_err(|e| format!("{method} {target}: cannot connect to 127.0.0.1:{port}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a read timeout");
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| format!("{method} {target}: cannot send: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("{method} {target}: cannot read the answer: {e}"))?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {target}: no HTTP header in {response:?}"));
    let head = String::from_utf8_lossy(&response[..split]).to_string();
    let body = response[split + 4..].to_vec();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {target}: no status in {head}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, body))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Waits up to 20 s until `port` accepts connections; panics with `log` if `child` exits first.
fn wait_listening(child: &mut Child, port: u16, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening on 127.0.0.1:{port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} is not listening on 127.0.0.1:{port} after 20 s:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn stop(child: &mut Child) {
    // Only the child this guard started, by its PID.
    let _ = child.kill();
    let _ = child.wait();
}

/// What a push made: the digest the tag now names, and whether it is an index or an image manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// `sha256:<64 hex>`.
    pub digest: String,
    /// `index` or `manifest`, as pin.sh's digestKind says.
    pub kind: &'static str,
}

/// A real OCI registry on a free loopback port, with its storage in a temp dir; stopped on drop.
pub struct Registry {
    child: Child,
    /// The config, log and storage; removed after the process is stopped (fields drop after `drop`).
    _dir: tempfile::TempDir,
    pub port: u16,
    /// The Authorization header the test's own pushes carry when the registry asks for a token.
    authorization: Option<String>,
}

/// The service the registry names in its token challenge.
pub const TOKEN_SERVICE: &str = "ballast-test-registry";

impl Registry {
    /// A registry that serves anyone.
    pub fn start() -> Registry {
        Registry::start_with(None)
    }

    /// With `token_realm`, a registry that answers every request without an `Authorization` header with 401 and
    /// a Bearer challenge naming that realm, [`TOKEN_SERVICE`] and the scope, as public registries do for
    /// anonymous pulls. (Its `silly` auth checks that a header is there, not what it says: the test checks what
    /// the token service was asked and that the registry let the request through.)
    pub fn start_with(token_realm: Option<&str>) -> Registry {
        require_tool("docker-registry", "docker-registry");
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = dir.path().join("config.yml");
        let auth = token_realm
            .map(|realm| {
                format!("auth:\n  silly:\n    realm: {realm}\n    service: {TOKEN_SERVICE}\n")
            })
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    \
                 rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: ballast-test\n{auth}",
                dir.path().join("storage").display()
            ),
        )
        .expect("writing the registry's config");
        let log = dir.path().join("registry.log");
        let log_file = std::fs::File::create(&log).expect("the registry's log");
        let mut child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start docker-registry: {e}"));
        wait_listening(&mut child, port, "docker-registry", &log);
        let registry = Registry {
            child,
            _dir: dir,
            port,
            authorization: token_realm.map(|_| "Bearer the-test-pushes-own-token".to_string()),
        };
        // Listening is not answering yet: a connection accepted in the registry's first moments was once reset
        // (CI). Its first answer is waited for the same way, up to 20 s, naming the last failure; a panic here stops
        // the registry (the guard is built first).
        let deadline = Instant::now() + Duration::from_secs(20);
        let (status, headers, _) = loop {
            match try_http(port, "GET", "/v2/", &[], b"") {
                Ok(answer) => break answer,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("docker-registry not answering yet: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!(
                    "docker-registry on 127.0.0.1:{port} gives no answer after 20 s: {e}\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                ),
            }
        };
        if let Some(realm) = token_realm {
            assert_eq!(
                status, 401,
                "the registry's /v2/ answered {status} without a token"
            );
            let challenge = header(&headers, "www-authenticate").unwrap_or_default();
            assert!(
                challenge.starts_with("Bearer ") && challenge.contains(realm),
                "the registry's challenge: {challenge}"
            );
        }
        let (status, _, _) = registry.call("GET", "/v2/", &[], b"");
        assert_eq!(status, 200, "the registry's /v2/ answered {status}");
        registry
    }

    /// One request of the test's own, with the token when the registry asks for one.
    fn call(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut all = headers.to_vec();
        if let Some(authorization) = &self.authorization {
            all.push(("Authorization", authorization));
        }
        http(self.port, method, target, &all, body)
    }

    /// `127.0.0.1:<port>`: the registry host in image references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Uploads a blob (POST starts the upload, one PUT carries it whole); returns its descriptor.
    fn push_blob(&self, repository: &str, media_type: &str, bytes: &[u8]) -> serde_json::Value {
        let digest = format!("sha256:{}", sha256_hex(bytes));
        let (status, headers, body) = self.call(
            "POST",
            &format!("/v2/{repository}/blobs/uploads/"),
            &[],
            b"",
        );
        assert_eq!(
            status,
            202,
            "starting an upload to {repository}: {}",
            String::from_utf8_lossy(&body)
        );
        let location = header(&headers, "location").expect("an upload location");
        let path = location
            .strip_prefix(&format!("http://{}", self.host()))
            .unwrap_or(location);
        let separator = if path.contains('?') { '&' } else { '?' };
        let (status, _, body) = self.call(
            "PUT",
            &format!("{path}{separator}digest={digest}"),
            &[("Content-Type", "application/octet-stream")],
            bytes,
        );
        assert_eq!(
            status,
            201,
            "finishing the upload of {digest} to {repository}: {}",
            String::from_utf8_lossy(&body)
        );
        serde_json::json!({ "mediaType": media_type, "digest": digest, "size": bytes.len() })
    }

    /// PUTs a manifest or an index under a tag or its digest.
    fn put_manifest(&self, repository: &str, reference: &str, media_type: &str, bytes: &[u8]) {
        let (status, headers, body) = self.call(
            "PUT",
            &format!("/v2/{repository}/manifests/{reference}"),
            &[("Content-Type", media_type)],
            bytes,
        );
        assert_eq!(
            status,
            201,
            "PUT {repository}:{reference}: {}",
            String::from_utf8_lossy(&body)
        );
        let digest = format!("sha256:{}", sha256_hex(bytes));
        assert_eq!(
            header(&headers, "docker-content-digest"),
            Some(digest.as_str()),
            "the registry names another digest than the bytes pushed"
        );
    }

    /// One platform's image: a gzipped tar layer holding a file that says `label`, its config and manifest,
    /// pushed by digest. Returns the manifest's descriptor (with its platform).
    fn push_platform(&self, repository: &str, label: &str, arch: &str) -> serde_json::Value {
        let stage = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            stage.path().join("image.txt"),
            format!("a Ballast pin.sh test image: {label} ({arch})\n"),
        )
        .expect("writing the layer's file");
        let tar = Command::new("tar")
            .args([
                "--owner=0",
                "--group=0",
                "--numeric-owner",
                "--mtime=@0",
                "-C",
            ])
            .arg(stage.path())
            .args(["-cf", "-", "image.txt"])
            .stdin(Stdio::null())
            .output()
            .expect("tar");
        assert!(tar.status.success(), "tar: {tar:?}");
        let mut gzip = Command::new("gzip")
            .args(["-n", "-c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gzip");
        gzip.stdin
            .take()
            .expect("gzip's stdin")
            .write_all(&tar.stdout)
            .expect("feeding gzip");
        let gzipped = gzip.wait_with_output().expect("gzip");
        assert!(gzipped.status.success(), "gzip failed");
        let layer = self.push_blob(repository, LAYER, &gzipped.stdout);
        let config = serde_json::json!({
            "architecture": arch,
            "os": "linux",
            "config": { "Entrypoint": ["/image.txt"] },
            "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{}", sha256_hex(&tar.stdout))] },
        });
        let config = self.push_blob(
            repository,
            CONFIG,
            &serde_json::to_vec(&config).expect("config"),
        );
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": config,
            "layers": [layer],
        }))
        .expect("manifest");
        let digest = format!("sha256:{}", sha256_hex(&manifest));
        self.put_manifest(repository, &digest, MANIFEST, &manifest);
        serde_json::json!({
            "mediaType": MANIFEST,
            "digest": digest,
            "size": manifest.len(),
            "platform": { "architecture": arch, "os": "linux" },
        })
    }

    /// Pushes an image under `repository:tag`: with `index`, an OCI image index over an amd64 and an arm64
    /// image (as upstream publishes multi-arch images); without, the amd64 image manifest alone. `label` makes
    /// its content (and so its digest) differ from another push's.
    pub fn push_image(&self, repository: &str, tag: &str, label: &str, index: bool) -> Pushed {
        let amd64 = self.push_platform(repository, label, "amd64");
        if !index {
            let digest = amd64["digest"].as_str().expect("a digest").to_string();
            let (status, _, manifest) = self.call(
                "GET",
                &format!("/v2/{repository}/manifests/{digest}"),
                &[("Accept", MANIFEST)],
                b"",
            );
            assert_eq!(status, 200, "reading back {repository}@{digest}");
            self.put_manifest(repository, tag, MANIFEST, &manifest);
            return Pushed {
                digest,
                kind: "manifest",
            };
        }
        let arm64 = self.push_platform(repository, label, "arm64");
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [amd64, arm64],
        }))
        .expect("index");
        self.put_manifest(repository, tag, INDEX, &index);
        Pushed {
            digest: format!("sha256:{}", sha256_hex(&index)),
            kind: "index",
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// `python3 -m http.server` serving a temp dir on a free loopback port; stopped on drop.
pub struct FileServer {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
}

impl FileServer {
    pub fn start() -> FileServer {
        require_tool("python3", "python3");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("files")).expect("mkdir files");
        let port = free_port();
        let log = dir.path().join("http.log");
        let log_file = std::fs::File::create(&log).expect("the server's log");
        let mut child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir.path().join("files"))
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start python3 -m http.server: {e}"));
        wait_listening(&mut child, port, "python3 -m http.server", &log);
        FileServer { child, dir, port }
    }

    /// Serves `bytes` at `/<name>`; returns their sha256.
    pub fn put(&self, name: &str, bytes: &[u8]) -> String {
        std::fs::write(self.dir.path().join("files").join(name), bytes)
            .unwrap_or_else(|e| panic!("writing {name}: {e}"));
        sha256_hex(bytes)
    }

    /// The directory it serves.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().join("files")
    }

    /// What the server logged: one line per request, with its query string.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("http.log")).unwrap_or_default()
    }

    /// `http://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}
