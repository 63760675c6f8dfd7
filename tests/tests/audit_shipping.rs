//! The API server's audit log shipped to S3 (docs/audit.md), at the process level: nodeup's shipper
//! (`nodeup/src/audit/`, run by `src/bin/audit-shipper.rs` exactly as nodeup's boot runs it) against the AWS
//! emulator over HTTP through the real AWS SDK. No kube-apiserver runs here, so the test writes the audit log as
//! the API server does: JSON lines of `audit.k8s.io/v1` Events, one write per line, appended to `audit.log`,
//! which is renamed to `audit-<time>.log` and created anew when it would pass its size limit (the API server's
//! `--audit-log-maxsize` rotation).
//!
//! One scenario, in order: lines shipped while they are written, across rotations, then a graceful stop (SIGTERM)
//! that flushes the last chunk, with a half-written line left on disk; a rotation while the shipper is down and a
//! restart that ships the rest and nothing twice; a kill -9 that loses at most the lines written since the last
//! chunk; and a restart that ships those, again nothing twice.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ballast_e2e::aws;
use ballast_e2e::wait::wait_until;

const CLUSTER: &str = "audit.example.com";
const INSTANCE: &str = "i-0123456789abcdef0";
/// moto echoes SSE-KMS headers without checking the key exists.
const KMS_KEY: &str = "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
/// The chunk interval: below the spec's 5 s floor so the scenario runs in seconds.
const INTERVAL_MS: u64 = 1000;
/// Small chunks, so that every phase cuts several by size too.
const CHUNK_MAX_BYTES: u64 = 4096;
/// The audit file's rotation size (the API server's `--audit-log-maxsize`, in bytes here).
const ROTATE_AT: u64 = 16 * 1024;
const DEADLINE: Duration = Duration::from_secs(120);

/// The audit log as the API server writes it, and every byte written, in order.
struct ApiServerLog {
    dir: PathBuf,
    written: Vec<u8>,
    /// Offsets in `written` where a file ended (a rotation): no chunk may span one.
    rotations: Vec<usize>,
    events: u64,
}

impl ApiServerLog {
    fn new(dir: PathBuf) -> Self {
        std::fs::create_dir_all(&dir).expect("the log directory");
        ApiServerLog {
            dir,
            written: Vec::new(),
            rotations: Vec::new(),
            events: 0,
        }
    }

    fn live(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    fn live_len(&self) -> u64 {
        std::fs::metadata(self.live()).map_or(0, |m| m.len())
    }

    /// The live file renamed to a backup named by its (made-up, increasing) rotation time; the next write
    /// creates a new live file.
    fn rotate(&mut self) {
        let n = self.rotations.len();
        let backup = self.dir.join(format!(
            "audit-2026-12-02T16-{:02}-{:02}.000.log",
            n / 60,
            n % 60
        ));
        std::fs::rename(self.live(), backup).expect("rotating the audit log");
        self.rotations.push(self.written.len());
    }

    fn append(&mut self, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.live())
            .expect("opening the audit log");
        file.write_all(bytes).expect("writing the audit log");
        self.written.extend_from_slice(bytes);
    }

    /// `count` events, one write each, rotating first when a line would pass the size limit.
    fn write_events(&mut self, count: usize) {
        for _ in 0..count {
            let line = self.next_event();
            if self.live_len() > 0 && self.live_len() + line.len() as u64 > ROTATE_AT {
                self.rotate();
            }
            self.append(line.as_bytes());
        }
    }

    /// An `audit.k8s.io/v1` Event at the Metadata level, as one JSON line.
    fn next_event(&mut self) -> String {
        self.events += 1;
        let n = self.events;
        let verbs = ["get", "list", "create", "update", "patch", "delete"];
        let verb = verbs[(n % verbs.len() as u64) as usize];
        let event = serde_json::json!({
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": format!("{:08x}-0000-4000-8000-{n:012x}", n * 2654435761 % 0xffff_ffff),
            "stage": "ResponseComplete",
            "requestURI": format!("/api/v1/namespaces/default/configmaps/cm-{n}"),
            "verb": verb,
            "user": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "sourceIPs": ["10.0.1.17"],
            "userAgent": "kubectl/v1.33.4 (linux/amd64) kubernetes/74d6b1c",
            "objectRef": {"resource": "configmaps", "namespace": "default", "name": format!("cm-{n}"), "apiVersion": "v1"},
            "responseStatus": {"metadata": {}, "code": 200},
            "requestReceivedTimestamp": format!("2026-12-02T16:{:02}:{:02}.{:06}Z", n / 3600 % 60, n / 60 % 60, n % 1_000_000),
            "stageTimestamp": format!("2026-12-02T16:{:02}:{:02}.{:06}Z", n / 3600 % 60, n / 60 % 60, (n + 1500) % 1_000_000),
            "annotations": {"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""},
        });
        format!("{event}\n")
    }

    /// Everything written up to the last complete line.
    fn complete(&self) -> &[u8] {
        let end = self
            .written
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        &self.written[..end]
    }
}

/// The shipper's process.
struct ShipperProcess {
    child: Child,
}

impl ShipperProcess {
    fn start(log: &Path, position: &Path, destination: &str) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_audit-shipper"))
            .arg(log)
            .arg(position)
            .args([
                destination,
                CLUSTER,
                INSTANCE,
                &INTERVAL_MS.to_string(),
                &CHUNK_MAX_BYTES.to_string(),
                KMS_KEY,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting the audit shipper");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().expect("its stdout"))
            .read_line(&mut line)
            .expect("reading the shipper's first line");
        assert_eq!(line.trim(), "ready", "the shipper did not start");
        ShipperProcess { child }
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signalling the shipper");
    }

    /// SIGTERM, as systemd stops nodeup; the process must exit cleanly once it has flushed.
    fn stop(mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let status = self.child.wait().expect("waiting for the shipper");
        assert!(status.success(), "the shipper's graceful stop: {status}");
    }

    /// kill -9: no flush, no position written after this.
    fn kill(mut self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for ShipperProcess {
    fn drop(&mut self) {
        // A test that failed half way leaves no process behind.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chunks under the instance's prefix, in key order: (key, bytes, SSE, KMS key).
async fn chunks(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    prefix: &str,
) -> Vec<(String, Vec<u8>, Option<String>, Option<String>)> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .set_continuation_token(token.clone())
            .send()
            .await
            .expect("listing the chunks");
        keys.extend(
            page.contents()
                .iter()
                .filter_map(|o| o.key().map(str::to_string)),
        );
        token = page.next_continuation_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    keys.sort();
    let mut out = Vec::new();
    for key in keys {
        let object = client
            .get_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .expect("reading a chunk");
        let sse = object
            .server_side_encryption()
            .map(|s| s.as_str().to_string());
        let kms = object.ssekms_key_id().map(str::to_string);
        let body = object
            .body
            .collect()
            .await
            .expect("a chunk's body")
            .to_vec();
        out.push((key, body, sse, kms));
    }
    out
}

async fn shipped(client: &aws_sdk_s3::Client, bucket: &str, prefix: &str) -> Vec<u8> {
    chunks(client, bucket, prefix)
        .await
        .into_iter()
        .flat_map(|(_, body, _, _)| body)
        .collect()
}

fn lines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_chunks_equal_the_lines_written_across_rotations_a_graceful_stop_and_a_kill() {
    let client = aws::s3_client().await;
    let bucket = aws::new_bucket("audit").await;
    let destination = format!("s3://{bucket}/archive");
    let prefix = format!("archive/{CLUSTER}/audit/{INSTANCE}/");
    let node = tempfile::tempdir().expect("a node root");
    let mut log = ApiServerLog::new(node.path().join("var/log/kubernetes"));
    let position = node.path().join("var/lib/nodeup/audit-position.json");

    // 1. Lines shipped as they are written, across rotations, without being asked.
    let shipper = ShipperProcess::start(&log.live(), &position, &destination);
    log.write_events(60);
    let written = log.written.clone();
    let started = Instant::now();
    wait_until(DEADLINE, "the first 60 events shipped", || async {
        shipped(&client, &bucket, &prefix).await == written
    })
    .await;
    println!(
        "60 events ({} bytes, {} rotations) shipped {:?} after the last was written (interval {INTERVAL_MS} ms)",
        written.len(),
        log.rotations.len(),
        started.elapsed()
    );
    // Then more, a half-written line, and a graceful stop at once: the flush ships every complete line.
    log.write_events(25);
    let half = log.next_event();
    let (head, tail) = half.as_bytes().split_at(half.len() / 2);
    log.append(head);
    shipper.stop();
    assert_eq!(
        shipped(&client, &bucket, &prefix).await,
        log.complete(),
        "after a graceful stop, the chunks are every complete line written, the half line not yet"
    );
    assert!(!log.rotations.is_empty(), "the scenario rotated the log");

    // 2. The line finished and the log rotated while the shipper is down; a restart ships the rest, nothing twice.
    log.append(tail);
    log.write_events(10);
    log.rotate();
    log.write_events(15);
    let shipper = ShipperProcess::start(&log.live(), &position, &destination);
    let written = log.written.clone();
    wait_until(
        DEADLINE,
        "the lines written while stopped shipped",
        || async { shipped(&client, &bucket, &prefix).await == written },
    )
    .await;

    // 3. kill -9: what was written since everything was last shipped (one interval's lines) may be lost, no more,
    //    and what was shipped is exactly a prefix of what was written.
    let all_shipped_before = log.written.len();
    log.write_events(8);
    shipper.kill();
    let after_kill = shipped(&client, &bucket, &prefix).await;
    assert!(
        log.written.starts_with(&after_kill),
        "what was shipped before the kill is a prefix of the log (no line twice, none out of order)"
    );
    assert!(
        after_kill.len() >= all_shipped_before,
        "the kill lost only lines written since the last chunk: {} bytes shipped, {all_shipped_before} were \
         shipped before the last lines were written",
        after_kill.len()
    );
    println!(
        "kill -9 left {} of the last 8 events unshipped",
        lines(&log.written[after_kill.len()..])
    );

    // 4. A restart after the kill ships what was left, nothing twice; then a graceful stop.
    let shipper = ShipperProcess::start(&log.live(), &position, &destination);
    let written = log.written.clone();
    wait_until(DEADLINE, "the lines left by the kill shipped", || async {
        shipped(&client, &bucket, &prefix).await == written
    })
    .await;
    shipper.stop();

    let chunks = chunks(&client, &bucket, &prefix).await;
    assert_eq!(
        chunks.iter().flat_map(|c| c.1.clone()).collect::<Vec<u8>>(),
        log.written,
        "the chunks in key order are the log, byte for byte"
    );
    let mut start = 0;
    for (i, (key, body, sse, kms)) in chunks.iter().enumerate() {
        assert_eq!(
            key,
            &format!("{prefix}{i:020}.jsonl"),
            "chunk keys are the sequence, contiguous"
        );
        assert!(body.ends_with(b"\n"), "{key} ends with a whole line");
        assert!(
            body.len() as u64 <= CHUNK_MAX_BYTES,
            "{key} is {} bytes, more than the cap",
            body.len()
        );
        for line in body.split_inclusive(|&b| b == b'\n') {
            let event: serde_json::Value = serde_json::from_slice(line).expect("a JSON line");
            assert_eq!(event["apiVersion"], "audit.k8s.io/v1", "{key}");
        }
        let end = start + body.len();
        assert!(
            !log.rotations.iter().any(|&r| r > start && r < end),
            "{key} spans a rotation"
        );
        start = end;
        assert_eq!(sse.as_deref(), Some("aws:kms"), "{key} is SSE-KMS");
        assert_eq!(kms.as_deref(), Some(KMS_KEY), "{key} is under the key");
    }
    println!(
        "{} events in {} chunks over {} rotations",
        lines(&log.written),
        chunks.len(),
        log.rotations.len()
    );
}

/// The retention rule `update cluster --yes` keeps on the state bucket (`store/src/store/lifecycle.rs`), against
/// the emulator: added beside an operator's own rule, written once, read back as set.
#[tokio::test(flavor = "multi_thread")]
async fn the_retention_rule_joins_the_buckets_rules_and_is_written_once() {
    use aws_sdk_s3::types::{
        BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
        LifecycleRuleFilter,
    };
    use ballast_store::store::lifecycle::{ExpirationRule, RuleOutcome};
    use ballast_store::store::{StateStore, StoreOptions};

    let client = aws::s3_client().await;
    let bucket = aws::new_bucket("audit-retention").await;
    let operators = LifecycleRule::builder()
        .id("operator-tmp")
        .filter(LifecycleRuleFilter::builder().prefix("tmp/").build())
        .status(ExpirationStatus::Enabled)
        .expiration(LifecycleExpiration::builder().days(7).build())
        .build()
        .expect("a rule");
    client
        .put_bucket_lifecycle_configuration()
        .bucket(&bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(operators)
                .build()
                .expect("a configuration"),
        )
        .send()
        .await
        .expect("the operator's rule");
    let store = StateStore::open(&format!("s3://{bucket}/clusters"), StoreOptions::default())
        .await
        .expect("the store");
    let StateStore::S3(s3) = &store else {
        panic!("an S3 store");
    };
    let rule = ExpirationRule {
        id: format!("ballast-audit-{CLUSTER}"),
        prefix: format!("{CLUSTER}/audit/"),
        days: 90,
    };
    assert_eq!(
        s3.ensure_expiration(&rule).await.expect("set"),
        RuleOutcome::Set
    );
    assert_eq!(
        s3.ensure_expiration(&rule).await.expect("again"),
        RuleOutcome::Unchanged,
        "a second update writes nothing"
    );
    let rules = client
        .get_bucket_lifecycle_configuration()
        .bucket(&bucket)
        .send()
        .await
        .expect("the bucket's rules")
        .rules()
        .to_vec();
    let summary: Vec<(Option<String>, Option<String>, Option<i32>)> = rules
        .iter()
        .map(|r| {
            (
                r.id().map(str::to_string),
                r.filter().and_then(|f| f.prefix()).map(str::to_string),
                r.expiration().and_then(|e| e.days()),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (
                Some("operator-tmp".to_string()),
                Some("tmp/".to_string()),
                Some(7)
            ),
            (
                Some(format!("ballast-audit-{CLUSTER}")),
                Some(format!("clusters/{CLUSTER}/audit/")),
                Some(90)
            ),
        ]
    );
}
