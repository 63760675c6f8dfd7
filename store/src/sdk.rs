//! The one place an AWS SDK configuration is built, for every program and client of Ballast (`ballast`'s
//! `Cloud` and discovery store, the state store's S3 client, nodeup, the etcd supervisor): the standard sources
//! (environment, profile, IMDS) with bounds on every call, so an endpoint that accepts a connection and never
//! answers fails a call within [`OPERATION_TIMEOUT`] instead of hanging it, and the SDK's one retry policy.
//!
//! - [`CONNECT_TIMEOUT`]: a TCP and TLS connection (an address that drops packets).
//! - [`READ_TIMEOUT`]: from sending a request to the first byte of its answer, per attempt (an endpoint that
//!   accepts and stays silent). A large upload is given more ([`upload_timeouts`]).
//! - [`OPERATION_TIMEOUT`]: a whole call, every retry included.
//! - Stalled-stream protection: a request or response body that makes no progress for [`STALL_GRACE`] fails.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::stalled_stream_protection::StalledStreamProtectionConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::SdkConfig;
use aws_sdk_s3::error::SdkError;

/// How long a connection (TCP and TLS) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an attempt may wait for the first byte of the answer, once its request is sent.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a call may take, every attempt included.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(90);
/// How long a body may make no progress.
pub const STALL_GRACE: Duration = Duration::from_secs(20);
/// The slowest upload rate a large body is given time for (1 MiB/s).
const SLOWEST_UPLOAD_BYTES_PER_SEC: u64 = 1024 * 1024;

/// The SDK's own retry, the only retry of throttling and transient failures (5xx, timeouts, connection
/// resets): standard mode (exponential backoff with jitter, a client-side token bucket that stops retrying when
/// most calls fail), 5 attempts per call, pauses of at most 20 s, all within [`OPERATION_TIMEOUT`]. Ballast
/// retries on top of it only what the SDK cannot know is temporary ("not ready yet" answers of eventually
/// consistent APIs).
pub fn retry() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(5)
        .with_max_backoff(Duration::from_secs(20))
}

/// The bounds of every call: [`CONNECT_TIMEOUT`], [`READ_TIMEOUT`], [`OPERATION_TIMEOUT`].
pub fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .operation_timeout(OPERATION_TIMEOUT)
        .build()
}

/// The bounds of an upload of `bytes`: the read timeout counts from the start of the request, so a large body
/// is given the time it takes at the slowest rate allowed, on top of the usual bounds (a stalled upload still
/// fails after [`STALL_GRACE`]).
pub fn upload_timeouts(bytes: usize) -> TimeoutConfig {
    let sending = Duration::from_secs(bytes as u64 / SLOWEST_UPLOAD_BYTES_PER_SEC);
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT + sending)
        .operation_timeout(OPERATION_TIMEOUT + sending * 2)
        .build()
}

/// Whether an upload of `bytes` needs more than [`timeouts`].
pub fn upload_needs_more_time(bytes: usize) -> bool {
    bytes as u64 / SLOWEST_UPLOAD_BYTES_PER_SEC > 0
}

/// The configuration loader every client starts from: the standard sources, in `region` when given (else the
/// environment's or profile's), with the bounds, stalled-stream protection and the retry policy above.
pub fn loader(region: Option<&str>) -> aws_config::ConfigLoader {
    let mut loader = aws_config::from_env()
        .timeout_config(timeouts())
        .stalled_stream_protection(
            StalledStreamProtectionConfig::enabled()
                .grace_period(STALL_GRACE)
                .build(),
        )
        .retry_config(retry());
    if let Some(region) = region {
        loader = loader.region(aws_config::Region::new(region.to_owned()));
    }
    loader
}

/// [`loader`], loaded.
pub async fn load(region: Option<&str>) -> SdkConfig {
    loader(region).load().await
}

/// The endpoint a client of `config` calls, for an error to name: the custom one (`AWS_ENDPOINT_URL`, a
/// profile's `endpoint_url`), or AWS's own in the region.
pub fn endpoint_of(config: &SdkConfig, service: &str) -> String {
    match (config.endpoint_url(), config.region()) {
        (Some(url), _) => url.to_string(),
        (None, Some(region)) => format!("https://{service}.{region}.amazonaws.com"),
        (None, None) => format!("AWS's {service} endpoint (no region set)"),
    }
}

/// What went wrong with a call AWS did not answer (a timeout, no connection, no credentials, a bad region), in
/// Ballast's words, naming `endpoint` and saying what to do. The SDK's own detail stays in the error (callers
/// keep it as their error's source; `ballast -v` prints it).
pub fn describe_failure<E, R>(err: &SdkError<E, R>, endpoint: &str) -> String
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
{
    let causes = causes(err).to_lowercase();
    let timed_out = matches!(err, SdkError::TimeoutError(_))
        || matches!(err, SdkError::DispatchFailure(f) if f.is_timeout());
    if timed_out {
        return format!(
            "{endpoint} did not answer in time (a connection within {}s, an answer within {}s, the call within {}s): check the network, a proxy or firewall between here and AWS, and AWS_ENDPOINT_URL if one is set",
            CONNECT_TIMEOUT.as_secs(),
            READ_TIMEOUT.as_secs(),
            OPERATION_TIMEOUT.as_secs()
        );
    }
    if causes.contains("region") && (causes.contains("invalid") || causes.contains("not a valid")) {
        return format!(
            "the AWS region is not valid (calling {endpoint}): give a region such as us-east-1 (AWS_REGION, or the cluster's spec.region)"
        );
    }
    if causes.contains("no region") || causes.contains("region must be set") {
        return "no AWS region is set: set AWS_REGION (e.g. us-east-1), or a region in the AWS profile".into();
    }
    if causes.contains("credentials") || causes.contains("identity") {
        return "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where an instance role provides them"
            .into();
    }
    if matches!(err, SdkError::DispatchFailure(f) if f.is_io()) {
        return format!(
            "cannot connect to {endpoint}: check the network, a proxy or firewall between here and AWS, and AWS_ENDPOINT_URL if one is set"
        );
    }
    format!("the call to {endpoint} failed before AWS answered: {}", err)
}

/// The error's causes, each one's own message (not the SDK's Debug text), for [`describe_failure`] to read.
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(err);
    while let Some(e) = next {
        text.push_str(&e.to_string());
        text.push('\n');
        next = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_is_bounded_and_a_large_upload_gets_time_to_send() {
        let t = timeouts();
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        assert_eq!(t.read_timeout(), Some(READ_TIMEOUT));
        assert_eq!(t.operation_timeout(), Some(OPERATION_TIMEOUT));
        assert!(!upload_needs_more_time(64 * 1024));
        let gib = upload_timeouts(1024 * 1024 * 1024);
        assert_eq!(
            gib.read_timeout(),
            Some(READ_TIMEOUT + Duration::from_secs(1024))
        );
        assert!(gib.operation_timeout() > gib.read_timeout());
    }
}
