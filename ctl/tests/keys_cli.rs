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
/// while it is staged is refused, and `rotate --stage promote` continues from it. An SSH public key is refused.
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
    let pubkey = input(
        dir,
        "id.pub",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHv2 operator@example\n",
    );
    refused(
        &["sshpublickey", "--pubkey", &pubkey],
        2,
        &["nothing installs SSH keys", "nothing was stored"],
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
    let id = ballast_state::keystore::fingerprint(ca.cert_pem.as_bytes());
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
