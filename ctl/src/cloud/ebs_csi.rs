//! What the EBS CSI driver's controller needs from AWS (pure): statements of the control-plane role's policy.
//!
//! Every cluster runs the driver (nodeup's add-on set, `nodeup/src/addons/ebs_csi.rs`); its controller runs on
//! control-plane nodes only, so only their role gets these, and workers get none (the node plugin formats and
//! mounts devices already attached, and reads its zone from the instance metadata).
//!
//! Held to the cluster's volumes, as upstream's example policy scopes them, and tighter:
//! - reads (`Describe*`, which AWS does not scope by resource) on `*`;
//! - `ec2:CreateVolume` only when the request carries both the cluster's ownership tag
//!   `kubernetes.io/cluster/<name>=owned` (the controller's `--k8s-tag-cluster-id`) and the driver's own
//!   `ebs.csi.aws.com/cluster=true`, and `ec2:CreateTags` only as part of that creation;
//! - attach, detach, modify and delete only volumes carrying both tags: so never an etcd member's volume (which
//!   carries the cluster's tag but not the driver's), nor another cluster's or the account's; attach and detach
//!   only to and from the cluster's own instances.
//!
//! No snapshots: Ballast installs no snapshot controller and no csi-snapshotter, so nothing asks for one.

use serde_json::{json, Value};

use super::aws::ownership_tag;

/// The tag the driver puts on every volume it creates.
pub const DRIVER_TAG: &str = "ebs.csi.aws.com/cluster";

/// The EBS CSI controller's statements for the control-plane role of `cluster`.
pub fn ebs_csi_iam_statements(cluster: &str) -> Vec<Value> {
    let owned = ownership_tag(cluster);
    let request = json!({
        format!("aws:RequestTag/{owned}"): "owned",
        format!("aws:RequestTag/{DRIVER_TAG}"): "true",
    });
    let resource = json!({
        format!("aws:ResourceTag/{owned}"): "owned",
        format!("aws:ResourceTag/{DRIVER_TAG}"): "true",
    });
    let mut tag_on_create = request.clone();
    tag_on_create["ec2:CreateAction"] = json!(["CreateVolume"]);
    vec![
        // Where to create (zones), which instance a node is, and the volumes and their changes in progress.
        json!({"Sid": "EbsCsiRead", "Effect": "Allow", "Resource": "*", "Action": [
            "ec2:DescribeAvailabilityZones", "ec2:DescribeInstances", "ec2:DescribeTags",
            "ec2:DescribeVolumes", "ec2:DescribeVolumesModifications"]}),
        json!({"Sid": "EbsCsiCreateOwnedVolumes", "Effect": "Allow", "Action": ["ec2:CreateVolume"],
            "Resource": ["arn:aws:ec2:*:*:volume/*"], "Condition": {"StringEquals": request}}),
        // Tags only as part of creating such a volume: it cannot tag (and so claim) a volume that exists.
        json!({"Sid": "EbsCsiTagNewVolumes", "Effect": "Allow", "Action": ["ec2:CreateTags"],
            "Resource": ["arn:aws:ec2:*:*:volume/*"], "Condition": {"StringEquals": tag_on_create}}),
        // AWS checks each resource of AttachVolume and DetachVolume on its own: the volume here, the instance
        // below.
        json!({"Sid": "EbsCsiManageOwnedVolumes", "Effect": "Allow", "Action": [
            "ec2:AttachVolume", "ec2:DetachVolume", "ec2:ModifyVolume", "ec2:DeleteVolume"],
            "Resource": ["arn:aws:ec2:*:*:volume/*"], "Condition": {"StringEquals": resource}}),
        json!({"Sid": "EbsCsiAttachToOwnInstances", "Effect": "Allow",
            "Action": ["ec2:AttachVolume", "ec2:DetachVolume"],
            "Resource": ["arn:aws:ec2:*:*:instance/*"],
            "Condition": {"StringEquals": {format!("aws:ResourceTag/{owned}"): "owned"}}}),
    ]
}

#[cfg(test)]
mod tests {
    use ballast_state::spec::Role;

    use super::*;

    const CLUSTER: &str = "demo.example.com";

    fn actions(statement: &Value) -> Vec<&str> {
        statement["Action"]
            .as_array()
            .expect("actions")
            .iter()
            .filter_map(Value::as_str)
            .collect()
    }

    #[test]
    fn every_change_is_held_to_the_clusters_volumes_and_instances() {
        let owned = format!("kubernetes.io/cluster/{CLUSTER}");
        for statement in ebs_csi_iam_statements(CLUSTER) {
            let changes: Vec<&str> = actions(&statement)
                .into_iter()
                .filter(|a| !a.starts_with("ec2:Describe"))
                .collect();
            if changes.is_empty() {
                assert_eq!(statement["Resource"], "*", "{statement}");
                continue;
            }
            assert_ne!(statement["Resource"], "*", "{statement}");
            let condition = &statement["Condition"]["StringEquals"];
            let on_volumes = statement["Resource"] == json!(["arn:aws:ec2:*:*:volume/*"]);
            if on_volumes {
                // Both tags, as a request (creating) or on the volume (everything else).
                let by_request = condition[format!("aws:RequestTag/{owned}")] == "owned"
                    && condition[format!("aws:RequestTag/{DRIVER_TAG}")] == "true";
                let by_resource = condition[format!("aws:ResourceTag/{owned}")] == "owned"
                    && condition[format!("aws:ResourceTag/{DRIVER_TAG}")] == "true";
                assert!(by_request || by_resource, "{statement}");
            } else {
                assert_eq!(
                    statement["Resource"],
                    json!(["arn:aws:ec2:*:*:instance/*"]),
                    "{statement}"
                );
                assert_eq!(changes, ["ec2:AttachVolume", "ec2:DetachVolume"]);
                assert_eq!(condition[format!("aws:ResourceTag/{owned}")], "owned");
            }
        }
    }

    #[test]
    fn tags_only_while_creating_and_no_snapshots() {
        let statements = ebs_csi_iam_statements(CLUSTER);
        let tagging: Vec<&Value> = statements
            .iter()
            .filter(|s| actions(s).contains(&"ec2:CreateTags"))
            .collect();
        assert_eq!(tagging.len(), 1);
        assert_eq!(
            tagging[0]["Condition"]["StringEquals"]["ec2:CreateAction"],
            json!(["CreateVolume"])
        );
        let all: Vec<&str> = statements.iter().flat_map(actions).collect();
        assert!(!all.iter().any(|a| a.contains("Snapshot")), "{all:?}");
    }

    #[test]
    fn only_the_control_plane_role_gets_them_within_the_inline_policy_limit() {
        for (role, policy, sids) in
            super::super::model::role_policies::with_sids("ebs.example.com", "EbsCsi")
        {
            if role == Role::ControlPlane {
                assert_eq!(sids.len(), ebs_csi_iam_statements("x").len(), "{sids:?}");
                assert!(
                    policy.contains("aws:RequestTag/kubernetes.io/cluster/ebs.example.com"),
                    "{policy}"
                );
            } else {
                assert!(sids.is_empty(), "{sids:?}");
                assert!(!policy.contains("ec2:CreateVolume"), "{policy}");
            }
        }
    }
}
