use super::*;

#[test]
fn a_pem_private_key_goes_whole_and_its_neighbours_stay() {
    let key = crate::pki::generate_ca("kubernetes-ca", "Kubernetes CA")
        .expect("ca")
        .key_pem;
    let text = format!("before\n{key}after");
    let out = redact(&text);
    assert_eq!(out, format!("before\n{REDACTED_KEY}\nafter"));
    // Cut at a line limit: the start of a block goes with everything after it.
    let cut = &key[..key.len() / 2];
    assert_eq!(redact(&format!("x {cut}")), format!("x {REDACTED_KEY}"));
}

/// Every credential the hardening round found in clear (issue 44, item 7), and the shapes gitleaks and
/// detect-secrets name: what each becomes.
#[test]
fn secrets_go_and_what_names_them_stays() {
    for (text, want) in [
        // Named values.
        ("token=abcd1234", "token=[redacted]"),
        (
            r#"{"bootstrapToken": "07401b.f395accd246ae52d"}"#,
            r#"{"bootstrapToken": "[redacted]"}"#,
        ),
        (
            "aws_secret_access_key = wJalrXUtnFEMI",
            "aws_secret_access_key = [redacted]",
        ),
        ("password: hunter22", "password: [redacted]"),
        ("MYSQL_PWD=hunter22 mysql -h db", "MYSQL_PWD=[redacted] mysql -h db"),
        ("mysql_pwd: 'hunter22'", "mysql_pwd: '[redacted]'"),
        ("apiKey: sk-live-4f9a8b7c6d5e", "apiKey: [redacted]"),
        (r#""api_key": "0123456789""#, r#""api_key": "[redacted]""#),
        ("client_secret=s3cr3tvalue", "client_secret=[redacted]"),
        ("db_pass=hunter22", "db_pass=[redacted]"),
        // Authorization headers: the scheme stays, the credential goes.
        (
            "Authorization: Basic dXNlcjpwYXNzd29yZA==",
            "Authorization: Basic [redacted]",
        ),
        (
            "Authorization: Bearer eyJhbGciOi",
            "Authorization: Bearer [redacted]",
        ),
        (
            r#"-H "authorization: token ghx0123456789""#,
            r#"-H "authorization: token [redacted]""#,
        ),
        // Credentials before an `@`: user and host stay.
        (
            "connecting to postgres://user:pass@db.internal:5432/app",
            "connecting to postgres://user:[redacted]@db.internal:5432/app",
        ),
        (
            "DATABASE_URL=mysql://admin:Zx9%40q@10.0.0.5/db",
            "DATABASE_URL=mysql://admin:[redacted]@10.0.0.5/db",
        ),
        (
            "proxy user:pass@proxy.corp:3128 refused",
            "proxy user:[redacted]@proxy.corp:3128 refused",
        ),
        // Tokens by shape.
        (
            "key id AKIAIOSFODNN7EXAMPLE in use",
            "key id [redacted] in use",
        ),
        ("ASIAY34FZKBOKMUTVV7A", "[redacted]"),
        (
            "slack xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx posted",
            "slack [redacted] posted",
        ),
        (
            "ghp_0123456789abcdefghijABCDEFGHIJ012345 pushed",
            "[redacted] pushed",
        ),
        ("charge with sk_live_4eC39HqLyjWDarjtT1zdp7dc", "charge with [redacted]"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U end",
            "jwt [redacted] end",
        ),
        ("join with 07401b.f395accd246ae52d now", "join with [redacted] now"),
    ] {
        assert_eq!(redact(text), want, "{text}");
    }
}

/// What a dump must keep readable: ids, digests, ARNs, paths and devices, UUIDs, images pinned by digest,
/// e-mail-like names, times, and words after which nothing secret follows.
#[test]
fn ordinary_values_stay() {
    for kept in [
        "sha256=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "instance i-0123456789abcdef0 volume vol-0123456789abcdef0",
        "key clusters/demo.example.com/nodes/nodes/spec.yaml",
        "writer AROAEXAMPLEROLEID:i-0abc",
        "device=/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0 target=/var/lib/etcd",
        "device=/dev/nvme1n1 mounted",
        "path /var/lib/kubelet/pods/6f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b/volumes/kubernetes.io~projected",
        "uid 6f1c2d3e-4b5a-6978-8a9b-0c1d2e3f4a5b",
        "image: registry.k8s.io/pause:3.10@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
        "image: nginx:1.25@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
        "arn:aws:iam::123456789012:role/ballast-nodes-demo-example-com",
        "arn:aws:kms:us-west-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab",
        "git@github.com:ballast/ballast.git",
        "at 2026-12-02T16:00:00Z etcd member etcd-a joined https://10.0.0.5:2380",
        "kmsKeyId: alias/ballast secretName: etcd-encryption tokenFile: /var/lib/token",
        "httpTokens: required",
        "bypass: true",
        "basic configuration done",
        "PWD=/root OLDPWD=/home",
        "ip-10-0-1-5.us-west-2.compute.internal Ready",
    ] {
        assert_eq!(redact(kept), kept);
        assert!(matches!(redact(kept), Cow::Borrowed(_)), "{kept}");
    }
}

#[test]
fn opaque_runs_go_even_with_separators_in_them() {
    let secret = "c2VjcmV0LWtleS1tYXRlcmlhbC0zMi1ieXRlcy1sb25nIQ==";
    assert_eq!(redact(&format!("key {secret} end")), "key [redacted] end");
    // Standard base64 holds `/` and `+`: its pieces read as no words.
    let slashed = "kF3/pQ9+zR2vW7xY1aB4cD6eG8hJ0mN5sT/uLq==";
    assert_eq!(redact(&format!("value {slashed}")), "value [redacted]");
    let url_safe = "Zx8_Qw3-Lm9Kp2Rt7Vb4Nc6Hy1Jd5Fg0Sa";
    assert_eq!(redact(&format!("value {url_safe}")), "value [redacted]");
}

#[test]
fn field_names_that_hold_secrets() {
    for name in [
        "token",
        "bootstrapToken",
        "client_secret",
        "password",
        "mysql_pwd",
        "MYSQL_PWD",
        "apiKey",
        "api-key",
        "secretAccessKey",
        "privateKeyPem",
        "Authorization",
        "credentials",
    ] {
        assert!(is_secret_name(name), "{name}");
    }
    for name in [
        "name",
        "kmsKeyId",
        "accessKeyId",
        "secretName",
        "tokenFile",
        "credentialsId",
        "httpTokens",
        "sshAuthorizedKeys",
        "sshKeyName",
        "bypass",
        "PWD",
        "keyset",
    ] {
        assert!(!is_secret_name(name), "{name}");
    }
}

#[test]
fn every_encryption_key_generated_is_redacted() {
    for _ in 0..16 {
        let secrets = crate::pki::ClusterSecrets::generate("demo.example.com").expect("secrets");
        let key = &secrets.encryption_keys.keys[0].secret;
        let text = format!("material {key} and {}", secrets.service_account_key_pem);
        let out = redact(&text);
        assert!(!out.contains(key.as_str()), "{out}");
        assert!(!out.contains("PRIVATE KEY-----\n"), "{out}");
    }
}
