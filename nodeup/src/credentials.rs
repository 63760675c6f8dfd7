//! The credentials check of step 1: does the AWS SDK's default chain resolve credentials on this instance
//! (the instance role's, through IMDS)? Recorded in the identity file, so an operator sees at once a node whose
//! role is missing.

use std::time::Duration;

use crate::identity::CredentialsCheck;

/// How long a booting node waits for its instance role's credentials to appear in IMDS.
pub const CREDENTIALS_WAIT: Duration = Duration::from_secs(60);

/// Resolves credentials the way every AWS client of nodeup will: through the SDK's default chain, which on an
/// instance ends at IMDS (the environment has no keys).
///
/// Right after launch the instance profile may not be associated yet: IMDS answers 404 for the role (on AWS and
/// on the local cloud alike). That is a wait, not a failure, so the chain is asked again until
/// [`CREDENTIALS_WAIT`] has passed; only then is the last error reported.
pub async fn check_credentials(region: &str) -> CredentialsCheck {
    use aws_credential_types::provider::ProvideCredentials;
    let chain = aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
        .region(aws_config::Region::new(region.to_owned()))
        .build()
        .await;
    let deadline = tokio::time::Instant::now() + CREDENTIALS_WAIT;
    let mut pause = Duration::from_millis(200);
    loop {
        let error = match tokio::time::timeout(Duration::from_secs(30), chain.provide_credentials())
            .await
        {
            Ok(Ok(c)) => {
                return CredentialsCheck {
                    access_key_id: Some(c.access_key_id().to_owned()),
                    error: None,
                }
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "timed out after 30s".to_owned(),
        };
        if tokio::time::Instant::now() + pause > deadline {
            return CredentialsCheck {
                access_key_id: None,
                error: Some(error),
            };
        }
        tracing::info!(%error, retry_in = ?pause, "no AWS credentials yet (instance profile not associated?)");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}
