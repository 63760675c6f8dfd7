//! `ballast get secrets|keypairs` and `ballast rotate` end to end: the real binary against a file state store.
//! No output ever holds key material (every private value of the store is grepped for), a refused stage (out of
//! order, an unknown key id, a wrong key id) exits 4 or 5 naming the reason and changes no byte of the store, and
//! a stage run twice changes nothing the second time. (Node specs are written only for S3 stores: the local
//! cloud's test covers that.)

mod common;

use predicates::prelude::*;

const NAME: &str = "keys.example.com";

/// Every private value in the store: PEM private keys' bodies and the encryption keys' secrets.
fn private_values(store: &common::TempStore) -> Vec<String> {
    let mut values = Vec::new();
    for (path, data) in store.snapshot() {
        let text = String::from_utf8_lossy(&data).to_string();
        if path.ends_with("key.pem") {
            values.extend(
                text.lines()
                    .filter(|l| !l.starts_with("-----") && l.len() > 16)
                    .map(str::to_string),
            );
        }
        if path.ends_with("encryption-keys.yaml") {
            values.extend(
                text.lines()
                    .filter_map(|l| l.trim().strip_prefix("secret: "))
                    .map(str::to_string),
            );
        }
    }
    assert!(
        values.len() >= 4,
        "the store holds private values: {values:?}"
    );
    values
}

fn assert_no_private_value(store: &common::TempStore, output: &[u8]) {
    let text = String::from_utf8_lossy(output);
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    for value in private_values(store) {
        assert!(
            !text.contains(&value),
            "output shows a private value:\n{text}"
        );
    }
}

#[test]
fn get_secrets_lists_metadata_only_in_every_format() {
    let store = common::TempStore::with_cluster(NAME, "us-west-2a");
    for format in ["table", "yaml", "json"] {
        let out = store
            .ballast()
            .args(["get", "secrets", "--name", NAME, "-o", format])
            .output()
            .expect("get secrets");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_no_private_value(&store, &out.stdout);
        assert_no_private_value(&store, &out.stderr);
        let text = String::from_utf8_lossy(&out.stdout);
        for name in [
            "kubernetes-ca",
            "etcd-ca",
            "service-account",
            "encryption-key",
        ] {
            assert!(text.contains(name), "{format}: {text}");
        }
        assert!(text.contains("primary"), "{format}: {text}");
    }
    let table = store
        .ballast()
        .args(["get", "keypairs", "--name", NAME])
        .output()
        .expect("get keypairs");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(!text.contains("encryption-key"), "{text}");
    store
        .ballast()
        .args(["get", "secrets", "etcd", "--name", NAME])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("no keyset \"etcd\"").and(predicate::str::contains("etcd-ca")),
        );
}

#[test]
fn rotation_stages_in_order_out_of_order_and_twice() {
    let store = common::TempStore::with_cluster(NAME, "us-west-2a");
    let rotate = |args: &[&str]| {
        let mut cmd = store.ballast();
        cmd.args(["rotate", "--name", NAME]).args(args);
        cmd.output().expect("rotate")
    };
    let refused = |args: &[&str], code: i32, reason: &str| {
        let before = store.snapshot();
        let out = rotate(args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
        assert!(store.snapshot() == before, "{args:?} changed the store");
    };
    refused(
        &["etcd-ca", "--stage", "promote"],
        4,
        "no key is staged to promote; run `ballast rotate etcd-ca --stage add` first",
    );
    refused(
        &["etcd-ca", "--stage", "drop", "--id", "0123456789abcdef"],
        5,
        "there is no key 0123456789abcdef",
    );
    refused(
        &["etcd-ca", "--stage", "rewrite"],
        4,
        "for the encryption key only",
    );
    refused(
        &["kubernetes-ca", "--stage", "promote"],
        4,
        "no key is staged to promote; run `ballast rotate kubernetes-ca --stage add` first",
    );
    refused(
        &[
            "kubernetes-ca",
            "--stage",
            "drop",
            "--id",
            "0123456789abcdef",
        ],
        5,
        "kubernetes-ca: there is no key 0123456789abcdef",
    );
    refused(
        &["etcd-ca", "--stage", "add", "--rewritten-by-hand"],
        2,
        "--rewritten-by-hand goes with --stage rewrite only",
    );

    let added = rotate(&["etcd-ca", "--stage", "add"]);
    assert!(
        added.status.success(),
        "{}",
        String::from_utf8_lossy(&added.stderr)
    );
    assert!(String::from_utf8_lossy(&added.stderr).contains("added as next"));
    assert_no_private_value(&store, &added.stdout);
    assert_no_private_value(&store, &added.stderr);
    let before = store.snapshot();
    let again = rotate(&["etcd-ca", "--stage", "add"]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already staged"));
    assert!(store.snapshot() == before, "a second add changed the store");

    refused(
        &["etcd-ca", "--stage", "drop"],
        4,
        "run `ballast rotate etcd-ca --stage promote` first",
    );
    let listed = store
        .ballast()
        .args(["get", "secrets", "etcd-ca", "--name", NAME, "-o", "json"])
        .output()
        .expect("get");
    let keyset: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    let items = keyset["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{keyset}");
    assert_eq!(items[1]["state"], "next");
    let old = items[0]["id"].as_str().expect("id").to_string();
    let new = items[1]["id"].as_str().expect("id").to_string();
    refused(
        &["etcd-ca", "--stage", "promote", "--id", &old],
        4,
        &format!("this stage acts on key {new}"),
    );
    assert!(rotate(&["etcd-ca", "--stage", "promote", "--id", &new])
        .status
        .success());
    assert!(rotate(&["etcd-ca", "--stage", "drop", "--id", &old])
        .status
        .success());
    let listed = store
        .ballast()
        .args(["get", "secrets", "etcd-ca", "--name", NAME])
        .output()
        .expect("get");
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table.contains(&format!("{old}   distrusted"))
            && table.contains(&format!("{new}   primary")),
        "{table}"
    );

    // The encryption key: drop waits for the rewrite, which without an API records nothing unless done by hand.
    assert!(rotate(&["encryption-key", "--stage", "add"])
        .status
        .success());
    assert!(rotate(&["encryption-key", "--stage", "promote"])
        .status
        .success());
    refused(&["encryption-key", "--stage", "drop"], 4, "--stage rewrite");
    refused(
        &["encryption-key", "--stage", "rewrite"],
        6,
        "kubectl get secrets --all-namespaces -o json | kubectl replace -f -",
    );
    let rewritten = rotate(&[
        "encryption-key",
        "--stage",
        "rewrite",
        "--rewritten-by-hand",
    ]);
    assert!(
        rewritten.status.success(),
        "{}",
        String::from_utf8_lossy(&rewritten.stderr)
    );
    assert!(rotate(&["encryption-key", "--stage", "drop"])
        .status
        .success());
}

/// Writes `text` to `name` in a fresh directory under the store's; returns its path.
fn input(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write an input file");
    path.display().to_string()
}

/// `create secret keypair`: every bad input is refused naming its file, with no byte of the store changed; a good
/// CA is staged as next (the output holds no private value), importing it again changes nothing, another import
/// while it is staged is refused, and `rotate --stage promote` continues from it.
#[test]
fn create_secret_keypair_checks_before_storing_and_stages_as_next() {
    let store = common::TempStore::with_cluster(NAME, "us-west-2a");
    let inputs = tempfile::tempdir().expect("tempdir");
    let dir = inputs.path();
    let ca =
        ballast_state::pki::generate_ca("operator-ca.example.com", "Kubernetes CA").expect("ca");
    let other =
        ballast_state::pki::generate_ca("other-ca.example.com", "Kubernetes CA").expect("ca");
    let leaf_key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["leaf.example.com".to_string()])
        .expect("params")
        .self_signed(&leaf_key)
        .expect("leaf")
        .pem();
    let cert = input(dir, "ca.crt", &ca.cert_pem);
    let key = input(dir, "ca.key", &ca.key_pem);
    let other_key = input(dir, "other.key", &other.key_pem);
    let garbage = input(
        dir,
        "garbage.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n",
    );
    let leaf_cert = input(dir, "leaf.crt", &leaf);
    let leaf_key = input(dir, "leaf.key", &leaf_key.serialize_pem());
    let create = |args: &[&str]| {
        let mut cmd = store.ballast();
        cmd.args(["create", "secret", "--name", NAME]).args(args);
        cmd.output().expect("create secret")
    };
    let refused = |args: &[&str], code: i32, reasons: &[&str]| {
        let before = store.snapshot();
        let out = create(args);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        for reason in reasons {
            assert!(stderr.contains(reason), "{args:?}: {stderr}");
        }
        assert_no_private_value(&store, &out.stderr);
        assert!(!stderr.contains(ca.key_pem.lines().nth(1).expect("a key line")));
        assert!(store.snapshot() == before, "{args:?} changed the store");
    };
    refused(
        &[
            "keypair",
            "kubernetes-ca",
            "--cert",
            &cert,
            "--key",
            &other_key,
        ],
        2,
        &[
            &format!("--key {other_key}"),
            "does not match the certificate",
            "nothing was stored",
        ],
    );
    refused(
        &[
            "keypair",
            "kubernetes-ca",
            "--cert",
            &leaf_cert,
            "--key",
            &leaf_key,
        ],
        2,
        &[&format!("--cert {leaf_cert}"), "not a CA certificate"],
    );
    refused(
        &["keypair", "etcd-ca", "--cert", &garbage, "--key", &key],
        2,
        &[&format!("--cert {garbage}"), "PEM"],
    );
    refused(
        &["keypair", "kubernetes-ca", "--cert", &key, "--key", &key],
        2,
        &["holds a private key, not a certificate"],
    );
    refused(
        &["keypair", "kubernetes", "--cert", &cert, "--key", &key],
        2,
        &["no keyset \"kubernetes\"", "kubernetes-ca"],
    );
    refused(
        &["keypair", "service-account", "--cert", &cert, "--key", &key],
        2,
        &["takes a CA"],
    );
    refused(
        &[
            "keypair",
            "kubernetes-ca",
            "--cert",
            &dir.join("missing.crt").display().to_string(),
            "--key",
            &key,
        ],
        2,
        &["missing.crt: cannot be read"],
    );
    // A good CA: staged as next.
    let imported = create(&["keypair", "kubernetes-ca", "--cert", &cert, "--key", &key]);
    let stderr = String::from_utf8_lossy(&imported.stderr).to_string();
    assert!(imported.status.success(), "{stderr}");
    assert!(
        stderr.contains("added as next") && stderr.contains("imported"),
        "{stderr}"
    );
    assert_no_private_value(&store, &imported.stdout);
    assert_no_private_value(&store, &imported.stderr);
    let id = ballast_state::key_material::fingerprint(ca.cert_pem.as_bytes());
    let stored = store.snapshot();
    let stored_key = stored
        .iter()
        .find(|(path, _)| path.ends_with(&format!("pki/kubernetes-ca/{id}/key.pem")))
        .map(|(_, data)| String::from_utf8_lossy(data).to_string())
        .expect("the imported key under its id");
    assert_eq!(
        rcgen::KeyPair::from_pem(&stored_key)
            .expect("key")
            .public_key_pem(),
        rcgen::KeyPair::from_pem(&ca.key_pem)
            .expect("key")
            .public_key_pem()
    );

    // Again: nothing changes. Another CA while it is staged: refused.
    let before = store.snapshot();
    let again = create(&["keypair", "kubernetes-ca", "--cert", &cert, "--key", &key]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already staged as next"));
    assert!(
        store.snapshot() == before,
        "a second import changed the store"
    );
    let other_cert = input(dir, "other.crt", &other.cert_pem);
    let out = create(&[
        "keypair",
        "kubernetes-ca",
        "--cert",
        &other_cert,
        "--key",
        &other_key,
    ]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains(&format!("key {id} is already staged as next")));
    assert!(
        store.snapshot() == before,
        "a refused import changed the store"
    );

    // The rotation continues from the imported CA.
    let promoted = store
        .ballast()
        .args([
            "rotate",
            "kubernetes-ca",
            "--stage",
            "promote",
            "--id",
            &id,
            "--name",
            NAME,
        ])
        .output()
        .expect("rotate");
    assert!(
        promoted.status.success(),
        "{}",
        String::from_utf8_lossy(&promoted.stderr)
    );
    let listed = store
        .ballast()
        .args(["get", "secrets", "kubernetes-ca", "--name", NAME])
        .output()
        .expect("get");
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(table.contains(&format!("{id}   primary")), "{table}");
}

/// An SSH key made by `ssh-keygen` (state/tests/data/ssh).
fn ssh_fixture(name: &str) -> String {
    let path = format!(
        "{}/../state/tests/data/ssh/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).expect("ssh fixture")
}

/// `create secret sshpublickey`: every bad input is refused naming its file, exit 2, with no byte of the store
/// changed (a private key's content is never echoed); a good key is stored as `ssh/<name>.pub` and listed by
/// its fingerprint only; the same key again changes nothing; another key is refused (exit 4) unless --replace;
/// `delete secret sshpublickey` removes it, and an unknown name is exit 5.
#[test]
fn create_secret_sshpublickey_checks_before_storing() {
    let store = common::TempStore::with_cluster(NAME, "us-west-2a");
    let inputs = tempfile::tempdir().expect("tempdir");
    let dir = inputs.path();
    let run = |args: &[&str]| {
        let mut cmd = store.ballast();
        cmd.args(["--name", NAME]).args(args);
        cmd.output().expect("ballast")
    };
    let private = ssh_fixture("id_ed25519.test-only-private");
    let ed = ssh_fixture("ed25519.pub");
    let rsa = ssh_fixture("rsa2048.pub");
    let ed_b64 = ed.split_whitespace().nth(1).expect("b64").to_string();
    let bad: Vec<(&str, String, &str)> = vec![
        (
            "private",
            private.clone(),
            "this is a private key, not a public one",
        ),
        (
            "garbage",
            "hello\n".into(),
            "not an OpenSSH public key line",
        ),
        ("empty", String::new(), "empty"),
        (
            "short-rsa",
            ssh_fixture("rsa1024.pub"),
            "1024 bits is too short",
        ),
        (
            "mismatch",
            format!("ssh-rsa {ed_b64}\n"),
            "the file is damaged",
        ),
        ("two", format!("{ed}{rsa}"), "holds 2 keys"),
        ("big", "#".repeat(20_000), "larger than"),
    ];
    let binary = dir.join("binary.pub");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("binary input");
    let before = store.snapshot();
    let out = run(&[
        "create",
        "secret",
        "sshpublickey",
        "--pubkey",
        &binary.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an OpenSSH public key"));
    assert!(
        store.snapshot() == before,
        "a binary file changed the store"
    );
    for (what, text, reason) in bad {
        let path = input(dir, &format!("{what}.pub"), &text);
        let before = store.snapshot();
        let out = run(&["create", "secret", "sshpublickey", "--pubkey", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("--pubkey {path}")),
            "{what}: {stderr}"
        );
        assert!(stderr.contains(reason), "{what}: {stderr}");
        assert!(stderr.contains("nothing was stored"), "{what}: {stderr}");
        for line in private.lines().filter(|l| !l.starts_with("-----")) {
            assert!(
                !stderr.contains(line),
                "{what} echoed the private key: {stderr}"
            );
        }
        assert!(store.snapshot() == before, "{what} changed the store");
    }
    let ed_path = input(dir, "id_ed25519.pub", &ed);
    let before = store.snapshot();
    let out = run(&[
        "create",
        "secret",
        "sshpublickey",
        "Bad/Name",
        "--pubkey",
        &ed_path,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(store.snapshot() == before, "a bad name changed the store");

    // A good key: stored as ssh/admin.pub, byte for byte the operator's line.
    let out = run(&["create", "secret", "sshpublickey", "--pubkey", &ed_path]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{stderr}");
    let fingerprint = "SHA256:mU8I5zRYyOoSgxCCuQP2g31as9EVhWqRUs65cvPQ5AI";
    assert!(stderr.contains(fingerprint), "{stderr}");
    assert!(stderr.contains("Port 22 is closed"), "{stderr}");
    let stored = store.snapshot();
    let (_, data) = stored
        .iter()
        .find(|(path, _)| path.ends_with(&format!("{NAME}/ssh/admin.pub")))
        .expect("ssh/admin.pub");
    assert_eq!(String::from_utf8_lossy(data), ed);

    // Listed by fingerprint, in every format; the key itself is never printed.
    for format in ["table", "yaml", "json"] {
        let out = run(&["get", "secrets", "-o", format]);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{format}");
        assert!(
            stdout.contains("SSHPublicKey") && stdout.contains(fingerprint),
            "{format}: {stdout}"
        );
        assert!(!stdout.contains(&ed_b64), "{format}: {stdout}");
    }

    // The same key again (under the default name): nothing changes. Another key: refused unless --replace.
    let before = store.snapshot();
    let again = run(&[
        "create",
        "secret",
        "sshpublickey",
        "admin",
        "--pubkey",
        &ed_path,
    ]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already stored: nothing changed"));
    assert!(
        store.snapshot() == before,
        "the same key again changed the store"
    );
    let rsa_path = input(dir, "id_rsa.pub", &rsa);
    let other = run(&["create", "secret", "sshpublickey", "--pubkey", &rsa_path]);
    let stderr = String::from_utf8_lossy(&other.stderr).to_string();
    assert_eq!(other.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("--replace"), "{stderr}");
    assert!(
        store.snapshot() == before,
        "a refused key changed the store"
    );
    let replaced = run(&[
        "create",
        "secret",
        "sshpublickey",
        "--pubkey",
        &rsa_path,
        "--replace",
    ]);
    assert!(replaced.status.success());
    let out = run(&["get", "secrets"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        stdout.contains("SHA256:YHgoFrYVc4CKFg/wmdXzK9brvahlGt9ONrL6s6WlmaI"),
        "{stdout}"
    );
    assert!(!stdout.contains(fingerprint), "{stdout}");

    // Deleted; deleting it again (or any unknown name) is not found.
    let deleted = run(&["delete", "secret", "sshpublickey", "admin"]);
    assert!(
        deleted.status.success(),
        "{}",
        String::from_utf8_lossy(&deleted.stderr)
    );
    assert!(!store
        .snapshot()
        .iter()
        .any(|(path, _)| path.contains("/ssh/")));
    let missing = run(&["delete", "secret", "sshpublickey", "admin"]);
    assert_eq!(missing.status.code(), Some(5));
}
