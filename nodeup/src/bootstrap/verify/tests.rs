use super::*;
use crate::bootstrap::sts::sign_get_caller_identity;
use aws_credential_types::Credentials;

/// A change to a signed request's headers that must be refused.
type HeaderMutation = Box<dyn Fn(&mut BTreeMap<String, String>)>;
/// A change to what EC2 and IAM say of the instance that must be refused.
type FactsMutation = Box<dyn Fn(&mut InstanceFacts)>;

const CLUSTER: &str = "c1.example.com";
const REGION: &str = "us-west-2";

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn signed(digest: &str, when: SystemTime) -> BTreeMap<String, String> {
    let creds = Credentials::new("ASIAKEY", "secret", Some("token".into()), None, "t");
    sign_get_caller_identity(&creds, REGION, "http://127.0.0.1:5000", digest, when).expect("signs")
}

#[test]
fn a_fresh_request_for_this_digest_passes() {
    let now = at(1_700_000_000);
    let headers = signed("d1", now);
    let checked = check_signed_request(&headers, "d1", REGION, now + Duration::from_secs(30))
        .expect("accepted");
    assert_eq!(checked.signed_at, now);
    assert_eq!(checked.signature.len(), 64);
}

#[test]
fn another_digest_is_refused() {
    let now = at(1_700_000_000);
    let headers = signed("d1", now);
    assert_eq!(
        check_signed_request(&headers, "d2", REGION, now),
        Err(Refused::DigestMismatch)
    );
}

#[test]
fn old_or_future_signatures_are_refused() {
    let now = at(1_700_000_000);
    let headers = signed("d", now);
    for later in [
        now + SIGNATURE_WINDOW + Duration::from_secs(1),
        now - SIGNATURE_WINDOW - Duration::from_secs(1),
    ] {
        assert!(
            matches!(
                check_signed_request(&headers, "d", REGION, later),
                Err(Refused::Stale { .. })
            ),
            "{later:?}"
        );
    }
    assert!(check_signed_request(&headers, "d", REGION, now + SIGNATURE_WINDOW).is_ok());
}

#[test]
fn malformed_signatures_are_refused_before_sts_is_asked() {
    let now = at(1_700_000_000);
    let good = signed("d", now);
    let mutate = |f: &dyn Fn(&mut BTreeMap<String, String>)| {
        let mut h = good.clone();
        f(&mut h);
        check_signed_request(&h, "d", REGION, now)
    };
    let cases: Vec<(&str, HeaderMutation)> = vec![
        (
            "extra header",
            Box::new(|h| {
                h.insert("x-forwarded-host".into(), "evil".into());
            }),
        ),
        (
            "no token",
            Box::new(|h| {
                h.remove("x-amz-security-token");
            }),
        ),
        (
            "no authorization",
            Box::new(|h| {
                h.remove("authorization");
            }),
        ),
        (
            "other algorithm",
            Box::new(|h| {
                let a = h["authorization"].replace("AWS4-HMAC-SHA256", "AWS4-ECDSA-P256-SHA256");
                h.insert("authorization".into(), a);
            }),
        ),
        (
            "digest not signed",
            Box::new(|h| {
                let a = h["authorization"].replace(";x-ballast-request-sha256", "");
                h.insert("authorization".into(), a);
            }),
        ),
        (
            "other service",
            Box::new(|h| {
                let a = h["authorization"].replace("/sts/", "/s3/");
                h.insert("authorization".into(), a);
            }),
        ),
        (
            "other region",
            Box::new(|h| {
                let a = h["authorization"].replace("/us-west-2/", "/us-east-1/");
                h.insert("authorization".into(), a);
            }),
        ),
        (
            "bad date",
            Box::new(|h| {
                h.insert("x-amz-date".into(), "yesterday".into());
            }),
        ),
    ];
    for (what, f) in cases {
        assert!(
            matches!(mutate(&*f), Err(Refused::BadSignature(_))),
            "{what}: {:?}",
            mutate(&*f)
        );
    }
}

#[test]
fn each_signature_is_admitted_once() {
    let now = at(1_700_000_000);
    let request = check_signed_request(&signed("d", now), "d", REGION, now).expect("ok");
    let mut guard = ReplayGuard::default();
    assert_eq!(guard.admit(&request, now), Ok(()));
    assert_eq!(
        guard.admit(&request, now + Duration::from_secs(1)),
        Err(Refused::Replayed)
    );
    let other = check_signed_request(&signed("e", now), "e", REGION, now).expect("ok");
    assert_eq!(guard.admit(&other, now), Ok(()));
}

fn caller(role: &str, session: &str) -> AssumedRole {
    AssumedRole {
        partition: "aws".into(),
        account: "123456789012".into(),
        role: role.into(),
        session: session.into(),
    }
}

fn worker() -> InstanceFacts {
    InstanceFacts {
        instance_id: "i-0abc".into(),
        state: "running".into(),
        private_dns_name: "ip-10-0-1-10.us-west-2.compute.internal".into(),
        tags: BTreeMap::from([
            (CLUSTER_TAG.to_string(), CLUSTER.to_string()),
            (ROLE_TAG.to_string(), "node".to_string()),
            (GROUP_TAG.to_string(), "nodes".to_string()),
        ]),
        profile_roles: vec![format!("arn:aws:iam::123456789012:role/nodes.{CLUSTER}")],
    }
}

const NAME: &str = "ip-10-0-1-10.us-west-2.compute.internal";

#[test]
fn a_running_worker_of_this_cluster_gets_its_own_name() {
    let grant = decide(
        CLUSTER,
        &caller(&format!("nodes.{CLUSTER}"), "i-0abc"),
        &worker(),
        NAME,
    )
    .expect("granted");
    assert_eq!(
        grant,
        Grant {
            node_name: NAME.into(),
            instance_id: "i-0abc".into(),
            instance_group: "nodes".into(),
        }
    );
}

#[test]
fn another_name_is_refused() {
    let refused = decide(
        CLUSTER,
        &caller(&format!("nodes.{CLUSTER}"), "i-0abc"),
        &worker(),
        "ip-10-0-1-4.us-west-2.compute.internal",
    );
    assert!(
        matches!(refused, Err(Refused::WrongName { .. })),
        "{refused:?}"
    );
}

#[test]
fn every_instance_check_refuses_on_its_own() {
    let role = format!("nodes.{CLUSTER}");
    let cases: Vec<(&str, AssumedRole, FactsMutation)> = vec![
        (
            "session of another instance",
            caller(&role, "i-0other"),
            Box::new(|_| {}),
        ),
        (
            "stopped",
            caller(&role, "i-0abc"),
            Box::new(|i| i.state = "stopped".into()),
        ),
        (
            "other cluster",
            caller(&role, "i-0abc"),
            Box::new(|i| {
                i.tags
                    .insert(CLUSTER_TAG.into(), "other.example.com".into());
            }),
        ),
        (
            "untagged",
            caller(&role, "i-0abc"),
            Box::new(|i| i.tags.clear()),
        ),
        (
            "control plane",
            caller(&role, "i-0abc"),
            Box::new(|i| {
                i.tags.insert(ROLE_TAG.into(), "control-plane".into());
            }),
        ),
        (
            "no group",
            caller(&role, "i-0abc"),
            Box::new(|i| {
                i.tags.remove(GROUP_TAG);
            }),
        ),
        (
            "the control plane's role",
            caller(&format!("control-plane.{CLUSTER}"), "i-0abc"),
            Box::new(|_| {}),
        ),
        (
            "another account",
            caller(&role, "i-0abc"),
            Box::new(|i| {
                i.profile_roles = vec![format!("arn:aws:iam::999999999999:role/{CLUSTER}")];
            }),
        ),
        (
            "no profile",
            caller(&role, "i-0abc"),
            Box::new(|i| i.profile_roles.clear()),
        ),
        (
            "no DNS name",
            caller(&role, "i-0abc"),
            Box::new(|i| i.private_dns_name.clear()),
        ),
    ];
    for (what, who, change) in cases {
        let mut instance = worker();
        change(&mut instance);
        let refused = decide(CLUSTER, &who, &instance, NAME);
        assert!(
            matches!(refused, Err(Refused::Instance { .. })),
            "{what}: {refused:?}"
        );
    }
}

#[test]
fn a_profile_role_with_a_path_matches_by_name() {
    let mut instance = worker();
    instance.profile_roles = vec!["arn:aws:iam::123456789012:role/shared/team-nodes".into()];
    assert!(decide(CLUSTER, &caller("team-nodes", "i-0abc"), &instance, NAME).is_ok());
}
