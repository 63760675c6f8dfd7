//! A CNI's upstream manifest, parsed into objects (pure): multi-document YAML, each document a Kubernetes object
//! with `apiVersion`, `kind` and `metadata.name` (a `kind: List` is flattened), and every container image in it
//! rewritten to its pinned `tag@sha256:...` reference with `imagePullPolicy: IfNotPresent`. An image the manifest
//! names but the release does not pin is refused: it would not be in the AMI, so the node would have to
//! download it. The pull policy is rewritten because upstream's `Always` (the Amazon VPC CNI's init container
//! and network-policy agent) makes the kubelet ask the registry at every container start even for a baked
//! image: a node without a route to the registry (a private subnet's first boot) could not start its CNI.

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

/// The `aws-node` container's `CLUSTER_NAME`: amazon-vpc then tags every ENI it creates with
/// `cluster.k8s.amazonaws.com/name=<cluster>`, the tag its IAM permissions are held to (ctl's `cloud::cni`).
/// Without it the CNI could create no ENI under those permissions, so a manifest without the container is
/// refused rather than applied.
pub fn name_the_cluster_to_amazon_vpc(
    objects: &mut [AddonObject],
    cluster: &str,
) -> Result<(), AddonError> {
    let container = aws_node_container(
        objects,
        "container aws-node in DaemonSet aws-node (it must carry CLUSTER_NAME)",
    )?;
    let Some(fields) = container.as_object_mut() else {
        return Ok(()); // found by its name, so an object
    };
    let env = fields
        .entry("env")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !env.is_array() {
        *env = Value::Array(Vec::new());
    }
    if let Value::Array(vars) = env {
        vars.retain(|v| v.get("name").and_then(Value::as_str) != Some("CLUSTER_NAME"));
        vars.push(serde_json::json!({"name": "CLUSTER_NAME", "value": cluster}));
    }
    Ok(())
}

const AWS_NODE: &str = "aws-node";

/// The pod spec of the `aws-node` DaemonSet, or an error naming `what` was looked for.
fn aws_node_pod<'a>(
    objects: &'a mut [AddonObject],
    what: &'static str,
) -> Result<&'a mut Value, AddonError> {
    objects
        .iter_mut()
        .filter(|o| {
            o.value.get("kind").and_then(Value::as_str) == Some("DaemonSet")
                && o.value.pointer("/metadata/name").and_then(Value::as_str) == Some(AWS_NODE)
        })
        .filter_map(|o| o.value.pointer_mut("/spec/template/spec"))
        .find(|pod| {
            pod.get("containers")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c.get("name").and_then(Value::as_str) == Some(AWS_NODE))
                })
        })
        .ok_or_else(|| AddonError::ManifestObjectMissing {
            addon: "amazon-vpc".to_string(),
            what,
        })
}

/// The `aws-node` container of the `aws-node` DaemonSet.
fn aws_node_container<'a>(
    objects: &'a mut [AddonObject],
    what: &'static str,
) -> Result<&'a mut Value, AddonError> {
    aws_node_pod(objects, what)?
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .and_then(|c| {
            c.iter_mut()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(AWS_NODE))
        })
        .ok_or_else(|| AddonError::ManifestObjectMissing {
            addon: "amazon-vpc".to_string(),
            what,
        })
}

/// With IRSA on (the node spec's `addonRoles.awsNode`), the `aws-node` container calls AWS as `role_arn`, not as
/// the instance role, which then holds none of its ENI permissions (ctl's `cloud::cni`). The same projected
/// `amazonaws.com` token, `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE` the cloud controller manager gets
/// (`objects::on_web_identity`, whose typed pieces are merged here into upstream's untyped DaemonSet), written
/// into the DaemonSet itself: aws-node runs with the host network before any pod can, so the Pod Identity
/// Webhook (and its `kube-system` exclusion) never sees it. Only the `aws-node` container: the init container
/// and the network-policy agent call no AWS API.
pub fn run_amazon_vpc_on_web_identity(
    objects: &mut [AddonObject],
    role_arn: &str,
) -> Result<(), AddonError> {
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    let mut typed = PodSpec {
        containers: vec![Container {
            name: AWS_NODE.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    super::objects::on_web_identity(&mut typed, &[AWS_NODE], role_arn);
    let serialize = |v: serde_json::Result<Value>| {
        v.map_err(|source| AddonError::Serialize {
            addon: "amazon-vpc".to_string(),
            object: "DaemonSet".to_string(),
            source,
        })
    };
    let container = typed.containers.remove(0);
    let volumes = serialize(serde_json::to_value(typed.volumes.unwrap_or_default()))?;
    let mounts = serialize(serde_json::to_value(
        container.volume_mounts.unwrap_or_default(),
    ))?;
    let env = serialize(serde_json::to_value(container.env.unwrap_or_default()))?;
    let fs_group = typed.security_context.and_then(|c| c.fs_group);
    const WHAT: &str = "container aws-node in DaemonSet aws-node (it gets the web identity token)";
    let pod = aws_node_pod(objects, WHAT)?;
    let Some(pod) = pod.as_object_mut() else {
        return Ok(()); // found as an object with containers
    };
    append(pod, "volumes", volumes);
    if let Some(fs_group) = fs_group {
        let context = pod
            .entry("securityContext")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(context) = context.as_object_mut() {
            context.entry("fsGroup").or_insert(Value::from(fs_group));
        }
    }
    let container = aws_node_container(objects, WHAT)?;
    let Some(container) = container.as_object_mut() else {
        return Ok(());
    };
    append(container, "volumeMounts", mounts);
    if let Value::Array(new) = &env {
        // Upstream's own AWS_ROLE_ARN or token file, if it ever sets one, gives way to the role's.
        if let Some(Value::Array(vars)) = container.get_mut("env") {
            vars.retain(|v| !new.iter().any(|n| n.get("name") == v.get("name")));
        }
    }
    append(container, "env", env);
    Ok(())
}

/// Appends the items of `items` (an array) to the array `key` of `object`, made when absent or not an array.
fn append(object: &mut serde_json::Map<String, Value>, key: &str, items: Value) {
    let Value::Array(items) = items else {
        return;
    };
    let list = object
        .entry(key)
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(list) = list {
        list.extend(items);
    }
}

/// The pull policy of every container whose image is baked: present on the node, so never pulled.
pub const PULL_POLICY: &str = "IfNotPresent";

/// Rewrites `image` of every container (containers, initContainers, ephemeralContainers, at any depth) to its
/// pinned reference, and its `imagePullPolicy` to [`PULL_POLICY`]; collects the images no pin covers.
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
                            let Some(fields) = container.as_object_mut() else {
                                continue;
                            };
                            let Some(Value::String(image)) = fields.get_mut("image") else {
                                continue;
                            };
                            // A digest upstream wrote is replaced by ours: the pin is the authority.
                            let tagged = image.split('@').next().unwrap_or(image).to_string();
                            match pinned.get(tagged.as_str()) {
                                Some(reference) => {
                                    *image = reference.clone();
                                    fields.insert(
                                        "imagePullPolicy".to_string(),
                                        Value::String(PULL_POLICY.to_string()),
                                    );
                                }
                                None => unpinned.push(image.clone()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn daemon_set(container: &str, env: Value) -> AddonObject {
        AddonObject::new(
            "amazon-vpc",
            serde_json::json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": "aws-node", "namespace": "kube-system"},
                "spec": {"template": {"spec": {"containers": [{"name": container, "env": env}]}}}}),
        )
    }

    #[test]
    fn aws_node_is_told_the_clusters_name_once() {
        let mut objects = vec![daemon_set(
            "aws-node",
            serde_json::json!([{"name": "CLUSTER_NAME", "value": "stale"}, {"name": "WARM_ENI_TARGET", "value": "1"}]),
        )];
        name_the_cluster_to_amazon_vpc(&mut objects, "demo.example.com").expect("named");
        let env = objects[0]
            .value
            .pointer("/spec/template/spec/containers/0/env")
            .expect("env");
        assert_eq!(
            env,
            &serde_json::json!([{"name": "WARM_ENI_TARGET", "value": "1"},
                {"name": "CLUSTER_NAME", "value": "demo.example.com"}])
        );
    }

    fn pinned(reference: &str) -> PinnedImage {
        PinnedImage {
            reference: reference.to_string(),
            digest: ballast_state::components::ImageDigest::Pinned("ab".repeat(32)),
            digest_kind: Some(ballast_state::components::DigestKind::Index),
            provenance: None,
            reason: None,
        }
    }

    #[test]
    fn baked_images_are_never_pulled_whatever_upstream_says() {
        // Upstream's shape: `Always` on the init container and on the network-policy agent, none on aws-node.
        let manifest = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: aws-node, namespace: kube-system}
spec:
  template:
    spec:
      initContainers:
        - name: aws-vpc-cni-init
          image: example.test/amazon-k8s-cni-init:v1.19.5
          imagePullPolicy: Always
      containers:
        - name: aws-node
          image: example.test/amazon-k8s-cni:v1.19.5
        - name: aws-eks-nodeagent
          image: example.test/amazon/aws-network-policy-agent:v1.2.1
          imagePullPolicy: Always
"#;
        let images = BTreeMap::from([
            (
                "init".to_string(),
                pinned("example.test/amazon-k8s-cni-init:v1.19.5"),
            ),
            (
                "cni".to_string(),
                pinned("example.test/amazon-k8s-cni:v1.19.5"),
            ),
            (
                "agent".to_string(),
                pinned("example.test/amazon/aws-network-policy-agent:v1.2.1"),
            ),
        ]);
        let objects = parse("amazon-vpc", manifest, &images).expect("parsed");
        let spec = objects[0]
            .value
            .pointer("/spec/template/spec")
            .expect("pod spec");
        let containers = ["/initContainers/0", "/containers/0", "/containers/1"];
        for path in containers {
            let container = spec.pointer(path).expect(path);
            assert_eq!(
                container.get("imagePullPolicy").and_then(Value::as_str),
                Some(PULL_POLICY),
                "{path}: {container}"
            );
            let image = container
                .get("image")
                .and_then(Value::as_str)
                .expect("image");
            assert!(
                image.ends_with(&format!("@sha256:{}", "ab".repeat(32))),
                "{image}"
            );
        }
        // No `Always` is left anywhere in what nodeup applies.
        let text = serde_json::to_string(&objects[0].value).expect("json");
        assert!(!text.contains("\"Always\""), "{text}");
    }

    #[test]
    fn an_image_no_pin_covers_is_refused_not_pulled() {
        let manifest = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: c\n      image: example.test/other:v1\n      imagePullPolicy: Always\n";
        let images = BTreeMap::from([(
            "cni".to_string(),
            pinned("example.test/amazon-k8s-cni:v1.19.5"),
        )]);
        let err = parse("amazon-vpc", manifest, &images).expect_err("unpinned image");
        assert!(err.to_string().contains("example.test/other:v1"), "{err}");
    }

    #[test]
    fn a_manifest_without_the_aws_node_container_is_refused() {
        let mut objects = vec![daemon_set("something-else", Value::Null)];
        let err = name_the_cluster_to_amazon_vpc(&mut objects, "demo.example.com")
            .expect_err("no aws-node container");
        assert!(err.to_string().contains("container aws-node"), "{err}");
    }
}
