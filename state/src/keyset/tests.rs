use super::*;

fn item(id: &str, state: KeyState) -> KeysetItem {
    KeysetItem {
        id: id.into(),
        created: Some("2026-01-01T00:00:00Z".into()),
        expires: None,
        state,
        original: id == "old",
    }
}

fn original(name: KeysetName) -> Keyset {
    Keyset::new(name, item("old", KeyState::Primary))
}

fn changed(outcome: Result<StageOutcome, StageError>) -> Keyset {
    match outcome {
        Ok(StageOutcome::Changed { keyset, .. }) => keyset,
        other => panic!("expected a change, got {other:?}"),
    }
}

fn states(keyset: &Keyset) -> Vec<(&str, KeyState)> {
    keyset
        .items
        .iter()
        .map(|i| (i.id.as_str(), i.state))
        .collect()
}

fn add(keyset: &Keyset) -> Result<StageOutcome, StageError> {
    keyset.stage(Stage::Add, None, || item("new", KeyState::Next))
}

fn no_key() -> KeysetItem {
    panic!("only add makes a key")
}

#[test]
fn a_ca_rotation_goes_add_promote_drop_and_each_stage_is_idempotent() {
    let start = original(KeysetName::EtcdCa);
    let added = changed(add(&start));
    assert_eq!(
        states(&added),
        [("old", KeyState::Primary), ("new", KeyState::Next)]
    );
    assert!(matches!(add(&added), Ok(StageOutcome::AlreadyDone { .. })));

    let promoted = changed(added.stage(Stage::Promote, None, no_key));
    assert_eq!(
        states(&promoted),
        [("old", KeyState::Trusted), ("new", KeyState::Primary)]
    );
    assert!(matches!(
        promoted.stage(Stage::Promote, None, no_key),
        Ok(StageOutcome::AlreadyDone { .. })
    ));

    let dropped = changed(promoted.stage(Stage::Drop, None, no_key));
    assert_eq!(
        states(&dropped),
        [("old", KeyState::Distrusted), ("new", KeyState::Primary)]
    );
    assert!(matches!(
        dropped.stage(Stage::Drop, None, no_key),
        Ok(StageOutcome::AlreadyDone { .. })
    ));
    // A distrusted key is kept (nothing destroyed), and a new rotation can start.
    assert_eq!(dropped.items.len(), 2);
    assert!(matches!(add(&dropped), Ok(StageOutcome::Changed { .. })));
}

#[test]
fn stages_out_of_order_are_refused_with_the_reason() {
    let start = original(KeysetName::EtcdCa);
    let err = start
        .stage(Stage::Promote, None, no_key)
        .expect_err("nothing to promote");
    assert_eq!(
        err,
        StageError::NothingStaged {
            keyset: KeysetName::EtcdCa
        }
    );
    assert!(err.to_string().contains("--stage add"), "{err}");

    let added = changed(add(&start));
    let err = added
        .stage(Stage::Drop, None, no_key)
        .expect_err("drop before promote");
    assert!(matches!(err, StageError::NotPromoted { .. }), "{err}");
    assert!(err.to_string().contains("--stage promote"), "{err}");

    let promoted = changed(added.stage(Stage::Promote, None, no_key));
    let err = add(&promoted).expect_err("add while the old key is still trusted");
    assert!(
        matches!(err, StageError::RotationInProgress { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("--stage drop"), "{err}");

    let err = promoted
        .stage(Stage::Rewrite, None, no_key)
        .expect_err("rewrite is for the encryption key");
    assert!(
        matches!(err, StageError::RewriteNotApplicable { .. }),
        "{err}"
    );
}

#[test]
fn the_encryption_key_is_dropped_only_after_the_secrets_are_rewritten() {
    let start = original(KeysetName::EncryptionKey);
    let err = start
        .stage(Stage::Rewrite, None, no_key)
        .expect_err("nothing to rewrite yet");
    assert!(matches!(err, StageError::NothingToRewrite { .. }), "{err}");
    let added = changed(add(&start));
    let err = added
        .stage(Stage::Rewrite, None, no_key)
        .expect_err("rewrite before promote");
    assert!(matches!(err, StageError::NotPromoted { .. }), "{err}");
    let promoted = changed(added.stage(Stage::Promote, None, no_key));
    let err = promoted
        .stage(Stage::Drop, None, no_key)
        .expect_err("drop before rewrite");
    assert!(matches!(err, StageError::NotRewritten { .. }), "{err}");
    assert!(err.to_string().contains("--stage rewrite"), "{err}");
    let rewritten = changed(promoted.stage(Stage::Rewrite, None, no_key));
    assert_eq!(rewritten.rewritten_with.as_deref(), Some("new"));
    assert!(matches!(
        rewritten.stage(Stage::Rewrite, None, no_key),
        Ok(StageOutcome::AlreadyDone { .. })
    ));
    let dropped = changed(rewritten.stage(Stage::Drop, None, no_key));
    assert_eq!(
        states(&dropped),
        [("old", KeyState::Distrusted), ("new", KeyState::Primary)]
    );
}

#[test]
fn an_id_must_name_the_key_the_stage_acts_on() {
    let added = changed(add(&original(KeysetName::ServiceAccount)));
    let err = added
        .stage(Stage::Promote, Some("nosuchkey"), no_key)
        .expect_err("unknown id");
    assert!(matches!(err, StageError::UnknownKey { .. }), "{err}");
    assert!(err.to_string().contains("old, new"), "{err}");
    let err = added
        .stage(Stage::Promote, Some("old"), no_key)
        .expect_err("old is not the one promoted");
    assert!(matches!(err, StageError::WrongKey { .. }), "{err}");
    assert!(matches!(
        added.stage(Stage::Promote, Some("new"), no_key),
        Ok(StageOutcome::Changed { .. })
    ));
}

#[test]
fn nodes_use_the_primary_and_trust_next_then_trusted() {
    let paths = ClusterPaths::new("c");
    let start = original(KeysetName::EncryptionKey);
    let order = |k: &Keyset| {
        let mut keys = NodeKeys::default();
        keys.set(k.name, k.key_use().expect("key use"));
        keys.locations(&paths).encryption_key_names.expect("names")
    };
    let added = changed(add(&start));
    assert_eq!(order(&added), ["old", "new"]);
    let promoted = changed(added.stage(Stage::Promote, None, no_key));
    assert_eq!(order(&promoted), ["new", "old"]);
    let rewritten = changed(promoted.stage(Stage::Rewrite, None, no_key));
    let dropped = changed(rewritten.stage(Stage::Drop, None, no_key));
    assert_eq!(order(&dropped), ["new"]);

    // CAs: the primary issues from its own paths (the original's are the ones create cluster wrote).
    let ca =
        changed(changed(add(&original(KeysetName::EtcdCa))).stage(Stage::Promote, None, no_key));
    let mut keys = NodeKeys::default();
    keys.set(ca.name, ca.key_use().expect("key use"));
    let at = keys.locations(&paths);
    assert_eq!(
        at.etcd_ca_cert.as_deref(),
        Some("c/pki/etcd-ca/new/cert.pem")
    );
    assert_eq!(at.etcd_ca_key.as_deref(), Some("c/pki/etcd-ca/new/key.pem"));
    assert_eq!(at.etcd_ca_trusted, ["c/pki/etcd-ca/cert.pem"]);
    assert_eq!(
        at.kubernetes_ca_cert, None,
        "a keyset never rotated changes nothing"
    );
}

#[test]
fn a_damaged_keyset_is_refused() {
    let mut two = original(KeysetName::KubernetesCa);
    two.items.push(item("other", KeyState::Primary));
    assert!(matches!(two.check(), Err(StageError::Damaged { .. })));
    let mut none = original(KeysetName::KubernetesCa);
    none.items[0].state = KeyState::Trusted;
    assert!(matches!(none.key_use(), Err(StageError::Damaged { .. })));
    let text = yaml_serde::to_string(&original(KeysetName::KubernetesCa)).expect("yaml");
    assert!(text.contains("name: kubernetes-ca"), "{text}");
    assert_eq!(KeysetName::parse("etcd-ca"), Ok(KeysetName::EtcdCa));
    assert!(KeysetName::parse("etcd").is_err());
}

#[test]
fn an_import_is_allowed_only_where_add_would_stage_it() {
    let start = original(KeysetName::KubernetesCa);
    assert_eq!(start.check_import("imported"), Ok(None));
    // Already the staged key: nothing to do. Another staged key: refused, naming it.
    let mut staged = start.clone();
    staged.items.push(item("imported", KeyState::Next));
    assert!(matches!(staged.check_import("imported"), Ok(Some(_))));
    assert!(matches!(
        staged.check_import("another"),
        Err(StageError::AlreadyStaged { ref next, .. }) if next == "imported"
    ));
    // The primary itself, or while an old key is still trusted: refused.
    assert!(matches!(
        start.check_import("old"),
        Err(StageError::AlreadyInKeyset {
            state: "primary",
            ..
        })
    ));
    let promoted = changed(changed(add(&start)).stage(Stage::Promote, None, no_key));
    assert!(matches!(
        promoted.check_import("imported"),
        Err(StageError::RotationInProgress { .. })
    ));
    // Only CAs.
    for name in [KeysetName::ServiceAccount, KeysetName::EncryptionKey] {
        assert!(matches!(
            original(name).check_import("imported"),
            Err(StageError::NotImportable { .. })
        ));
    }
    assert_eq!(
        original(KeysetName::EtcdCa).check_import("imported"),
        Ok(None)
    );
}
