//! The cluster's id in the state store (`<cluster>/cluster-id`): a random UUID written once, with
//! `MustNotExist`, so two writers can never give one cluster two ids. Every AWS resource Ballast makes for the
//! cluster carries it (`ballast.dev/cluster-id`); `update cluster` and `delete cluster` change or delete only
//! resources that carry this store's id, so a cluster of the same name in another state store (another bucket or
//! prefix) never owns them (docs/security.md, "Cluster identity").

use ballast_state::layout::{ClusterPaths, InvalidClusterName};

use crate::store::{Precondition, StateStore, StoreError};

/// Failures reading or writing the cluster's id.
#[derive(Debug, thiserror::Error)]
pub enum ClusterIdError {
    #[error(transparent)]
    Name(#[from] InvalidClusterName),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The object holds no id: the store is damaged.
    #[error(
        "{key}: is not a cluster id (a lowercase UUID): the cluster's AWS resources carry its id in their tag \
         ballast.dev/cluster-id; write that value back to {key}"
    )]
    Malformed { key: String },
}

/// A fresh id: a version-4 UUID from the operating system's random source, in its lowercase text form.
pub fn generate() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Whether `text` is an id as [`generate`] writes it (lowercase, hyphenated, 36 characters).
pub fn is_well_formed(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// The cluster's id, if it has one yet (a cluster created before ids has none until its next
/// `update cluster --yes`). A malformed object is a damaged store, named with what to do.
pub async fn read(store: &StateStore, cluster: &str) -> Result<Option<String>, ClusterIdError> {
    let key = ClusterPaths::checked(cluster)?.cluster_id();
    let Some(object) = store.get(&key).await? else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(&object.data).trim().to_string();
    if is_well_formed(&text) {
        Ok(Some(text))
    } else {
        Err(ClusterIdError::Malformed { key })
    }
}

/// The cluster's id, written now if it has none: a conditional create, so of two writers at once one writes and
/// both return the id it wrote.
pub async fn ensure(store: &StateStore, cluster: &str) -> Result<String, ClusterIdError> {
    if let Some(id) = read(store, cluster).await? {
        return Ok(id);
    }
    let key = ClusterPaths::checked(cluster)?.cluster_id();
    let id = generate();
    match store
        .put(&key, format!("{id}\n").as_bytes(), &Precondition::MustNotExist)
        .await
    {
        Ok(_) => Ok(id),
        Err(StoreError::Conflict { .. }) => read(store, cluster).await?.ok_or_else(|| {
            ClusterIdError::Store(StoreError::Conflict {
                key,
                reason: "was written and removed again while this command wrote it; run the command again"
                    .into(),
            })
        }),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_well_formed_and_differ() {
        let a = generate();
        let b = generate();
        assert!(is_well_formed(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(&a[14..15], "4", "version 4: {a}");
        for bad in ["", "x", &a.to_uppercase(), &a[..35], &format!("{a}0")] {
            assert!(!is_well_formed(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn an_id_is_written_once_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = StateStore::open(
            &format!("file://{}", dir.path().join("state").display()),
            crate::store::StoreOptions::default(),
        )
        .await
        .expect("store");
        assert_eq!(read(&store, "a.example.com").await.expect("read"), None);
        let first = ensure(&store, "a.example.com").await.expect("ensure");
        assert_eq!(ensure(&store, "a.example.com").await.expect("again"), first);
        assert_eq!(
            read(&store, "a.example.com").await.expect("read"),
            Some(first)
        );
        store
            .put(
                &ClusterPaths::new("a.example.com").cluster_id(),
                b"not an id",
                &Precondition::None,
            )
            .await
            .expect("put");
        let err = read(&store, "a.example.com").await.expect_err("corrupt");
        assert!(err.to_string().contains("cluster-id"), "{err}");
    }
}
