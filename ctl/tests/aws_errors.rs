//! How `ballast` fails when AWS cannot be used: an endpoint that accepts and never answers, no credentials, a
//! malformed region, an identity without the permission. Each error is Ballast's own sentence naming what to
//! fix, bounded in time, without the SDK's Debug text or warnings (those come with `-v`). The endpoints are
//! loopback listeners the test runs: no traffic leaves the machine.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use assert_cmd::Command;

/// A loopback listener that accepts every connection and never answers; the connections stay open until the
/// test process ends.
fn silent_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    url
}

/// The whole request on `stream` (its head and its body, by Content-Length), as text.
fn read_request(stream: &mut TcpStream) -> String {
    let mut request = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&request);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if request.len() >= end + 4 + length {
                break;
            }
        }
    }
    String::from_utf8_lossy(&request).into_owned()
}

/// A loopback AWS for an identity without S3's permission: STS tells who it is (GetCallerIdentity needs no
/// permission), and S3 answers every request 403 AccessDenied, as S3 does.
fn denying_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                // One request per connection: read it, answer, close.
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let request = read_request(&mut stream);
                let (status, body) = if request.contains("Action=GetCallerIdentity") {
                    (
                        "200 OK",
                        "<GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
                         <GetCallerIdentityResult><Arn>arn:aws:iam::123456789012:user/operator</Arn>\
                         <UserId>AIDAEXAMPLE</UserId><Account>123456789012</Account></GetCallerIdentityResult>\
                         <ResponseMetadata><RequestId>0123</RequestId></ResponseMetadata>\
                         </GetCallerIdentityResponse>",
                    )
                } else {
                    (
                        "403 Forbidden",
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>\
                         <Message>Access Denied</Message><RequestId>0123</RequestId></Error>",
                    )
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    url
}

/// `ballast` with a clean environment: an S3 state store at `endpoint`, no profile, no instance metadata.
fn ballast(endpoint: &str) -> Command {
    let mut cmd = ballast_on_aws();
    cmd.env("AWS_ENDPOINT_URL", endpoint);
    cmd
}

/// The same without a custom endpoint: only for calls that fail before any connection (a malformed region).
fn ballast_on_aws() -> Command {
    let dir = std::env::temp_dir();
    let mut cmd = Command::cargo_bin("ballast").expect("the ballast binary");
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", &dir)
        .env("BALLAST_STATE", "s3://ballast-state/clusters")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_CONFIG_FILE", dir.join("no-such-aws-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            dir.join("no-such-aws-credentials"),
        )
        .current_dir(&dir)
        // Generous: the bound under test is the SDK's (90 s a call); this only keeps a hang from hanging CI.
        .timeout(Duration::from_secs(300));
    cmd
}

fn with_credentials(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE").env(
        "AWS_SECRET_ACCESS_KEY",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    )
}

struct Failed {
    code: Option<i32>,
    stderr: String,
}

fn run(cmd: &mut Command) -> Failed {
    let output = cmd.output().expect("ballast runs");
    Failed {
        code: output.status.code(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Ballast's words only: one `error:` line, none of the SDK's Debug text, no SDK warning.
fn assert_plain(stderr: &str) {
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    for sdk in [
        "DispatchFailure",
        "ConnectorError",
        "source:",
        "Error {",
        " WARN ",
        "{ kind",
    ] {
        assert!(!stderr.contains(sdk), "{sdk:?} in {stderr}");
    }
}

#[test]
fn an_endpoint_that_accepts_and_never_answers_fails_naming_it() {
    let endpoint = silent_endpoint();
    let failed = run(with_credentials(
        ballast(&endpoint)
            .env("AWS_REGION", "us-east-1")
            .args(["get", "clusters"]),
    ));
    // It returned (the harness would have killed it otherwise), failing, and says which endpoint and what to do.
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    assert!(failed.stderr.contains(&endpoint), "{}", failed.stderr);
    assert!(
        failed.stderr.contains("did not answer"),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("AWS_ENDPOINT_URL"),
        "{}",
        failed.stderr
    );
    assert_plain(&failed.stderr);
}

#[test]
fn no_credentials_says_so_in_one_sentence_and_the_detail_comes_with_v() {
    let endpoint = silent_endpoint();
    let failed = run(ballast(&endpoint)
        .env("AWS_REGION", "us-east-1")
        .args(["get", "clusters"]));
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    assert!(
        failed.stderr.contains("no AWS credentials found"),
        "{}",
        failed.stderr
    );
    assert_plain(&failed.stderr);

    let verbose = run(ballast(&endpoint)
        .env("AWS_REGION", "us-east-1")
        .args(["-v", "get", "clusters"]));
    assert!(
        verbose.stderr.contains("no AWS credentials found"),
        "{}",
        verbose.stderr
    );
    assert!(verbose.stderr.contains("  detail: "), "{}", verbose.stderr);
}

#[test]
fn a_malformed_region_reads_as_a_region_problem() {
    // Not a DNS name: the SDK refuses it before resolving any address, so nothing leaves the machine.
    let failed = run(with_credentials(
        ballast_on_aws()
            .env("AWS_REGION", "us east 1!")
            .args(["get", "clusters"]),
    ));
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    assert!(failed.stderr.contains("region"), "{}", failed.stderr);
    assert!(!failed.stderr.contains("credentials"), "{}", failed.stderr);
    assert_plain(&failed.stderr);
}

#[test]
fn a_missing_permission_names_the_bucket_and_what_to_do() {
    let endpoint = denying_endpoint();
    let failed = run(with_credentials(
        ballast(&endpoint)
            .env("AWS_REGION", "us-east-1")
            .args(["get", "clusters"]),
    ));
    assert_eq!(failed.code, Some(1), "{}", failed.stderr);
    assert!(failed.stderr.contains("AccessDenied"), "{}", failed.stderr);
    assert!(
        failed.stderr.contains("s3://ballast-state"),
        "{}",
        failed.stderr
    );
    assert!(
        failed.stderr.contains("may not use this bucket"),
        "{}",
        failed.stderr
    );
    assert_plain(&failed.stderr);
}
