//! Applying the add-on set with server-side apply (I/O): `PATCH` with `application/apply-patch+yaml`, field
//! manager `ballast`, `force` (Ballast owns these fields; another control-plane node applying the same set at
//! the same moment writes the same values under the same manager, so the race is harmless).
//!
//! Each object carries the sha256 of its content in [`APPLIED_HASH_ANNOTATION`]; an object the API already has
//! with that hash is left alone, so a second run (a restart, another control-plane node) writes nothing. A 409
//! conflict, a 429 or a 5xx is retried through `retry::ADDON_APPLY` (bounded, jittered doubling); anything else
//! stops the run with the object named.

use crate::retry::Policy;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::Value;

use super::{AddonObject, AddonSet, APPLIED_HASH_ANNOTATION, FIELD_MANAGER};

/// What happened to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ObjectAction {
    /// Created or changed by our apply.
    Applied,
    /// The API already had it as we would apply it: nothing written.
    Unchanged,
}

/// One object's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedObject {
    pub addon: String,
    /// `Kind namespace/name`.
    pub object: String,
    pub action: ObjectAction,
    /// Attempts it took (more than 1: a conflict or a busy server was retried).
    pub attempts: u32,
}

/// Why applying stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("add-on {addon}: reading {object} from the API: {source}")]
    Read {
        addon: String,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("add-on {addon}: applying {object} failed after {attempts} attempt(s): {source}")]
    Apply {
        addon: String,
        object: String,
        attempts: u32,
        #[source]
        source: kube::Error,
    },
}

/// Applies every object of `set` in order; stops at the first object that cannot be applied.
pub async fn apply_set(
    client: &Client,
    set: &AddonSet,
    retry: Policy,
) -> Result<Vec<AppliedObject>, ApplyError> {
    let mut outcomes = Vec::with_capacity(set.objects.len());
    for object in &set.objects {
        outcomes.push(apply_one(client, object, retry).await?);
    }
    Ok(outcomes)
}

/// The API path of an object: group/version from `apiVersion`, the plural guessed from the kind as kube does
/// (every kind Ballast writes and every kind the pinned CNI manifests hold pluralizes regularly), namespaced
/// when the object names a namespace.
fn api_for(client: &Client, object: &AddonObject) -> Api<DynamicObject> {
    let (group, version) = match object.api_version().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", object.api_version()),
    };
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, object.kind()));
    match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The object with the hash of its content in [`APPLIED_HASH_ANNOTATION`].
fn annotated(object: &AddonObject) -> (Value, String) {
    let hash = object.content_sha256();
    let mut value = object.value.clone();
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = annotations.as_object_mut() {
            map.insert(
                APPLIED_HASH_ANNOTATION.to_string(),
                Value::String(hash.clone()),
            );
        }
    }
    (value, hash)
}

fn retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 409 || status.code == 429 || status.code >= 500,
        // The API server restarting (a static pod being replaced) drops connections.
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

async fn apply_one(
    client: &Client,
    object: &AddonObject,
    retry: Policy,
) -> Result<AppliedObject, ApplyError> {
    let api = api_for(client, object);
    let (value, hash) = annotated(object);
    let done = |action, attempts| AppliedObject {
        addon: object.addon.clone(),
        object: object.describe(),
        action,
        attempts,
    };
    let current = api
        .get_opt(object.name())
        .await
        .map_err(|source| ApplyError::Read {
            addon: object.addon.clone(),
            object: object.describe(),
            source,
        })?;
    let applied_hash = current
        .as_ref()
        .and_then(|o| o.metadata.annotations.as_ref())
        .and_then(|a| a.get(APPLIED_HASH_ANNOTATION));
    if applied_hash == Some(&hash) {
        return Ok(done(ObjectAction::Unchanged, 0));
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let attempts = std::sync::atomic::AtomicU32::new(0);
    let (api, params, value, tries) = (&api, &params, &value, &attempts);
    let result = retry
        .retry(
            move || async move {
                tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                api.patch(object.name(), params, &Patch::Apply(value)).await
            },
            retryable,
            |e, pause| {
                tracing::info!(object = %object.describe(), attempt = tries.load(std::sync::atomic::Ordering::Relaxed), error = %e, ?pause, "retrying an add-on apply");
            },
        )
        .await;
    match result {
        Ok(_) => Ok(done(
            ObjectAction::Applied,
            attempts.load(std::sync::atomic::Ordering::Relaxed),
        )),
        Err(source) => Err(ApplyError::Apply {
            addon: object.addon.clone(),
            object: object.describe(),
            attempts: attempts.load(std::sync::atomic::Ordering::Relaxed),
            source,
        }),
    }
}
