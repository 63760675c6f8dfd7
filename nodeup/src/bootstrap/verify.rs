//! The bootstrap service's decisions, pure: is a worker's signed STS request acceptable to replay (shape,
//! digest, age, first use), and, once STS and EC2 have answered, may this caller have a certificate for this
//! node name. Every "no" is a [`Refused`] whose message is logged on the control-plane node (never sent to the
//! caller: the service answers every refusal alike, see [`super::server`]), and names no secret.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use super::sts::AssumedRole;
use super::wire::REQUEST_DIGEST_HEADER;

/// How far a signed request's `x-amz-date` may be from the service's clock, either way. STS itself accepts 15
/// minutes; a worker signs right before sending, so a short window keeps a captured request useful for little.
pub const SIGNATURE_WINDOW: Duration = Duration::from_secs(5 * 60);
/// Used signatures remembered at once (each for [`SIGNATURE_WINDOW`] past its date): far more than any boot
/// storm. Only proofs STS accepted are remembered, so filling it takes that many genuine proofs (real instance-role
/// credentials, each one an STS call), never forged ones; when it is full the answer is a retryable 503.
pub const REPLAY_CAPACITY: usize = 100_000;
/// Proofs being checked by STS at once from one address. Threat: one caller keeping the service's STS calls (and
/// the pending set) busy. A connection carries one request, so the service's per-address connection cap bounds
/// this too; this bound keeps the guard's memory bounded on its own.
pub const MAX_PENDING_PER_PEER: usize = 32;

/// The only headers a proof may carry; the service sends exactly these (and `host`, from its own endpoint).
const ALLOWED_HEADERS: [&str; 5] = [
    "authorization",
    "content-type",
    "x-amz-date",
    "x-amz-security-token",
    REQUEST_DIGEST_HEADER,
];
/// What the signature must cover: the host (so it cannot be sent elsewhere), the date (so it ages), the session
/// token (instance-role credentials) and the digest (so it proves this very request).
const REQUIRED_SIGNED: [&str; 4] = [
    "host",
    "x-amz-date",
    "x-amz-security-token",
    REQUEST_DIGEST_HEADER,
];

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The request itself is malformed (JSON, CSR, headers).
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The signed headers are not a SigV4 STS signature of the required headers.
    #[error("the STS signature is not acceptable: {0}")]
    BadSignature(String),
    /// The signed digest is not this request's: the proof was made for another CSR or node name.
    #[error("the signed request digest does not match this request (the proof was made for another request)")]
    DigestMismatch,
    /// The signature's date is outside the window.
    #[error("the signed request is dated {signed_at}, more than {window_secs}s from the service's clock")]
    Stale { signed_at: String, window_secs: u64 },
    /// The signature was seen before, or is being checked right now for another request.
    #[error("the signed request was already used (replay)")]
    Replayed,
    /// STS did not accept the signature, or named no assumed role.
    #[error("STS did not confirm the caller: {0}")]
    NotConfirmed(String),
    /// EC2 does not show the instance, or it is not an acceptable worker.
    #[error("instance {instance_id}: {problem}")]
    Instance {
        instance_id: String,
        problem: String,
    },
    /// The worker asked for a name that is not its own.
    #[error("instance {instance_id} asked for node name {requested:?}, but its private DNS name is {actual:?}")]
    WrongName {
        instance_id: String,
        requested: String,
        actual: String,
    },
}

/// What the signed headers say, once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest {
    /// The SigV4 signature (hex): the replay key. Logged never.
    pub signature: String,
    pub signed_at: SystemTime,
}

/// Checks a proof before anything is sent to STS: only allowed headers, a SigV4 signature scoped to STS in
/// `region` that covers the required headers, the digest of this request, and a date within the window.
pub fn check_signed_request(
    headers: &BTreeMap<String, String>,
    digest: &str,
    region: &str,
    now: SystemTime,
) -> Result<SignedRequest, Refused> {
    let bad = |m: &str| Refused::BadSignature(m.to_string());
    if let Some(other) = headers
        .keys()
        .find(|k| !ALLOWED_HEADERS.contains(&k.as_str()))
    {
        return Err(bad(&format!("unexpected header {other:?}")));
    }
    let get = |name: &str| {
        headers
            .get(name)
            .map(String::as_str)
            .ok_or_else(|| bad(&format!("no {name} header")))
    };
    let authorization = get("authorization")?;
    let fields = authorization
        .strip_prefix("AWS4-HMAC-SHA256 ")
        .ok_or_else(|| bad("not an AWS4-HMAC-SHA256 authorization"))?;
    let mut credential = None;
    let mut signed_headers = None;
    let mut signature = None;
    for field in fields.split(',').map(str::trim) {
        match field.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {
                return Err(bad(
                    "an authorization field that is not Credential, SignedHeaders or Signature",
                ))
            }
        }
    }
    let (Some(credential), Some(signed_headers), Some(signature)) =
        (credential, signed_headers, signature)
    else {
        return Err(bad(
            "authorization lacks Credential, SignedHeaders or Signature",
        ));
    };
    if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad("the signature is not 64 hex digits"));
    }
    let scope: Vec<&str> = credential.split('/').collect();
    let date = get("x-amz-date")?;
    match scope[..] {
        [_key, day, r, "sts", "aws4_request"] if r == region && date.starts_with(day) => {}
        _ => {
            return Err(bad(&format!(
                "the credential scope is not DAY/{region}/sts/aws4_request of the request's date"
            )))
        }
    }
    let signed: Vec<&str> = signed_headers.split(';').collect();
    if let Some(missing) = REQUIRED_SIGNED.iter().find(|h| !signed.contains(h)) {
        return Err(bad(&format!("{missing} is not signed")));
    }
    if get(REQUEST_DIGEST_HEADER)? != digest {
        return Err(Refused::DigestMismatch);
    }
    get("x-amz-security-token")?;
    let signed_at =
        parse_amz_date(date).ok_or_else(|| bad("x-amz-date is not YYYYMMDDTHHMMSSZ"))?;
    let skew = now
        .duration_since(signed_at)
        .unwrap_or_else(|e| e.duration());
    if skew > SIGNATURE_WINDOW {
        return Err(Refused::Stale {
            signed_at: date.to_string(),
            window_secs: SIGNATURE_WINDOW.as_secs(),
        });
    }
    Ok(SignedRequest {
        signature: signature.to_ascii_lowercase(),
        signed_at,
    })
}

/// `20231114T221320Z` as a time.
fn parse_amz_date(text: &str) -> Option<SystemTime> {
    let format = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::PrimitiveDateTime::parse(text, &format)
        .ok()?
        .assume_utc();
    let secs = u64::try_from(t.unix_timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// Why the guard cannot take a proof now: not the caller's fault, answered 503 (the worker tries again with a
/// fresh signature).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardBusy {
    /// [`REPLAY_CAPACITY`] genuine proofs in the window: no room to remember one more.
    #[error("{REPLAY_CAPACITY} proofs were used in the last {window_secs}s: no room to remember another; try again later")]
    Full { window_secs: u64 },
    /// [`MAX_PENDING_PER_PEER`] proofs from this address are being checked already.
    #[error("{MAX_PENDING_PER_PEER} proofs from this address are being checked already; try again later")]
    PeerBusy,
}

/// Why a proof may not go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotAdmitted {
    /// Used before, or being checked now: final.
    Replayed,
    /// Try again later.
    Busy(GuardBusy),
}

/// Remembers the signatures used in the window, so each proof works once, and those being checked now, so two
/// concurrent copies of one proof cannot both pass.
///
/// A proof is only *pending* while STS checks it ([`ReplayGuard::begin`]); it is remembered as *used* only once
/// STS accepted it ([`ReplayGuard::record`]), and forgotten at once when STS did not ([`ReplayGuard::release`]).
/// So forged proofs (a current date and any 64 hex digits: no credentials needed) never fill the guard: issue 28
/// found 100,000 of them locking every worker out for 15 minutes when they were remembered before STS was asked.
#[derive(Debug, Default)]
pub struct ReplayGuard {
    /// Signature -> when it may be forgotten (its date plus twice the window: refused as stale long before).
    used: HashMap<String, SystemTime>,
    /// Signature -> the address checking it now.
    pending: HashMap<String, IpAddr>,
    /// Address -> how many of `pending` are its.
    pending_per_peer: HashMap<IpAddr, usize>,
}

impl ReplayGuard {
    /// Before STS is asked: refuses a signature used before or being checked now, else holds it as pending for
    /// `peer`. Every `begin` that succeeded must end in [`Self::record`] or [`Self::release`].
    pub fn begin(&mut self, request: &SignedRequest, peer: IpAddr) -> Result<(), NotAdmitted> {
        if self.used.contains_key(&request.signature)
            || self.pending.contains_key(&request.signature)
        {
            return Err(NotAdmitted::Replayed);
        }
        let count = self.pending_per_peer.entry(peer).or_default();
        if *count >= MAX_PENDING_PER_PEER {
            return Err(NotAdmitted::Busy(GuardBusy::PeerBusy));
        }
        *count += 1;
        self.pending.insert(request.signature.clone(), peer);
        Ok(())
    }

    /// STS accepted the proof: it is used now, refused ever after (within the window). When [`REPLAY_CAPACITY`]
    /// proofs are remembered already (after forgetting the expired), it cannot be remembered, so it is not
    /// accepted either: [`GuardBusy::Full`], and the worker tries again with a new signature.
    pub fn record(&mut self, request: &SignedRequest, now: SystemTime) -> Result<(), GuardBusy> {
        self.release(&request.signature);
        if self.used.len() >= REPLAY_CAPACITY {
            self.used.retain(|_, forget_at| *forget_at > now);
            if self.used.len() >= REPLAY_CAPACITY {
                return Err(GuardBusy::Full {
                    window_secs: SIGNATURE_WINDOW.as_secs(),
                });
            }
        }
        let forget_at = request.signed_at + SIGNATURE_WINDOW + SIGNATURE_WINDOW;
        self.used.insert(request.signature.clone(), forget_at);
        Ok(())
    }

    /// STS did not accept the proof, or could not be asked: it was not used, so it is forgotten.
    pub fn release(&mut self, signature: &str) {
        let Some(peer) = self.pending.remove(signature) else {
            return;
        };
        if let Some(count) = self.pending_per_peer.get_mut(&peer) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.pending_per_peer.remove(&peer);
            }
        }
    }

    /// How many proofs are remembered as used, and how many are being checked.
    pub fn sizes(&self) -> (usize, usize) {
        (self.used.len(), self.pending.len())
    }
}

/// What EC2 says about the instance the STS session names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceFacts {
    pub instance_id: String,
    /// EC2's state name (`running`, ...).
    pub state: String,
    pub private_dns_name: String,
    /// The primary private IPv4 address (empty when EC2 gives none).
    pub private_ip: String,
    pub tags: BTreeMap<String, String>,
    /// The role ARNs (`arn:aws:iam::ACCOUNT:role[/path]/NAME`) of the instance's profile, from IAM.
    pub profile_roles: Vec<String>,
}

/// A worker the service will issue a certificate to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The node name (the instance's private DNS name): the certificate is for `system:node:<node_name>`.
    pub node_name: String,
    /// The instance's primary private IP: the kubelet serving certificate's one IP address (the API server dials
    /// kubelets by InternalIP).
    pub private_ip: std::net::IpAddr,
    pub instance_id: String,
    pub instance_group: String,
}

/// The tags Ballast's launch templates put on every instance.
pub const CLUSTER_TAG: &str = "ballast.dev/cluster";
pub const ROLE_TAG: &str = "ballast.dev/role";
pub const GROUP_TAG: &str = "ballast.dev/instance-group";

/// The decision: the caller STS confirmed is the instance its session names, running, tagged with this cluster
/// and a node (not control-plane) group, launched with a profile whose role is the caller's role, in the
/// caller's account; and the name asked for is that instance's private DNS name.
pub fn decide(
    cluster: &str,
    caller: &AssumedRole,
    instance: &InstanceFacts,
    requested_name: &str,
) -> Result<Grant, Refused> {
    let refuse = |problem: String| Refused::Instance {
        instance_id: instance.instance_id.clone(),
        problem,
    };
    if caller.session != instance.instance_id {
        return Err(refuse(format!(
            "the STS session {:?} is not this instance",
            caller.session
        )));
    }
    if instance.state != "running" {
        return Err(refuse(format!("it is {}, not running", instance.state)));
    }
    let tag = |key: &str| instance.tags.get(key).map(String::as_str);
    if tag(CLUSTER_TAG) != Some(cluster) {
        return Err(refuse(format!("it is not tagged {CLUSTER_TAG}={cluster}")));
    }
    if tag(ROLE_TAG) != Some("node") {
        return Err(refuse(format!(
            "its {ROLE_TAG} is {:?}, not node: only workers get certificates here",
            tag(ROLE_TAG).unwrap_or("")
        )));
    }
    let group = tag(GROUP_TAG)
        .filter(|g| !g.is_empty())
        .ok_or_else(|| refuse(format!("it has no {GROUP_TAG} tag")))?;
    let role_matches = instance.profile_roles.iter().any(|arn| {
        arn.split(':').nth(4) == Some(caller.account.as_str())
            && arn.rsplit('/').next() == Some(caller.role.as_str())
            && arn
                .split(':')
                .nth(5)
                .is_some_and(|r| r.starts_with("role/"))
    });
    if !role_matches {
        return Err(refuse(format!(
            "the caller's role {} (account {}) is not the role of its instance profile",
            caller.role, caller.account
        )));
    }
    if instance.private_dns_name.is_empty() {
        return Err(refuse("it has no private DNS name".to_string()));
    }
    let private_ip: std::net::IpAddr = instance.private_ip.parse().map_err(|_| {
        refuse(format!(
            "its private IP {:?} is not an IP address",
            instance.private_ip
        ))
    })?;
    if requested_name != instance.private_dns_name {
        return Err(Refused::WrongName {
            instance_id: instance.instance_id.clone(),
            requested: requested_name.to_string(),
            actual: instance.private_dns_name.clone(),
        });
    }
    Ok(Grant {
        node_name: instance.private_dns_name.clone(),
        private_ip,
        instance_id: instance.instance_id.clone(),
        instance_group: group.to_string(),
    })
}

#[cfg(test)]
mod tests;
