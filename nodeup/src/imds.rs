//! A small IMDSv2 client: the SDK's (token flow, token caching, refresh on 401), with its endpoint from
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT` (the local cloud sets it per instance; on EC2 it is unset and the
//! standard 169.254.169.254 applies), bounded retries inside one overall deadline, and 404 read as "absent".

use std::time::Duration;

use aws_config::imds::client::error::ImdsError as SdkImdsError;
use ballast_common::error_chain;

use crate::retry::{Failure, Policy};

/// The env var that names the IMDS endpoint (read by the SDK too).
pub const ENDPOINT_ENV: &str = "AWS_EC2_METADATA_SERVICE_ENDPOINT";

/// Failures talking to IMDS.
#[derive(Debug, thiserror::Error)]
pub enum ImdsError {
    /// `AWS_EC2_METADATA_SERVICE_ENDPOINT` is not a valid URL.
    #[error("{ENDPOINT_ENV}={endpoint} is not a valid endpoint: {source}")]
    BadEndpoint {
        endpoint: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No answer (connection refused, timeouts, 5xx, token failures) before the deadline.
    #[error("IMDS at {endpoint} did not answer {path} within {timeout:?} ({attempts} attempts); last error: {last}")]
    Unavailable {
        endpoint: String,
        path: String,
        timeout: Duration,
        attempts: u32,
        #[source]
        last: ImdsFailure,
    },
    /// IMDS refused the request (a 4xx other than 404, e.g. 403 for a proxied request).
    #[error("IMDS at {endpoint} refused {path}: HTTP {status}")]
    Refused {
        endpoint: String,
        path: String,
        status: u16,
    },
    /// A required entry is missing (404).
    #[error("IMDS at {endpoint} has no {path} (HTTP 404)")]
    Missing { endpoint: String, path: String },
}

/// Why one request to IMDS failed (the last one, when the retries ran out).
#[derive(Debug, thiserror::Error)]
pub enum ImdsFailure {
    /// IMDS answered with a server error.
    #[error("HTTP {0}")]
    Status(u16),
    /// No answer: connection refused, a timeout, a token failure. The message carries the SDK error's whole chain
    /// (its own text says little: "failed to load IMDS session token").
    #[error("{}", sdk_error_text(.0))]
    Sdk(#[source] Box<SdkImdsError>),
}

fn sdk_error_text(e: &SdkImdsError) -> String {
    error_chain(e)
}

/// An IMDSv2 client with an overall deadline per value.
#[derive(Debug, Clone)]
pub struct Imds {
    client: aws_config::imds::Client,
    endpoint: String,
    timeout: Duration,
}

impl Imds {
    /// A client for `endpoint` (else the SDK's default, 169.254.169.254); each value may take up to
    /// `timeout` of retries.
    pub fn new(endpoint: Option<&str>, timeout: Duration) -> Result<Self, ImdsError> {
        // Short per-attempt limits: retries happen in `get_optional`, under the overall deadline.
        let mut builder = aws_config::imds::Client::builder()
            .max_attempts(1)
            .connect_timeout(Duration::from_secs(1))
            .read_timeout(Duration::from_secs(2));
        let shown = endpoint.unwrap_or("http://169.254.169.254").to_owned();
        if let Some(endpoint) = endpoint {
            builder = builder
                .endpoint(endpoint)
                .map_err(|source| ImdsError::BadEndpoint {
                    endpoint: endpoint.to_owned(),
                    source,
                })?;
        }
        Ok(Imds {
            client: builder.build(),
            endpoint: shown,
            timeout,
        })
    }

    /// A client for the endpoint in `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn from_env(timeout: Duration) -> Result<Self, ImdsError> {
        let endpoint = std::env::var(ENDPOINT_ENV).ok().filter(|v| !v.is_empty());
        Imds::new(endpoint.as_deref(), timeout)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A value that must exist.
    pub async fn get(&self, path: &str) -> Result<String, ImdsError> {
        self.get_optional(path)
            .await?
            .ok_or_else(|| ImdsError::Missing {
                endpoint: self.endpoint.clone(),
                path: path.to_owned(),
            })
    }

    /// A value, or `None` when IMDS answers 404. Connection failures, timeouts and 5xx are retried with a
    /// growing backoff (an instance's IMDS may come up a moment after the instance's processes) until the
    /// deadline.
    pub async fn get_optional(&self, path: &str) -> Result<Option<String>, ImdsError> {
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let policy = Policy {
            deadline: self.timeout,
            ..crate::retry::IMDS
        };
        let (this, tries) = (self, &attempts);
        let result = policy
            .retry(
                move || async move {
                    tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match this.client.get(path).await {
                        Ok(value) => Ok(Some(value.into())),
                        Err(SdkImdsError::ErrorResponse(response)) => {
                            match response.response().status().as_u16() {
                                404 => Ok(None),
                                status @ 400..=499 => {
                                    Err(Failure::Permanent(ImdsError::Refused {
                                        endpoint: this.endpoint.clone(),
                                        path: path.to_owned(),
                                        status,
                                    }))
                                }
                                status => Err(Failure::Transient(ImdsFailure::Status(status))),
                            }
                        }
                        Err(e) => Err(Failure::Transient(ImdsFailure::Sdk(Box::new(e)))),
                    }
                },
                Failure::is_transient,
                |e, pause| {
                    if let Failure::Transient(last) = e {
                        tracing::debug!(path, error = %last, ?pause, "IMDS not answering yet; retrying");
                    }
                },
            )
            .await;
        result.map_err(|e| match e {
            Failure::Permanent(e) => e,
            Failure::Transient(last) => ImdsError::Unavailable {
                endpoint: self.endpoint.clone(),
                path: path.to_owned(),
                timeout: self.timeout,
                attempts: attempts.load(std::sync::atomic::Ordering::Relaxed),
                last,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn unreachable_imds_fails_within_the_deadline() {
        // Port 9 on loopback: nothing listens there, connections are refused at once.
        let imds = Imds::new(Some("http://127.0.0.1:9"), Duration::from_millis(400))
            .expect("valid endpoint");
        let start = Instant::now();
        let err = imds
            .get("/latest/meta-data/instance-id")
            .await
            .expect_err("nothing listens");
        assert!(
            matches!(err, ImdsError::Unavailable { attempts, .. } if attempts >= 2),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_bad_endpoint_is_named() {
        let err = Imds::new(Some("not a url"), Duration::from_secs(1)).expect_err("invalid");
        assert!(err.to_string().contains("not a url"), "{err}");
    }
}
