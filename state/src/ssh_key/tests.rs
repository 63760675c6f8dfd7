use super::*;

/// Keys made by `ssh-keygen` (OpenSSH), with the fingerprints and sizes `ssh-keygen -l` printed for them.
fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/ssh/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).expect("fixture")
}

#[test]
fn every_accepted_type_parses_with_ssh_keygen_fingerprint_and_size() {
    for (file, key_type, bits, fingerprint) in [
        (
            "ed25519.pub",
            "ssh-ed25519",
            256,
            "SHA256:mU8I5zRYyOoSgxCCuQP2g31as9EVhWqRUs65cvPQ5AI",
        ),
        (
            "ecdsa256.pub",
            "ecdsa-sha2-nistp256",
            256,
            "SHA256:Z+bScUEwCmJRHFH7UupDjeY9wnKByfNDFju5Su4IZNY",
        ),
        (
            "ecdsa384.pub",
            "ecdsa-sha2-nistp384",
            384,
            "SHA256:RFxSy/KyTIg0lznTDCKsfPL4/TBUIPercXfVKYio6+0",
        ),
        (
            "ecdsa521.pub",
            "ecdsa-sha2-nistp521",
            521,
            "SHA256:FaMSyMAyWygvD7QuZrxu3M09vTMyqf+c6YsPV3MBJME",
        ),
        (
            "rsa2048.pub",
            "ssh-rsa",
            2048,
            "SHA256:YHgoFrYVc4CKFg/wmdXzK9brvahlGt9ONrL6s6WlmaI",
        ),
    ] {
        let text = fixture(file);
        let key = SshPublicKey::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(key.key_type(), key_type, "{file}");
        assert_eq!(key.bits(), bits, "{file}");
        assert_eq!(key.fingerprint(), fingerprint, "{file}");
        // The line is the file's, so authorized_keys holds exactly what the operator gave.
        assert_eq!(key.line(), text.trim_end(), "{file}");
        assert!(key.same_key(&SshPublicKey::parse(&key.line()).expect("again")));
    }
}

#[test]
fn comments_blank_lines_and_no_comment_are_fine() {
    let text = fixture("ed25519.pub");
    let mut parts = text.split_whitespace();
    let bare = format!(
        "{} {}",
        parts.next().expect("type"),
        parts.next().expect("key")
    );
    let key = SshPublicKey::parse(&format!("# mine\n\n{bare}\n\n")).expect("bare");
    assert_eq!(key.line(), bare);
    assert!(key.same_key(&SshPublicKey::parse(&text).expect("with comment")));
}

#[test]
fn bad_inputs_are_refused_with_what_to_do() {
    let ed = fixture("ed25519.pub");
    let rsa = fixture("rsa2048.pub");
    let ed_b64 = ed.split_whitespace().nth(1).expect("b64").to_string();
    let cases: Vec<(&str, String, SshKeyError)> = vec![
        ("empty", String::new(), SshKeyError::Empty),
        ("only comments", "# nothing\n\n".into(), SshKeyError::Empty),
        (
            "private key",
            fixture("id_ed25519.test-only-private"),
            SshKeyError::PrivateKey,
        ),
        (
            "PEM private key",
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\n".into(),
            SshKeyError::PrivateKey,
        ),
        (
            "two keys",
            format!("{ed}{rsa}"),
            SshKeyError::SeveralKeys(2),
        ),
        (
            "garbage",
            "hello world\n".into(),
            SshKeyError::Malformed("the first field is not a key type Ballast accepts".into()),
        ),
        (
            "options",
            format!("no-pty,command=\"x\" {ed}"),
            SshKeyError::Malformed(
                "authorized_keys options before the key type are not accepted".into(),
            ),
        ),
        (
            "DSA",
            format!("ssh-dss {ed_b64}"),
            SshKeyError::Malformed("the first field is not a key type Ballast accepts".into()),
        ),
        (
            "no key",
            "ssh-ed25519\n".into(),
            SshKeyError::Malformed("no key after the type".into()),
        ),
        (
            "bad base64",
            "ssh-ed25519 AAAA!!!!\n".into(),
            SshKeyError::Base64("Invalid symbol 33, offset 4.".into()),
        ),
        (
            "mismatched inner type",
            format!("ssh-rsa {ed_b64}"),
            SshKeyError::TypeMismatch {
                outer: "ssh-rsa".into(),
                inner: "ssh-ed25519".into(),
            },
        ),
        (
            "short RSA",
            fixture("rsa1024.pub"),
            SshKeyError::RsaTooShort(1024),
        ),
        (
            "truncated",
            format!("ssh-ed25519 {}", &ed_b64[..40]),
            SshKeyError::Blob {
                key_type: "ssh-ed25519".into(),
                problem: "it does not decode as an SSH public key (length invalid)".into(),
            },
        ),
        (
            "too large",
            "#".repeat(MAX_FILE_BYTES as usize + 1),
            SshKeyError::TooLarge,
        ),
    ];
    for (what, text, want) in cases {
        assert_eq!(SshPublicKey::parse(&text), Err(want), "{what}");
    }
}

/// Blobs that are base64 but not a key OpenSSH would write: the `ssh-key` crate's decoding and our own checks
/// on top of it both refuse them.
#[test]
fn damaged_blobs_are_refused() {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let blob_of = |file: &str| {
        let text = fixture(file);
        b64.decode(text.split_whitespace().nth(1).expect("b64"))
            .expect("fixture base64")
    };
    let line = |key_type: &str, blob: &[u8]| format!("{key_type} {}", b64.encode(blob));
    let problem = |text: &str| match SshPublicKey::parse(text) {
        Err(SshKeyError::Blob { problem, .. }) => problem,
        other => panic!("{text}: {other:?}"),
    };

    let mut trailing = blob_of("ed25519.pub");
    trailing.extend_from_slice(&[0, 0, 0, 1, b'x']);
    assert!(
        problem(&line("ssh-ed25519", &trailing)).contains("does not decode"),
        "bytes after the key"
    );

    // The nistp256 point compressed (tag 2 or 3, 33 bytes): SEC1 allows it, OpenSSH never writes it.
    let blob = blob_of("ecdsa256.pub");
    let point_at = blob.len() - 65;
    let mut compressed = blob[..point_at - 4].to_vec();
    compressed.extend_from_slice(&33u32.to_be_bytes());
    compressed.push(2 + (blob[blob.len() - 1] & 1));
    compressed.extend_from_slice(&blob[point_at + 1..point_at + 33]);
    assert_eq!(
        problem(&line("ecdsa-sha2-nistp256", &compressed)),
        "a nistp256 public point is uncompressed (SEC1 tag 4)"
    );

    // An RSA key whose exponent is even.
    let mut even = blob_of("rsa2048.pub");
    let e_at = 4 + "ssh-rsa".len() + 4;
    let e_len = u32::from_be_bytes(even[e_at - 4..e_at].try_into().expect("4 bytes")) as usize;
    even[e_at + e_len - 1] &= 0xfe;
    assert_eq!(
        problem(&line("ssh-rsa", &even)),
        "the exponent is not an odd number above 1"
    );
}

#[test]
fn a_private_key_is_never_quoted() {
    let private = fixture("id_ed25519.test-only-private");
    let message = SshPublicKey::parse(&private)
        .expect_err("refused")
        .to_string();
    for line in private.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!message.contains(line), "{message}");
    }
    assert!(message.contains("private key"), "{message}");
}

#[test]
fn names() {
    for good in ["admin", "ops-1", "a.b_c"] {
        assert_eq!(check_name(good), Ok(()), "{good}");
    }
    for bad in ["", "Admin", "-x", "a/b", "../x", &"a".repeat(64)] {
        assert!(check_name(bad).is_err(), "{bad}");
    }
}
