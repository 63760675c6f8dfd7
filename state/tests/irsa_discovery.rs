//! The published discovery documents: goldens of `/.well-known/openid-configuration` and `/openid/v1/jwks` for
//! fixed keys (`tests/data/irsa/*.pub`, made with openssl), each `kid` checked against the value openssl and
//! base64 compute independently (sha256 of the DER SubjectPublicKeyInfo, unpadded base64url: what kube-apiserver
//! puts in the tokens it signs), and which keys a service-account rotation publishes at each stage.

use std::path::{Path, PathBuf};

use ballast_state::issuer::discovery::{
    jwks, openid_configuration, published_public_keys, to_json,
};
use ballast_state::keyset::{KeyState, Keyset, KeysetItem, KeysetName, Stage, StageOutcome};
use ballast_state::layout::ClusterPaths;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/irsa")
}

fn key(name: &str) -> String {
    std::fs::read_to_string(data().join(name)).expect("a test key")
}

const ISSUER: &str = "https://demo-oidc.s3.us-west-2.amazonaws.com/demo.example.com";

#[test]
fn documents_match_their_goldens_and_kids_match_openssl() {
    let set = jwks(&[key("new.pub"), key("old.pub"), key("rsa.pub")]).expect("jwks");
    // `openssl pkey -pubin -outform DER | openssl dgst -sha256 -binary | base64 | tr '+/' '-_' | tr -d =`
    let kids: Vec<&str> = set.keys.iter().map(|k| k.kid.as_str()).collect();
    assert_eq!(
        kids,
        [
            "vNGxtjjUvvdpnXE04NBSTtbqDSL2PgBg-1bXwSQtoyY",
            "80CoBy7L9jrQyqjREYfbJ4jB2DIc4YyksmCq7dUh09g",
            "1FXizOI5JMsH6ijmzxn6T_lMO1vCeYg8N86AuIDmLgw",
        ]
    );
    // The old key's X coordinate as `openssl pkey -text` prints it, base64url-encoded by Python.
    assert_eq!(
        set.keys[1].x.as_deref(),
        Some("Z0mcWZ2Uxvf8JcLUBzjgrN6fLxTMWLD6ekDvXfFleeA")
    );
    assert_eq!(set.keys[0].alg, "ES256");
    assert_eq!(set.keys[2].alg, "RS256");
    let config = openid_configuration(ISSUER, &set);
    let mut failures = Vec::new();
    for (file, text) in [
        ("openid-configuration.json", to_json(&config)),
        ("jwks.json", to_json(&set)),
    ] {
        if let Err(e) = ballast_testutil::check(&data().join(file), &text) {
            failures.push(e.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_key_given_twice_is_published_once_and_junk_is_refused() {
    let set = jwks(&[key("old.pub"), key("old.pub")]).expect("jwks");
    assert_eq!(set.keys.len(), 1);
    let error = jwks(&[key("old.pub"), "not a key".to_string()]).expect_err("junk");
    assert!(error.to_string().starts_with("public key 1:"), "{error}");
}

/// The new key is published from stage `add` (before any API server signs with it: it is `next`), both keys
/// through `promote` (the new one signs, the old one's tokens are still in flight), and the old one leaves only
/// at `drop`.
#[test]
fn a_rotation_publishes_the_new_key_from_add_and_drops_the_old_at_drop() {
    let paths = ClusterPaths::new("demo.example.com");
    let original = KeysetItem {
        id: "0000000000000002".into(),
        created: None,
        expires: None,
        state: KeyState::Primary,
        original: true,
    };
    let new_item = || KeysetItem {
        id: "3333333333333333".into(),
        created: None,
        expires: None,
        state: KeyState::Next,
        original: false,
    };
    let old_key = "demo.example.com/pki/service-account/public.pem".to_string();
    let new_key = "demo.example.com/pki/service-account/3333333333333333/public.pem".to_string();

    assert_eq!(
        published_public_keys(&paths, None),
        vec![old_key.clone()],
        "never rotated"
    );
    let mut keyset = Keyset::new(KeysetName::ServiceAccount, original);
    let mut published = Vec::new();
    for stage in [Stage::Add, Stage::Promote, Stage::Drop] {
        keyset = match keyset.stage(stage, None, new_item) {
            Ok(StageOutcome::Changed { keyset, .. }) => keyset,
            other => panic!("{stage:?}: {other:?}"),
        };
        let key_use = keyset.key_use().expect("key use");
        published.push((stage, published_public_keys(&paths, Some(&key_use))));
    }
    assert_eq!(
        published,
        vec![
            (Stage::Add, vec![old_key.clone(), new_key.clone()]),
            (Stage::Promote, vec![new_key.clone(), old_key]),
            (Stage::Drop, vec![new_key]),
        ]
    );
}
