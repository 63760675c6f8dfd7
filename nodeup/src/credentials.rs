//! The credentials check of step 1: does the AWS SDK's default chain resolve credentials on this instance
//! (the instance role's, through IMDS)? Recorded in the identity file, so an operator sees at once a node whose
//! role is missing.

use std::time::Duration;

use crate::identity::CredentialsCheck;

/// How long a booting node waits for its instance role's credentials to appear in IMDS by default: the deadline
/// of the retry policy it waits with (`--credentials-wait` replaces it).
pub const CREDENTIALS_WAIT: Duration = crate::retry::CREDENTIALS_WAIT;

/// Resolves credentials the way every AWS client of nodeup will: through the SDK's default chain, which on an
/// instance ends at IMDS (the environment has no keys).
///
/// Right after launch the instance profile may not be associated yet: IMDS answers 404 for the role (on AWS and
/// on the local cloud alike). That is a wait, not a failure, so the chain is asked again until
/// `wait` ([`CREDENTIALS_WAIT`] unless `--credentials-wait` says otherwise) has passed; only then is the last
/// error reported. An instance launched without a profile waits all of it, which is why tests of such instances
/// set it short.
pub async fn check_credentials(region: &str, wait: Duration) -> CredentialsCheck {
    use aws_credential_types::provider::ProvideCredentials;
    let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build()
        .await;
    let policy = crate::retry::Policy {
        deadline: wait,
        ..crate::retry::CREDENTIALS
    };
    let result = policy
        .retry(
            || async {
                match tokio::time::timeout(Duration::from_secs(30), chain.provide_credentials()).await
                {
                    Ok(Ok(c)) => Ok(c.access_key_id().to_owned()),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("timed out after 30s".to_owned()),
                }
            },
            |_| true,
            |error, retry_in| {
                tracing::info!(%error, ?retry_in, "no AWS credentials yet (instance profile not associated?)");
            },
        )
        .await;
    match result {
        Ok(access_key_id) => CredentialsCheck {
            access_key_id: Some(access_key_id),
            error: None,
        },
        Err(error) => CredentialsCheck {
            access_key_id: None,
            error: Some(error),
        },
    }
}
