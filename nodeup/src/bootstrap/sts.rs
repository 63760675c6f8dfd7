//! The STS side of a node's identity proof, pure: the endpoint both sides use, signing an
//! `sts:GetCallerIdentity` request on the worker (SigV4 headers, with the request digest among the signed
//! headers), reading STS's answer, and parsing the assumed-role ARN it names.
//!
//! The signature is in headers (as kops's first token format) rather than a presigned URL: the local cloud's
//! pinned moto verifies SigV4 headers under IAM enforcement, and does not understand query-string signatures
//! (it reads only the `Authorization` header). The service never takes a URL or body from the worker: it sends
//! the fixed body to its own STS endpoint, so the worker can only prove, never redirect.

use std::collections::BTreeMap;
use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;

use super::wire::REQUEST_DIGEST_HEADER;

/// The one STS request a proof may be: GetCallerIdentity, form-encoded.
pub const GET_CALLER_IDENTITY_BODY: &str = "Action=GetCallerIdentity&Version=2011-06-15";
/// Its content type, signed.
pub const FORM_CONTENT_TYPE: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// The STS endpoint of a region: the SDK's endpoint override when set (`AWS_ENDPOINT_URL_STS`, then
/// `AWS_ENDPOINT_URL`: the local cloud), else the regional endpoint. Worker and service compute it the same way,
/// so the host the worker signs is the host the service sends to.
pub fn sts_endpoint(region: &str, env: impl Fn(&str) -> Option<String>) -> String {
    ["AWS_ENDPOINT_URL_STS", "AWS_ENDPOINT_URL"]
        .into_iter()
        .find_map(|name| env(name).filter(|v| !v.trim().is_empty()))
        .map(|url| url.trim().trim_end_matches('/').to_string())
        .unwrap_or_else(|| format!("https://sts.{region}.amazonaws.com"))
}

/// Signing failed (the endpoint is not a URL, or the signer refused).
#[derive(Debug, thiserror::Error)]
#[error("signing the sts:GetCallerIdentity request for {endpoint}: {message}")]
pub struct SignStsError {
    pub endpoint: String,
    pub message: String,
}

/// The headers of a GetCallerIdentity request to `endpoint`, signed at `now` with `credentials` (the instance
/// role's), carrying `digest` as a signed header. Returned: content type, digest, `x-amz-date`,
/// `x-amz-security-token` and `authorization`; the secret key is in none of them.
pub fn sign_get_caller_identity(
    credentials: &Credentials,
    region: &str,
    endpoint: &str,
    digest: &str,
    now: SystemTime,
) -> Result<BTreeMap<String, String>, SignStsError> {
    let fail = |message: String| SignStsError {
        endpoint: endpoint.to_string(),
        message,
    };
    let url = format!("{endpoint}/");
    let mut headers = BTreeMap::from([
        ("content-type".to_string(), FORM_CONTENT_TYPE.to_string()),
        (REQUEST_DIGEST_HEADER.to_string(), digest.to_string()),
    ]);
    let identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("sts")
        .time(now)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| fail(e.to_string()))?
        .into();
    let signable = SignableRequest::new(
        "POST",
        &url,
        headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        SignableBody::Bytes(GET_CALLER_IDENTITY_BODY.as_bytes()),
    )
    .map_err(|e| fail(e.to_string()))?;
    let (instructions, _signature) = sign(signable, &params)
        .map_err(|e| fail(e.to_string()))?
        .into_parts();
    for (name, value) in instructions.headers() {
        headers.insert(name.to_ascii_lowercase(), value.to_string());
    }
    Ok(headers)
}

/// What STS said about the signer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallerIdentity {
    pub arn: String,
    pub account: String,
}

/// STS's answer is not a GetCallerIdentity result.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("STS's answer has no {0} (not a GetCallerIdentity result)")]
pub struct BadStsAnswer(pub &'static str);

/// `<GetCallerIdentityResponse>`, as STS answers it (elements read by their local names, so a namespace prefix or
/// the default `xmlns` changes nothing; elements it does not know are skipped).
#[derive(Debug, serde::Deserialize)]
struct GetCallerIdentityResponse {
    #[serde(rename = "GetCallerIdentityResult")]
    result: Option<GetCallerIdentityResult>,
}

#[derive(Debug, serde::Deserialize)]
struct GetCallerIdentityResult {
    #[serde(rename = "Arn")]
    arn: Option<String>,
    #[serde(rename = "Account")]
    account: Option<String>,
}

/// `<ErrorResponse><Error><Code>`: an AWS query API's error body.
#[derive(Debug, serde::Deserialize)]
struct ErrorResponse {
    #[serde(rename = "Error")]
    error: Option<ErrorBody>,
}

#[derive(Debug, serde::Deserialize)]
struct ErrorBody {
    #[serde(rename = "Code")]
    code: Option<String>,
}

/// Reads `<Arn>` and `<Account>` of a GetCallerIdentity response with an XML parser (entities decoded); an answer
/// that is no XML, or lacks either value, is refused naming the first thing missing.
pub fn parse_caller_identity(xml: &str) -> Result<CallerIdentity, BadStsAnswer> {
    let response: GetCallerIdentityResponse =
        quick_xml::de::from_str(xml).map_err(|_| BadStsAnswer("GetCallerIdentityResult"))?;
    let result = response
        .result
        .ok_or(BadStsAnswer("GetCallerIdentityResult"))?;
    let present = |value: Option<String>, name: &'static str| {
        value
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .ok_or(BadStsAnswer(name))
    };
    Ok(CallerIdentity {
        arn: present(result.arn, "Arn")?,
        account: present(result.account, "Account")?,
    })
}

/// STS error codes that say "not now" rather than "no": throttling and STS's own failures. AWS's throttling
/// codes vary by service and SDK generation, so every one the SDKs retry is here.
const STS_RETRYABLE_CODES: [&str; 9] = [
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "InternalFailure",
    "RequestTimeout",
];

/// Whether STS's non-success answer (`status`, and the `<Code>` of its error body) is worth asking again later
/// (the service answers 503 and the worker retries) rather than a verdict on the proof (403, final): any 5xx,
/// 429, and throttling answered with a 400 as STS does (`Throttling`).
pub fn sts_error_is_retryable(status: u16, code: &str) -> bool {
    status >= 500 || status == 429 || STS_RETRYABLE_CODES.contains(&code)
}

/// The `<Code>` of an AWS XML error body (`<ErrorResponse><Error><Code>`), or "" when the body is no such XML.
pub fn error_code(xml: &str) -> String {
    quick_xml::de::from_str::<ErrorResponse>(xml)
        .ok()
        .and_then(|r| r.error)
        .and_then(|e| e.code)
        .map(|code| code.trim().to_string())
        .unwrap_or_default()
}

/// `arn:<partition>:sts::<account>:assumed-role/<role>/<session>`: who signed, as an EC2 instance role's
/// credentials name it (the session is the instance id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumedRole {
    pub partition: String,
    pub account: String,
    pub role: String,
    pub session: String,
}

/// An ARN that is not an assumed role's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{arn:?} is not an assumed role's ARN (arn:PARTITION:sts::ACCOUNT:assumed-role/ROLE/SESSION): {problem}")]
pub struct NotAssumedRole {
    pub arn: String,
    pub problem: &'static str,
}

impl AssumedRole {
    pub fn parse(arn: &str) -> Result<Self, NotAssumedRole> {
        let bad = |problem| NotAssumedRole {
            arn: arn.to_string(),
            problem,
        };
        let parts: Vec<&str> = arn.splitn(6, ':').collect();
        let [prefix, partition, service, region, account, resource] = parts[..] else {
            return Err(bad("not six ':'-separated parts"));
        };
        if prefix != "arn" || partition.is_empty() {
            return Err(bad("no arn:PARTITION prefix"));
        }
        if service != "sts" || !region.is_empty() {
            return Err(bad("not a global sts ARN"));
        }
        if account.len() != 12 || !account.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the account is not 12 digits"));
        }
        let mut path = resource.split('/');
        let (Some("assumed-role"), Some(role), Some(session), None) =
            (path.next(), path.next(), path.next(), path.next())
        else {
            return Err(bad("not assumed-role/ROLE/SESSION"));
        };
        if role.is_empty() || session.is_empty() {
            return Err(bad("an empty role or session name"));
        }
        Ok(AssumedRole {
            partition: partition.to_string(),
            account: account.to_string(),
            role: role.to_string(),
            session: session.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28, medium 5: STS throttling was answered as a final refusal, so a worker booting during a burst
    /// failed for good.
    #[test]
    fn throttling_and_sts_failures_are_retryable_and_a_bad_signature_is_not() {
        let throttled = "<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>\
                         <Message>Rate exceeded</Message></Error></ErrorResponse>";
        assert_eq!(error_code(throttled), "Throttling");
        assert!(sts_error_is_retryable(400, &error_code(throttled)));
        assert!(sts_error_is_retryable(429, ""));
        assert!(sts_error_is_retryable(500, "InternalFailure"));
        assert!(sts_error_is_retryable(503, ""));
        for final_code in [
            "SignatureDoesNotMatch",
            "InvalidClientTokenId",
            "ExpiredToken",
            "AccessDenied",
            "",
        ] {
            assert!(!sts_error_is_retryable(403, final_code), "{final_code}");
            assert!(!sts_error_is_retryable(400, final_code), "{final_code}");
        }
        assert_eq!(error_code("not xml"), "");
        assert_eq!(
            error_code("<ErrorResponse><Error></Error></ErrorResponse>"),
            ""
        );
        assert_eq!(error_code(""), "");
    }

    #[test]
    fn error_answers_are_read_with_their_namespace_and_request_id() {
        let sts = r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <Error>
                <Type>Sender</Type>
                <Code>SignatureDoesNotMatch</Code>
                <Message>The request signature we calculated does not match &amp; so on</Message>
              </Error>
              <RequestId>5f1e4c3a-0000-4000-8000-000000000000</RequestId>
            </ErrorResponse>"#;
        assert_eq!(error_code(sts), "SignatureDoesNotMatch");
        assert_eq!(
            parse_caller_identity(sts),
            Err(BadStsAnswer("GetCallerIdentityResult"))
        );
        // A <Code> elsewhere than in <Error> is not the error's code.
        assert_eq!(
            error_code("<ErrorResponse><Code>Throttling</Code></ErrorResponse>"),
            ""
        );
    }

    #[test]
    fn the_endpoint_is_the_override_or_the_regional_one() {
        let none = |_: &str| None;
        assert_eq!(
            sts_endpoint("us-west-2", none),
            "https://sts.us-west-2.amazonaws.com"
        );
        let local =
            |n: &str| (n == "AWS_ENDPOINT_URL").then(|| "http://127.0.0.1:5000/".to_string());
        assert_eq!(sts_endpoint("us-west-2", local), "http://127.0.0.1:5000");
        let both = |n: &str| Some(format!("http://{n}"));
        assert_eq!(sts_endpoint("x", both), "http://AWS_ENDPOINT_URL_STS");
    }

    #[test]
    fn a_signed_request_carries_the_digest_and_the_token_but_not_the_secret() {
        let creds = Credentials::new(
            "ASIAEXAMPLE",
            "s3cr3t-key",
            Some("session-token".into()),
            None,
            "t",
        );
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let headers =
            sign_get_caller_identity(&creds, "us-west-2", "http://127.0.0.1:5000", "abc123", now)
                .expect("signs");
        assert_eq!(headers[REQUEST_DIGEST_HEADER], "abc123");
        assert_eq!(headers["x-amz-date"], "20231114T221320Z");
        assert_eq!(headers["x-amz-security-token"], "session-token");
        let auth = &headers["authorization"];
        assert!(
            auth.starts_with(
                "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLE/20231114/us-west-2/sts/aws4_request"
            ),
            "{auth}"
        );
        assert!(auth.contains(REQUEST_DIGEST_HEADER), "{auth}");
        assert!(auth.contains("host"), "{auth}");
        assert!(headers.values().all(|v| !v.contains("s3cr3t")));
    }

    #[test]
    fn sts_answers_are_read_or_refused() {
        let xml = "<GetCallerIdentityResponse><GetCallerIdentityResult>\
            <Arn>arn:aws:sts::123456789012:assumed-role/nodes.c1/i-0abc</Arn><UserId>AROA:i-0abc</UserId>\
            <Account>123456789012</Account></GetCallerIdentityResult></GetCallerIdentityResponse>";
        assert_eq!(
            parse_caller_identity(xml),
            Ok(CallerIdentity {
                arn: "arn:aws:sts::123456789012:assumed-role/nodes.c1/i-0abc".into(),
                account: "123456789012".into()
            })
        );
        assert_eq!(
            parse_caller_identity(
                "<ErrorResponse><Error><Code>SignatureDoesNotMatch</Code></Error></ErrorResponse>"
            ),
            Err(BadStsAnswer("GetCallerIdentityResult"))
        );
        assert_eq!(
            parse_caller_identity(
                "<GetCallerIdentityResponse><GetCallerIdentityResult><Arn></Arn>\
                 </GetCallerIdentityResult></GetCallerIdentityResponse>"
            ),
            Err(BadStsAnswer("Arn"))
        );
        assert_eq!(
            parse_caller_identity(
                "<GetCallerIdentityResponse><GetCallerIdentityResult><Arn>arn:aws:sts::1:x</Arn>\
                 </GetCallerIdentityResult></GetCallerIdentityResponse>"
            ),
            Err(BadStsAnswer("Account"))
        );
        for not_xml in ["", "not xml", "<GetCallerIdentityResponse>", "<a></b>"] {
            assert_eq!(
                parse_caller_identity(not_xml),
                Err(BadStsAnswer("GetCallerIdentityResult")),
                "{not_xml:?}"
            );
        }
    }

    #[test]
    fn sts_answers_are_read_whatever_their_namespace_and_with_entities_decoded() {
        // As STS writes it: a default namespace, the metadata after the result, whitespace between elements.
        let sts = r#"<?xml version="1.0" encoding="UTF-8"?>
            <GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
              <GetCallerIdentityResult>
                <Arn>arn:aws:sts::123456789012:assumed-role/nodes.c1/i-0abc</Arn>
                <UserId>AROAEXAMPLE:i-0abc</UserId>
                <Account>123456789012</Account>
              </GetCallerIdentityResult>
              <ResponseMetadata><RequestId>01234567-89ab-4def-8123-456789abcdef</RequestId></ResponseMetadata>
            </GetCallerIdentityResponse>"#;
        let expected = CallerIdentity {
            arn: "arn:aws:sts::123456789012:assumed-role/nodes.c1/i-0abc".into(),
            account: "123456789012".into(),
        };
        assert_eq!(parse_caller_identity(sts), Ok(expected.clone()));
        // The same with a namespace prefix on every element.
        let prefixed = r#"<sts:GetCallerIdentityResponse xmlns:sts="https://sts.amazonaws.com/doc/2011-06-15/">
            <sts:GetCallerIdentityResult>
              <sts:Arn>arn:aws:sts::123456789012:assumed-role/nodes.c1/i-0abc</sts:Arn>
              <sts:Account>123456789012</sts:Account>
            </sts:GetCallerIdentityResult></sts:GetCallerIdentityResponse>"#;
        assert_eq!(parse_caller_identity(prefixed), Ok(expected));
        // Entities and character references are decoded, as any XML reader must.
        let escaped = "<GetCallerIdentityResponse><GetCallerIdentityResult>\
            <Arn>arn:aws:sts::123456789012:assumed-role/a&amp;b/i-&#x30;abc</Arn>\
            <Account>&#49;23456789012</Account></GetCallerIdentityResult></GetCallerIdentityResponse>";
        assert_eq!(
            parse_caller_identity(escaped),
            Ok(CallerIdentity {
                arn: "arn:aws:sts::123456789012:assumed-role/a&b/i-0abc".into(),
                account: "123456789012".into(),
            })
        );
    }

    #[test]
    fn assumed_role_arns_parse_and_others_are_refused() {
        assert_eq!(
            AssumedRole::parse(
                "arn:aws:sts::123456789012:assumed-role/nodes.c1.example.com/i-0abc"
            ),
            Ok(AssumedRole {
                partition: "aws".into(),
                account: "123456789012".into(),
                role: "nodes.c1.example.com".into(),
                session: "i-0abc".into(),
            })
        );
        for (arn, problem) in [
            (
                "arn:aws:iam::123456789012:user/admin",
                "not a global sts ARN",
            ),
            (
                "arn:aws:sts::123456789012:user/moto",
                "not assumed-role/ROLE/SESSION",
            ),
            (
                "arn:aws:sts::123456789012:assumed-role/r",
                "not assumed-role/ROLE/SESSION",
            ),
            (
                "arn:aws:sts::123456789012:assumed-role/r/s/t",
                "not assumed-role/ROLE/SESSION",
            ),
            (
                "arn:aws:sts::12345:assumed-role/r/s",
                "the account is not 12 digits",
            ),
            (
                "arn:aws:sts::123456789012:assumed-role//s",
                "an empty role or session name",
            ),
            ("nonsense", "not six ':'-separated parts"),
        ] {
            assert_eq!(
                AssumedRole::parse(arn).map_err(|e| e.problem),
                Err(problem),
                "{arn}"
            );
        }
    }
}
