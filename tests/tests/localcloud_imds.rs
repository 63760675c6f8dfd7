//! Each instance's IMDSv2 endpoint: the token flow is enforced, and the credentials it hands out are the
//! instance role's, which the emulator (IAM enforced) holds to the role's policy.

use std::time::Duration;

use aws_credential_types::provider::ProvideCredentials;
use aws_sdk_ec2::types::{IamInstanceProfileSpecification, InstanceType};
use ballast_e2e::localcloud::{
    create_instance_role, endpoint_addr, http, nodeup_with_env, LocalCloud, Network, Options,
};
use base64::Engine as _;

const BOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// nodeup's wait for role credentials on instances launched without a profile (`--credentials-wait`, 60 s by
/// default): nothing will ever associate one, so the default would be a minute of every boot spent waiting, as
/// long as [`BOOT_TIMEOUT`] itself.
const NO_PROFILE_CREDENTIALS_WAIT: &str = "2s";
/// The role may describe instances, nothing else.
const READER_POLICY: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ec2:DescribeInstances","Resource":"*"}]}"#;

async fn run_instance(
    cloud: &LocalCloud,
    subnet: &str,
    profile: Option<&str>,
    user_data: Option<&str>,
) -> String {
    let mut req = cloud
        .ec2()
        .run_instances()
        .image_id("ami-12c6146b")
        .instance_type(InstanceType::T3Micro)
        .min_count(1)
        .max_count(1)
        .subnet_id(subnet);
    if let Some(p) = profile {
        req = req.iam_instance_profile(IamInstanceProfileSpecification::builder().name(p).build());
    }
    if let Some(u) = user_data {
        req = req.user_data(base64::engine::general_purpose::STANDARD.encode(u));
    }
    req.send()
        .await
        .expect("RunInstances")
        .instances()
        .first()
        .and_then(|i| i.instance_id())
        .expect("an instance id")
        .to_owned()
}

fn error_code<E: aws_sdk_ec2::error::ProvideErrorMetadata>(e: &E) -> String {
    e.code().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imds_enforces_the_token_flow_and_serves_only_its_instance() {
    let scratch = tempfile::tempdir().expect("a temp dir for the nodeup wrapper");
    let cloud = LocalCloud::start_with(Options {
        nodeup: Some(nodeup_with_env(
            scratch.path(),
            &[("NODEUP_CREDENTIALS_WAIT", NO_PROFILE_CREDENTIALS_WAIT)],
        )),
        ..Options::default()
    });
    let network = Network::create(&cloud.ec2(), 20, &["us-west-2a"]).await;
    let subnet = &network.subnets[0].0;
    let with = run_instance(&cloud, subnet, None, Some("hello\n")).await;
    let without = run_instance(&cloud, subnet, None, None).await;
    let record = cloud
        .wait_for("the instance with user-data booted", BOOT_TIMEOUT, |c| {
            let r = c.try_instance(&with)?;
            c.identity(&r).map(|_| r)
        })
        .await;
    let addr = endpoint_addr(&record.imds_endpoint);

    // No token: 401. A made-up token: 401.
    assert_eq!(
        http(addr, "GET", "/latest/meta-data/instance-id", &[])
            .expect("IMDS answers")
            .0,
        401
    );
    let bogus = [("X-aws-ec2-metadata-token", "made-up")];
    assert_eq!(
        http(addr, "GET", "/latest/meta-data/instance-id", &bogus)
            .expect("IMDS answers")
            .0,
        401
    );
    // A token needs a TTL in 1..=21600.
    assert_eq!(
        http(addr, "PUT", "/latest/api/token", &[])
            .expect("IMDS answers")
            .0,
        400
    );
    for bad in ["0", "21601", "soon"] {
        let ttl = [("X-aws-ec2-metadata-token-ttl-seconds", bad)];
        assert_eq!(
            http(addr, "PUT", "/latest/api/token", &ttl)
                .expect("IMDS answers")
                .0,
            400,
            "TTL {bad}"
        );
    }
    // Proxied requests (X-Forwarded-For) are refused, token or not.
    let proxied_put = [
        ("X-aws-ec2-metadata-token-ttl-seconds", "60"),
        ("X-Forwarded-For", "10.0.0.1"),
    ];
    assert_eq!(
        http(addr, "PUT", "/latest/api/token", &proxied_put)
            .expect("IMDS answers")
            .0,
        403
    );
    let (status, token) = http(
        addr,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
    )
    .expect("IMDS answers");
    assert_eq!(status, 200);
    let auth = [("X-aws-ec2-metadata-token", token.as_str())];
    let proxied_get = [
        ("X-aws-ec2-metadata-token", token.as_str()),
        ("X-Forwarded-For", "10.0.0.1"),
    ];
    assert_eq!(
        http(addr, "GET", "/latest/meta-data/instance-id", &proxied_get)
            .expect("IMDS answers")
            .0,
        403
    );

    // With the token: this instance's data, and only this instance's.
    let get = |path: &str| http(addr, "GET", path, &auth).expect("IMDS answers");
    assert_eq!(get("/latest/meta-data/instance-id"), (200, with.clone()));
    assert_eq!(
        get("/latest/meta-data/local-ipv4"),
        (200, record.private_ip.clone())
    );
    assert_eq!(
        get("/latest/meta-data/placement/availability-zone"),
        (200, "us-west-2a".into())
    );
    assert_eq!(
        get("/latest/meta-data/placement/region"),
        (200, "us-west-2".into())
    );
    assert_eq!(get("/latest/user-data"), (200, "hello\n".into()));
    let (_, mac) = get("/latest/meta-data/mac");
    assert_eq!(
        get(&format!(
            "/latest/meta-data/network/interfaces/macs/{mac}/subnet-id"
        )),
        (200, subnet.clone())
    );
    assert_eq!(
        get(&format!(
            "/latest/meta-data/network/interfaces/macs/{mac}/vpc-id"
        )),
        (200, network.vpc_id.clone())
    );
    let (status, doc) = get("/latest/dynamic/instance-identity/document");
    assert_eq!(status, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).expect("a JSON identity document");
    assert_eq!(doc["instanceId"], with.as_str());
    assert_eq!(doc["privateIp"], record.private_ip.as_str());
    assert_eq!(doc["region"], "us-west-2");
    // No instance profile: no iam/ tree.
    assert_eq!(get("/latest/meta-data/iam/security-credentials/").0, 404);

    // The instance without user-data: IMDS says 404, and nodeup stops with its "no user-data" exit code.
    let bare = cloud
        .wait_for(
            "nodeup of the instance without user-data to exit",
            BOOT_TIMEOUT,
            |c| {
                let r = c.try_instance(&without)?;
                r.nodeup_exit.is_some().then_some(r)
            },
        )
        .await;
    assert_eq!(bare.nodeup_exit.as_deref(), Some("exit status: 3"));
    let bare_addr = endpoint_addr(&bare.imds_endpoint);
    let (_, bare_token) = http(
        bare_addr,
        "PUT",
        "/latest/api/token",
        &[("X-aws-ec2-metadata-token-ttl-seconds", "60")],
    )
    .expect("IMDS");
    // Tokens are per instance, like on EC2.
    assert_eq!(
        http(bare_addr, "GET", "/latest/user-data", &auth)
            .expect("IMDS answers")
            .0,
        401
    );
    let bare_auth = [("X-aws-ec2-metadata-token", bare_token.as_str())];
    assert_eq!(
        http(bare_addr, "GET", "/latest/user-data", &bare_auth)
            .expect("IMDS answers")
            .0,
        404
    );
    let log = std::fs::read_to_string(&bare.log).expect("its log");
    assert!(
        log.contains("no user-data"),
        "nodeup says why it stopped:\n{log}"
    );

    // Terminated: the endpoint stops answering.
    cloud
        .ec2()
        .terminate_instances()
        .instance_ids(&with)
        .send()
        .await
        .expect("TerminateInstances");
    cloud
        .wait_for("the instance to be powered off", BOOT_TIMEOUT, |c| {
            c.instance(&with).stopped_at.map(|_| ())
        })
        .await;
    assert!(
        http(addr, "GET", "/latest/meta-data/instance-id", &auth).is_err(),
        "IMDS of a terminated instance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn role_credentials_from_imds_are_held_to_the_role_policy() {
    let cloud = LocalCloud::start();
    assert!(cloud.record.iam_enforced);
    let network = Network::create(&cloud.ec2(), 21, &["us-west-2b"]).await;
    let profile = create_instance_role(&cloud.iam(), "reader", READER_POLICY).await;
    let id = run_instance(&cloud, &network.subnets[0].0, Some(&profile), Some("x\n")).await;
    let record = cloud
        .wait_for("the instance booted", BOOT_TIMEOUT, |c| {
            let r = c.try_instance(&id)?;
            c.identity(&r).map(|_| r)
        })
        .await;

    // Credentials exactly as an SDK on the instance gets them: from its IMDS.
    let imds = aws_config::imds::Client::builder()
        .endpoint(&record.imds_endpoint)
        .expect("a valid endpoint")
        .build();
    let provider = aws_config::imds::credentials::ImdsCredentialsProvider::builder()
        .imds_client(imds)
        .build();
    let creds = provider
        .provide_credentials()
        .await
        .expect("role credentials from IMDS");
    assert!(
        creds.access_key_id().starts_with("ASIA"),
        "temporary credentials"
    );
    assert!(creds.session_token().is_some());
    // nodeup's default chain got the very same (cached) credentials.
    let report = cloud.identity(&record).expect("identity");
    assert_eq!(
        report.credentials.access_key_id.as_deref(),
        Some(creds.access_key_id())
    );

    let config = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-west-2"))
        .endpoint_url(&cloud.record.endpoint)
        .credentials_provider(aws_credential_types::provider::SharedCredentialsProvider::new(creds))
        .build();
    let as_role = aws_sdk_ec2::Client::new(&config);
    // Allowed by the role's policy.
    let seen = as_role
        .describe_instances()
        .send()
        .await
        .expect("DescribeInstances is allowed");
    assert!(seen
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .any(|i| i.instance_id() == Some(&id)));
    // Not in the role's policy: refused.
    let denied = as_role
        .describe_vpcs()
        .send()
        .await
        .expect_err("DescribeVpcs is not allowed");
    let denied = denied.into_service_error();
    assert!(
        error_code(&denied).contains("AccessDenied"),
        "got {denied:?}"
    );
    let denied = aws_sdk_iam::Client::new(&config)
        .list_roles()
        .send()
        .await
        .expect_err("iam:ListRoles is not allowed");
    // moto's IAM error body is not one the Rust SDK parses (no code): the HTTP status says it.
    let status = denied.raw_response().map(|r| r.status().as_u16());
    assert_eq!(status, Some(403), "got {denied:?}");
    let denied = as_role
        .terminate_instances()
        .instance_ids(&id)
        .send()
        .await
        .expect_err("no TerminateInstances");
    let denied = denied.into_service_error();
    assert!(
        error_code(&denied).contains("AccessDenied"),
        "got {denied:?}"
    );

    // Without the operator's keys nothing gets through: enforcement is on from the first request.
    let anonymous = aws_sdk_ec2::Client::new(&localcloud::aws::sdk_config(
        &cloud.record.endpoint,
        "us-west-2",
        &localcloud::state::AccessKey {
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
        },
    ));
    assert!(
        anonymous.describe_vpcs().send().await.is_err(),
        "unknown keys are refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_iam_enforcement_any_key_works() {
    let cloud = LocalCloud::start_with(Options {
        no_iam: true,
        ..Options::default()
    });
    assert!(!cloud.record.iam_enforced);
    let anonymous = aws_sdk_ec2::Client::new(&localcloud::aws::sdk_config(
        &cloud.record.endpoint,
        "us-west-2",
        &localcloud::state::AccessKey {
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
        },
    ));
    anonymous
        .describe_vpcs()
        .send()
        .await
        .expect("no enforcement");
}
