//! The add-on applier against a local HTTP server playing the Kubernetes API (on 127.0.0.1, through kube's real
//! client and its HTTP stack, as ctl's drain tests do): every object is applied with server-side apply (PATCH,
//! `application/apply-patch+yaml`, `fieldManager=ballast`, `force=true`), a 409 conflict is retried, a second
//! run writes nothing, a changed object is the only one applied again, and a refusal stops the run naming the
//! object.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use ballast_state::components::{ComponentManifest, ImageDigest};
use ballast_state::node::NodeSpec;
use ballast_state::spec::Networking;
use kube::Client;
use nodeup::addons::apply::{apply_set, ApplyError, ObjectAction};
use nodeup::addons::{self, AddonSet, APPLIED_HASH_ANNOTATION};
use nodeup::retry::Policy;
use serde_json::{json, Value};

#[derive(Default)]
struct Fake {
    /// API path -> the stored object.
    objects: BTreeMap<String, Value>,
    /// API path -> conflicts still to answer to its applies.
    conflicts: BTreeMap<String, usize>,
    /// API path -> the status every apply of it gets (a refusal).
    refuse: BTreeMap<String, u16>,
    /// `METHOD path?query content-type`, in order.
    log: Vec<String>,
    resource_version: u64,
    /// Whether `/version` answers (an API server that is up).
    answers_version: bool,
}

type Shared = Arc<Mutex<Fake>>;

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code, "reason": reason, "message": message});
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (code, json_response(body)).into_response()
}

async fn api(
    State(fake): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let mut fake = fake.lock().expect("lock");
    fake.log.push(format!(
        "{method} {path}?{} {content_type}",
        uri.query().unwrap_or("")
    ));
    match method {
        Method::GET if path == "/version" && fake.answers_version => json_response(
            json!({"major": "1", "minor": "33", "gitVersion": "v1.33.4", "platform": "linux/amd64"}),
        ),
        Method::GET => match fake.objects.get(&path) {
            Some(object) => json_response(object.clone()).into_response(),
            None => status(404, "NotFound", &format!("{path} not found")),
        },
        Method::PATCH => {
            if let Some(code) = fake.refuse.get(&path).copied() {
                return status(code, "Forbidden", "refused by the test");
            }
            if let Some(left) = fake.conflicts.get_mut(&path).filter(|n| **n > 0) {
                *left -= 1;
                return status(
                    409,
                    "Conflict",
                    "Operation cannot be fulfilled: the object has been modified",
                );
            }
            // kube sends the apply patch as JSON, which is YAML.
            let mut object: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", &e.to_string()),
            };
            fake.resource_version += 1;
            object["metadata"]["resourceVersion"] = json!(fake.resource_version.to_string());
            fake.objects.insert(path, object.clone());
            json_response(object).into_response()
        }
        _ => status(405, "MethodNotAllowed", "not in this fake"),
    }
}

async fn serve(fake: Fake) -> (Client, Shared) {
    let shared: Shared = Arc::new(Mutex::new(fake));
    let app = Router::new().fallback(api).with_state(shared.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let url: http::Uri = format!("http://{addr}").parse().expect("url");
    let mut config = kube::Config::new(url);
    config.default_retry = false;
    (Client::try_from(config).expect("client"), shared)
}

fn retry() -> Policy {
    Policy::new(
        Duration::from_millis(10),
        Duration::from_millis(40),
        Duration::from_secs(30),
    )
    .with_attempts(4)
}

fn addon_set(cluster_dns: &str) -> AddonSet {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let text = std::fs::read_to_string(dir.join("control-plane/spec.yaml")).expect("spec");
    let mut spec: NodeSpec = yaml_serde::from_str(&text).expect("node spec");
    spec.networking = Networking::Calico;
    spec.cluster_dns = cluster_dns.to_string();
    let manifest = ComponentManifest::embedded().expect("embedded");
    let (minor, release) = manifest
        .release_exact(&spec.kubernetes_version)
        .expect("pinned");
    let mut release = release.clone();
    // Test digests (see tests/addons.rs): never a real image's.
    for image in release
        .addons
        .values_mut()
        .flat_map(|a| a.images.values_mut())
    {
        image.digest = ImageDigest::Pinned("ab".repeat(32));
    }
    let cni = std::fs::read_to_string(dir.join("addons/cni/calico.yaml")).expect("fixture");
    addons::render(&spec, &release, minor, Some(&cni)).expect("renders")
}

const DNS_SERVICE: &str = "/api/v1/namespaces/kube-system/services/kube-dns";
const COREDNS_DEPLOYMENT: &str = "/apis/apps/v1/namespaces/kube-system/deployments/coredns";

#[tokio::test]
async fn objects_are_server_side_applied_a_conflict_is_retried_and_a_second_run_writes_nothing() {
    let mut fake = Fake::default();
    fake.conflicts.insert(COREDNS_DEPLOYMENT.into(), 1);
    let (client, shared) = serve(fake).await;
    let set = addon_set("100.64.0.10");

    let first = apply_set(&client, &set, retry()).await.expect("applies");
    assert_eq!(first.len(), set.objects.len());
    assert!(first.iter().all(|o| o.action == ObjectAction::Applied));
    let deployment = first
        .iter()
        .find(|o| o.object == "Deployment kube-system/coredns")
        .expect("coredns");
    assert_eq!(deployment.attempts, 2, "the 409 was retried once");
    {
        let fake = shared.lock().expect("lock");
        let patches: Vec<&String> = fake.log.iter().filter(|l| l.starts_with("PATCH")).collect();
        // One apply per object, plus the one the conflict refused.
        assert_eq!(patches.len(), set.objects.len() + 1);
        for patch in &patches {
            assert!(patch.contains("fieldManager=ballast"), "{patch}");
            assert!(patch.contains("force=true"), "{patch}");
            assert!(patch.ends_with(" application/apply-patch+yaml"), "{patch}");
        }
        // Every path kube built is the one the object's kind lives at.
        for path in [
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/ballast:node-autoapprove-certificate-rotation",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/ippools.crd.projectcalico.org",
            "/apis/apps/v1/namespaces/kube-system/daemonsets/calico-node",
            "/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy",
            "/api/v1/namespaces/kube-system/configmaps/coredns",
            DNS_SERVICE,
            COREDNS_DEPLOYMENT,
        ] {
            assert!(fake.objects.contains_key(path), "{path} not applied: {:?}", fake.objects.keys());
        }
        assert!(
            fake.objects[DNS_SERVICE]["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
                .is_string()
        );
    }

    let log_len = shared.lock().expect("lock").log.len();
    let second = apply_set(&client, &set, retry())
        .await
        .expect("applies again");
    assert!(second.iter().all(|o| o.action == ObjectAction::Unchanged));
    {
        let fake = shared.lock().expect("lock");
        let new: Vec<&String> = fake.log[log_len..].iter().collect();
        assert_eq!(new.len(), set.objects.len(), "one read per object");
        assert!(new.iter().all(|l| l.starts_with("GET ")), "{new:?}");
    }

    // A changed spec changes one object: only it is applied again.
    let changed = addon_set("100.64.0.11");
    let third = apply_set(&client, &changed, retry())
        .await
        .expect("applies the change");
    let applied: Vec<&str> = third
        .iter()
        .filter(|o| o.action == ObjectAction::Applied)
        .map(|o| o.object.as_str())
        .collect();
    assert_eq!(applied, ["Service kube-system/kube-dns"]);
    let fake = shared.lock().expect("lock");
    assert_eq!(
        fake.objects[DNS_SERVICE]["spec"]["clusterIP"],
        json!("100.64.0.11")
    );
}

#[tokio::test]
async fn conflicts_are_retried_a_bounded_number_of_times_and_a_refusal_names_the_object() {
    let mut fake = Fake::default();
    fake.conflicts.insert(COREDNS_DEPLOYMENT.into(), 100);
    let (client, shared) = serve(fake).await;
    let err = apply_set(&client, &addon_set("100.64.0.10"), retry())
        .await
        .expect_err("conflicts forever");
    assert!(
        matches!(&err, ApplyError::Apply { attempts: 4, object, .. } if object == "Deployment kube-system/coredns"),
        "{err}"
    );
    assert!(
        err.to_string().contains(
            "add-on coredns: applying Deployment kube-system/coredns failed after 4 attempt(s)"
        ),
        "{err}"
    );
    assert_eq!(
        shared.lock().expect("lock").conflicts[COREDNS_DEPLOYMENT],
        96
    );

    let mut fake = Fake::default();
    fake.refuse.insert(DNS_SERVICE.into(), 403);
    let (client, shared) = serve(fake).await;
    let err = apply_set(&client, &addon_set("100.64.0.10"), retry())
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, ApplyError::Apply { attempts: 1, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("Service kube-system/kube-dns"),
        "{err}"
    );
    let refused_patches = shared
        .lock()
        .expect("lock")
        .log
        .iter()
        .filter(|l| l.starts_with(&format!("PATCH {DNS_SERVICE}?")))
        .count();
    assert_eq!(refused_patches, 1, "a 403 is not retried");
}

/// A JSON body (axum's `Json` is not built in this workspace).
fn json_response(body: serde_json::Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The applier's round on a control-plane node: silent API -> waiting; the baked CNI manifest missing -> an
/// error naming where it should be; then applied, reported with versions and the set's hash, and a second
/// round writes nothing.
#[tokio::test]
async fn the_runner_waits_for_the_api_then_applies_what_the_image_carries_and_reports_it() {
    use ballast_state::addon_report::AddonsState;
    use nodeup::addons::runner::{AddonJob, AddonRunError};

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let text = std::fs::read_to_string(dir.join("control-plane/spec.yaml")).expect("spec");
    let mut spec: NodeSpec = yaml_serde::from_str(&text).expect("node spec");
    spec.networking = Networking::Calico;
    let manifest = ComponentManifest::embedded().expect("embedded");
    let (minor, release) = manifest
        .release_exact(&spec.kubernetes_version)
        .expect("pinned");
    let mut release = release.clone();
    for image in release
        .addons
        .values_mut()
        .flat_map(|a| a.images.values_mut())
    {
        image.digest = ImageDigest::Pinned("ab".repeat(32));
    }
    let root = tempfile::tempdir().expect("tempdir");
    // The CA is not used: the test hands the job its client.
    let job = AddonJob::new(
        root.path(),
        spec,
        "10.0.1.10",
        "unused",
        "unused",
        Default::default(),
        "ip-10-0-1-10.us-west-2.compute.internal",
    );
    assert_eq!(job.api_server, "https://10.0.1.10:443");

    let (client, shared) = serve(Fake::default()).await;
    let waiting = job
        .apply_once(&client, &release, minor)
        .await
        .expect("no error");
    assert_eq!(
        waiting, None,
        "an API that does not answer /version: keep waiting"
    );

    shared.lock().expect("lock").answers_version = true;
    let missing = job
        .apply_once(&client, &release, minor)
        .await
        .expect_err("no manifest baked");
    assert!(matches!(missing, AddonRunError::Render(_)), "{missing}");
    assert!(
        missing
            .to_string()
            .contains("/etc/ballast/addons/calico.yaml"),
        "{missing}"
    );
    assert!(
        shared.lock().expect("lock").objects.is_empty(),
        "nothing applied"
    );

    let baked = root.path().join("etc/ballast/addons");
    std::fs::create_dir_all(&baked).expect("mkdir");
    std::fs::copy(
        dir.join("addons/cni/calico.yaml"),
        baked.join("calico.yaml"),
    )
    .expect("bake");
    let first = job
        .apply_once(&client, &release, minor)
        .await
        .expect("applies")
        .expect("the API answers");
    assert_eq!(first.state, AddonsState::Applied);
    assert_eq!(first.api_server, "https://10.0.1.10:443");
    assert_eq!(
        first.versions.get("calico").map(String::as_str),
        Some("3.30.2")
    );
    assert_eq!(
        first.versions.get("kube-proxy").map(String::as_str),
        Some("1.33.4")
    );
    assert_eq!(first.applied, first.objects);
    assert_eq!(first.objects, shared.lock().expect("lock").objects.len());
    let second = job
        .apply_once(&client, &release, minor)
        .await
        .expect("applies")
        .expect("the API answers");
    assert_eq!(second.applied, 0, "a second round writes nothing");
    assert_eq!(second.set_sha256, first.set_sha256);
    assert!(second.summary().starts_with(&format!(
        "applied: {} objects (0 written this run)",
        second.objects
    )));
}
