//! A CNI's upstream manifest, parsed into objects (pure): multi-document YAML, each document a Kubernetes object
//! with `apiVersion`, `kind` and `metadata.name` (a `kind: List` is flattened), and every container image in it
//! rewritten to its pinned `tag@sha256:...` reference. An image the manifest names but the release does not pin
//! is refused: it would not be in the AMI, so the node would have to download it.

use std::collections::BTreeMap;

use ballast_state::components::PinnedImage;
use serde::Deserialize;
use serde_json::Value;

use super::{AddonError, AddonObject};

/// The objects of `addon`'s manifest `text`, images pinned from `images`.
pub fn parse(
    addon: &str,
    text: &str,
    images: &BTreeMap<String, PinnedImage>,
) -> Result<Vec<AddonObject>, AddonError> {
    let pinned: BTreeMap<&str, String> = images
        .iter()
        .map(|(name, image)| {
            image
                .pinned_reference()
                .map(|r| (image.reference.as_str(), r))
                .ok_or_else(|| AddonError::ImageUnpinned {
                    addon: addon.to_string(),
                    image: name.clone(),
                    reference: image.reference.clone(),
                })
        })
        .collect::<Result<_, _>>()?;
    let mut objects = Vec::new();
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let value =
            Value::deserialize(document).map_err(|source| AddonError::ManifestUnreadable {
                addon: addon.to_string(),
                document: index + 1,
                source,
            })?;
        match value {
            // An empty document (`---` twice, or a trailing one).
            Value::Null => {}
            Value::Object(_) if value.get("kind").and_then(Value::as_str) == Some("List") => {
                let items = value.get("items").and_then(Value::as_array).cloned();
                for item in items.unwrap_or_default() {
                    objects.push(object(addon, index + 1, item, &pinned)?);
                }
            }
            other => objects.push(object(addon, index + 1, other, &pinned)?),
        }
    }
    if objects.is_empty() {
        return Err(AddonError::ManifestEmpty {
            addon: addon.to_string(),
        });
    }
    Ok(objects)
}

fn object(
    addon: &str,
    document: usize,
    mut value: Value,
    pinned: &BTreeMap<&str, String>,
) -> Result<AddonObject, AddonError> {
    let incomplete = |field: &'static str| AddonError::ManifestObjectIncomplete {
        addon: addon.to_string(),
        document,
        field,
    };
    if !value.is_object() {
        return Err(incomplete("apiVersion"));
    }
    for (field, present) in [
        (
            "apiVersion",
            value.get("apiVersion").and_then(Value::as_str),
        ),
        ("kind", value.get("kind").and_then(Value::as_str)),
        (
            "metadata.name",
            value.pointer("/metadata/name").and_then(Value::as_str),
        ),
    ] {
        if present.is_none_or(str::is_empty) {
            return Err(incomplete(field));
        }
    }
    let mut unpinned = Vec::new();
    pin_images(&mut value, pinned, &mut unpinned);
    let object = AddonObject::new(addon, value);
    if let Some(image) = unpinned.into_iter().next() {
        return Err(AddonError::ManifestImageNotPinned {
            addon: addon.to_string(),
            object: object.describe(),
            image,
        });
    }
    Ok(object)
}

/// Rewrites `image` of every container (containers, initContainers, ephemeralContainers, at any depth) to its
/// pinned reference; collects the images no pin covers.
fn pin_images(value: &mut Value, pinned: &BTreeMap<&str, String>, unpinned: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                let containers = matches!(
                    key.as_str(),
                    "containers" | "initContainers" | "ephemeralContainers"
                );
                match child {
                    Value::Array(items) if containers => {
                        for container in items.iter_mut() {
                            if let Some(Value::String(image)) = container.get_mut("image") {
                                // A digest upstream wrote is replaced by ours: the pin is the authority.
                                let tagged = image.split('@').next().unwrap_or(image).to_string();
                                match pinned.get(tagged.as_str()) {
                                    Some(reference) => *image = reference.clone(),
                                    None => unpinned.push(image.clone()),
                                }
                            }
                        }
                    }
                    _ => pin_images(child, pinned, unpinned),
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                pin_images(item, pinned, unpinned);
            }
        }
        _ => {}
    }
}
