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

/// A proof with a current date and a made-up signature: what anyone can send, no credentials needed.
fn forged(n: u64, when: SystemTime) -> SignedRequest {
    SignedRequest {
        signature: format!("{n:064x}"),
        signed_at: when,
    }
}

const PEER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 10));

#[test]
fn each_signature_is_used_once_and_a_concurrent_copy_is_refused() {
    let now = at(1_700_000_000);
    let request = check_signed_request(&signed("d", now), "d", REGION, now).expect("ok");
    let mut guard = ReplayGuard::default();
    assert_eq!(guard.begin(&request, PEER), Ok(()));
    // A copy sent while STS checks the first: refused, from any address.
    let elsewhere = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 11));
    assert_eq!(guard.begin(&request, elsewhere), Err(NotAdmitted::Replayed));
    assert_eq!(guard.record(&request, now), Ok(()));
    assert_eq!(guard.begin(&request, PEER), Err(NotAdmitted::Replayed));
    let other = check_signed_request(&signed("e", now), "e", REGION, now).expect("ok");
    assert_eq!(guard.begin(&other, PEER), Ok(()));
    assert_eq!(guard.sizes(), (1, 1));
}

/// Issue 28, medium 5: 100,000 forged proofs with a current date filled the guard (it remembered each before STS
/// was asked), and every real worker was refused for 15 minutes. Now a proof STS refused is forgotten.
#[test]
fn forged_proofs_that_sts_refused_never_fill_the_guard() {
    let now = at(1_700_000_000);
    let mut guard = ReplayGuard::default();
    for n in 0..=(REPLAY_CAPACITY as u64) {
        let proof = forged(n, now);
        assert_eq!(guard.begin(&proof, PEER), Ok(()), "forged proof {n}");
        // STS answered SignatureDoesNotMatch.
        guard.release(&proof.signature);
    }
    assert_eq!(guard.sizes(), (0, 0));
    let genuine = check_signed_request(&signed("d", now), "d", REGION, now).expect("ok");
    assert_eq!(guard.begin(&genuine, PEER), Ok(()));
    assert_eq!(guard.record(&genuine, now), Ok(()));
    assert_eq!(guard.sizes(), (1, 0));
}

#[test]
fn a_full_guard_is_busy_not_a_refusal_and_empties_as_proofs_age() {
    let now = at(1_700_000_000);
    let mut guard = ReplayGuard::default();
    for n in 0..REPLAY_CAPACITY as u64 {
        let proof = forged(n, now);
        guard.begin(&proof, PEER).expect("room");
        guard.record(&proof, now).expect("room");
    }
    let one_more = forged(u64::MAX, now);
    assert_eq!(guard.begin(&one_more, PEER), Ok(()));
    assert_eq!(
        guard.record(&one_more, now),
        Err(GuardBusy::Full {
            window_secs: SIGNATURE_WINDOW.as_secs()
        })
    );
    // Not remembered, not pending: the worker's next proof (a new signature) is the one that counts.
    assert_eq!(guard.sizes(), (REPLAY_CAPACITY, 0));
    // Once the remembered proofs are past twice the window, they are forgotten and there is room again.
    let later = now + SIGNATURE_WINDOW + SIGNATURE_WINDOW + Duration::from_secs(1);
    let fresh = forged(u64::MAX - 1, later);
    assert_eq!(guard.begin(&fresh, PEER), Ok(()));
    assert_eq!(guard.record(&fresh, later), Ok(()));
    assert_eq!(guard.sizes(), (1, 0));
}

#[test]
fn one_address_may_have_only_so_many_proofs_checked_at_once() {
    let now = at(1_700_000_000);
    let mut guard = ReplayGuard::default();
    for n in 0..MAX_PENDING_PER_PEER as u64 {
        assert_eq!(guard.begin(&forged(n, now), PEER), Ok(()));
    }
    let next = forged(1_000, now);
    assert_eq!(
        guard.begin(&next, PEER),
        Err(NotAdmitted::Busy(GuardBusy::PeerBusy))
    );
    let elsewhere = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 11));
    assert_eq!(guard.begin(&forged(2_000, now), elsewhere), Ok(()));
    guard.release(&forged(0, now).signature);
    assert_eq!(guard.begin(&next, PEER), Ok(()));
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
        private_ip: "10.0.1.10".into(),
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
            private_ip: "10.0.1.10".parse().expect("an IP"),
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
        (
            "no private IP",
            caller(&role, "i-0abc"),
            Box::new(|i| i.private_ip.clear()),
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
