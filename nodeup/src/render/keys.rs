//! What a node trusts and uses while a key is rotated (docs/keys.md): trust bundles (the issuing CA certificate
//! or the signing key's public key first, then every other key still trusted) and the encryption keys the node
//! spec names, in its order. Outside a rotation a bundle is the one key and every stored encryption key is used,
//! so the files are exactly as before keysets existed.

use ballast_state::pki::EncryptionKeys;

use super::error::RenderError;

/// `primary` then each of `others`, each ending with a newline. A CA bundle's first certificate is the one
/// whose key signs (the controller manager's signer and etcd's issuer read the first).
pub fn bundle(primary: &str, others: &[String]) -> String {
    let mut text = String::new();
    for pem in std::iter::once(primary).chain(others.iter().map(String::as_str)) {
        text.push_str(pem);
        if !pem.ends_with('\n') {
            text.push('\n');
        }
    }
    text
}

/// The encryption keys the API server is configured with: those `names` lists, in its order (the first
/// encrypts), or every stored key when the spec names none (a key never rotated).
pub fn encryption_keys_in_use(
    stored: &EncryptionKeys,
    names: Option<&[String]>,
) -> Result<EncryptionKeys, RenderError> {
    let Some(names) = names else {
        return Ok(stored.clone());
    };
    let keys = names
        .iter()
        .map(|name| {
            stored
                .keys
                .iter()
                .find(|k| &k.name == name)
                .cloned()
                .ok_or_else(|| RenderError::UnknownEncryptionKey(name.clone()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if keys.is_empty() {
        return Err(RenderError::MissingSecret("an encryption key"));
    }
    Ok(EncryptionKeys { keys })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ballast_state::pki::EncryptionKey;

    fn key(name: &str) -> EncryptionKey {
        EncryptionKey {
            name: name.into(),
            secret: format!("secret-of-{name}"),
        }
    }

    #[test]
    fn the_spec_chooses_the_keys_and_their_order() {
        let stored = EncryptionKeys {
            keys: vec![key("a"), key("b"), key("c")],
        };
        assert!(encryption_keys_in_use(&stored, None).expect("all") == stored);
        let names = ["c".to_string(), "a".to_string()];
        let chosen = encryption_keys_in_use(&stored, Some(&names)).expect("chosen");
        assert!(chosen.keys == vec![key("c"), key("a")]);
        let err = encryption_keys_in_use(&stored, Some(&["z".to_string()])).expect_err("unknown");
        assert!(err.to_string().contains("\"z\""), "{err}");
        assert!(!err.to_string().contains("secret-of"), "{err}");
    }

    #[test]
    fn a_bundle_starts_with_the_primary() {
        assert_eq!(bundle("A\n", &[]), "A\n");
        assert_eq!(
            bundle("A", &["B\n".to_string(), "C".to_string()]),
            "A\nB\nC\n"
        );
    }
}
