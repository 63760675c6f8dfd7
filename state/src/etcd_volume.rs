//! etcd's EBS volumes, one per member: how `update cluster` tags them and how nodeup finds its own.
//!
//! The volume is the member's identity (as in kops's etcd-manager): it is found by its tags in the instance's
//! zone, never by an id recorded anywhere, so a replacement instance of the same control-plane group finds the
//! volume its predecessor held and the member comes back with its ID and data. Pure: names and tags only.

use std::collections::BTreeMap;

/// The tag naming the instance group a volume's member lives in (the same key instances carry).
pub const GROUP_TAG: &str = "ballast.dev/instance-group";
/// The tag naming the etcd member whose data a volume holds.
pub const ETCD_MEMBER_TAG: &str = "ballast.dev/etcd-member";
/// The tag recording the spec's `etcd.kmsKeyId` a volume was created with (absent: the account's default EBS
/// key). AWS reports only the key's ARN, and a spec may name the key by alias, so the spec's own words are kept
/// to tell a changed key from the same key named differently.
pub const ETCD_KMS_KEY_TAG: &str = "ballast.dev/etcd-kms-key";
/// The device name a member's volume is attached as. `/dev/sdf`-`/dev/sdp` are the names AWS recommends for
/// EBS data volumes; on Nitro instances the kernel names it `/dev/nvme<N>n1` and nodeup finds it by the
/// volume id in the NVMe serial number.
pub const ETCD_VOLUME_DEVICE: &str = "/dev/sdf";
/// The filesystem label nodeup gives a volume it formats: a volume with this label, or any filesystem, is never
/// formatted again.
pub const ETCD_VOLUME_LABEL: &str = "ballast-etcd";

/// `<member>.etcd.<cluster>`: the `Name` tag of a member's volume.
pub fn volume_name(member: &str, cluster: &str) -> String {
    format!("{member}.etcd.{cluster}")
}

/// The tags a member's volume carries besides the cluster's own (ownership, cluster, cloud labels): its name,
/// its member, its group, and the spec's KMS key when one is named.
pub fn member_volume_tags(
    cluster: &str,
    member: &str,
    group: &str,
    kms_key_id: Option<&str>,
) -> BTreeMap<String, String> {
    let mut tags = BTreeMap::from([
        ("Name".to_string(), volume_name(member, cluster)),
        (ETCD_MEMBER_TAG.to_string(), member.to_string()),
        (GROUP_TAG.to_string(), group.to_string()),
    ]);
    if let Some(key) = kms_key_id {
        tags.insert(ETCD_KMS_KEY_TAG.to_string(), key.to_string());
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_volume_names_its_member_group_and_key() {
        let tags = member_volume_tags("demo.example.com", "a", "control-plane-a", None);
        assert_eq!(tags["Name"], "a.etcd.demo.example.com");
        assert_eq!(tags[ETCD_MEMBER_TAG], "a");
        assert_eq!(tags["ballast.dev/instance-group"], "control-plane-a");
        assert!(!tags.contains_key(ETCD_KMS_KEY_TAG));
        let keyed = member_volume_tags("c", "b", "g", Some("alias/etcd"));
        assert_eq!(keyed[ETCD_KMS_KEY_TAG], "alias/etcd");
    }
}
