//! AWS SDK clients of the local cloud itself (the runner, `status`, the IMDS's STS calls) and the IAM bootstrap
//! that makes enforcement usable.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_credential_types::Credentials;

use crate::state::AccessKey;

/// The IAM user whose keys `localcloud env` hands to the operator (allowed everything).
pub const ADMIN_USER: &str = "localcloud-admin";
/// The IAM user that plays the EC2 service: the launcher lets it assume roles that trust `ec2.amazonaws.com`,
/// as EC2 does on AWS when it hands an instance its profile's credentials. Its own policy allows only that and
/// reading instance profiles.
pub const EC2_SERVICE_USER: &str = "localcloud-ec2-service";
/// Requests the bootstrap makes before IAM enforcement starts (see [`bootstrap_iam`]): the emulator must let
/// exactly these through unauthenticated, and nothing more.
pub const BOOTSTRAP_REQUESTS: u32 = 6;

const ADMIN_POLICY: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#;
const EC2_SERVICE_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["sts:AssumeRole","iam:GetInstanceProfile"],"Resource":"*"}]}"#;

/// SDK configuration for the emulator with static keys. Built by hand rather than through
/// `aws_config::defaults()` so that nothing from the caller's environment (profiles, `AWS_ENDPOINT_URL_*`)
/// redirects the local cloud's own calls.
pub fn sdk_config(endpoint: &str, region: &str, key: &AccessKey) -> SdkConfig {
    let credentials = Credentials::new(
        &key.access_key_id,
        &key.secret_access_key,
        None,
        None,
        "localcloud",
    );
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .endpoint_url(endpoint)
        .credentials_provider(
            aws_credential_types::provider::SharedCredentialsProvider::new(credentials),
        )
        .build()
}

/// An SDK error with its whole chain of causes, for messages (the workspace's one formatter).
pub use ballast_common::error_chain;

/// The keys the bootstrap made.
#[derive(Debug, Clone)]
pub struct BootstrapKeys {
    pub admin: AccessKey,
    pub ec2_service: AccessKey,
}

/// Failures of the IAM bootstrap.
#[derive(Debug, thiserror::Error)]
pub enum IamBootstrapError {
    /// An IAM call failed.
    #[error("IAM bootstrap: {step} failed: {message}")]
    Call { step: &'static str, message: String },
    /// CreateAccessKey answered without a key.
    #[error("IAM bootstrap: CreateAccessKey for {0} returned no key")]
    NoKey(&'static str),
}

/// Creates the admin user and the EC2-service user with their policies and keys: exactly
/// [`BOOTSTRAP_REQUESTS`] requests, made before the emulator starts enforcing IAM (their own signature is not
/// checked then, so any key works).
pub async fn bootstrap_iam(
    endpoint: &str,
    region: &str,
) -> Result<BootstrapKeys, IamBootstrapError> {
    let bootstrap_key = AccessKey {
        access_key_id: "bootstrap".into(),
        secret_access_key: "bootstrap".into(),
    };
    // No retries: a retried request would consume one of the emulator's unauthenticated requests.
    let config = aws_sdk_iam::config::Builder::from(&sdk_config(endpoint, region, &bootstrap_key))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .build();
    let iam = aws_sdk_iam::Client::from_conf(config);
    let admin = make_user(&iam, ADMIN_USER, ADMIN_POLICY).await?;
    let ec2_service = make_user(&iam, EC2_SERVICE_USER, EC2_SERVICE_POLICY).await?;
    Ok(BootstrapKeys { admin, ec2_service })
}

async fn make_user(
    iam: &aws_sdk_iam::Client,
    name: &'static str,
    policy: &str,
) -> Result<AccessKey, IamBootstrapError> {
    fn fail<E: std::error::Error + Send + Sync + 'static>(
        step: &'static str,
    ) -> impl Fn(E) -> IamBootstrapError {
        move |e| IamBootstrapError::Call {
            step,
            message: error_chain(&e),
        }
    }
    iam.create_user()
        .user_name(name)
        .send()
        .await
        .map_err(fail("CreateUser"))?;
    iam.put_user_policy()
        .user_name(name)
        .policy_name("localcloud")
        .policy_document(policy)
        .send()
        .await
        .map_err(fail("PutUserPolicy"))?;
    let key = iam
        .create_access_key()
        .user_name(name)
        .send()
        .await
        .map_err(fail("CreateAccessKey"))?
        .access_key
        .ok_or(IamBootstrapError::NoKey(name))?;
    Ok(AccessKey {
        access_key_id: key.access_key_id,
        secret_access_key: key.secret_access_key,
    })
}
