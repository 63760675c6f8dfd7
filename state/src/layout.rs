//! Where everything lives in the state store, relative to its root (`s3://bucket/prefix` or `file:///path`).
//! docs/architecture.md shows the same tree; keep them in step.

/// The certificate authorities and keys of a cluster, named as in `pki/<name>/`.
pub mod pki_names {
    /// Signs the API server's, kubelets' and clients' certificates.
    pub const KUBERNETES_CA: &str = "kubernetes-ca";
    /// Signs etcd's peer, server and client certificates.
    pub const ETCD_CA: &str = "etcd-ca";
    /// Signs and verifies service-account tokens (a key pair, no certificate).
    pub const SERVICE_ACCOUNT: &str = "service-account";
    /// The etcd client certificate and key of API-server nodes (`pki/etcd-client-api-server/cert.pem` and
    /// `key.pem`): issued with the etcd CA for them, readable by the API-server role.
    pub const API_SERVER_ETCD_CLIENT: &str = "etcd-client-api-server";
}

/// The objects of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterPaths {
    name: String,
}

/// A cluster name that cannot be a store prefix: it is not a DNS name (`reason` says why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster name: {reason}")]
pub struct InvalidClusterName {
    pub name: String,
    pub reason: crate::validate::ClusterNameError,
}

impl ClusterPaths {
    /// The layout of a cluster whose name is already known to be valid (read from a validated spec, a node
    /// spec, or the store's own listing). Names from outside go through [`ClusterPaths::checked`].
    pub fn new(cluster: &str) -> Self {
        ClusterPaths {
            name: cluster.to_string(),
        }
    }

    /// The layout of cluster `cluster`, once its name is known to be a DNS name. Every key of a cluster starts
    /// with `<name>/`, so a name holding `/` (`prod.example.com/pki`) would reach into another cluster's objects,
    /// and `..` or an empty name out of the store's prefix: such names are refused here, before any key exists.
    pub fn checked(cluster: &str) -> Result<Self, InvalidClusterName> {
        crate::validate::check_cluster_name(cluster).map_err(|reason| InvalidClusterName {
            name: cluster.to_string(),
            reason,
        })?;
        Ok(ClusterPaths::new(cluster))
    }

    /// The cluster's name.
    pub fn cluster(&self) -> &str {
        &self.name
    }

    /// Every object of the cluster starts with this.
    pub fn prefix(&self) -> String {
        format!("{}/", self.name)
    }

    /// The Cluster object as the operator wrote it. Its presence is what makes the cluster exist.
    pub fn cluster_spec(&self) -> String {
        format!("{}/cluster.yaml", self.name)
    }

    pub fn instance_groups_prefix(&self) -> String {
        format!("{}/instancegroups/", self.name)
    }

    /// One InstanceGroup object as the operator wrote it.
    pub fn instance_group(&self, group: &str) -> String {
        format!("{}/instancegroups/{group}.yaml", self.name)
    }

    /// The completed spec (every default filled): what plans are made from.
    pub fn completed(&self) -> String {
        format!("{}/completed.yaml", self.name)
    }

    /// The cluster's id (`ballast_store::cluster_id`): random, written once when the cluster is created (or on
    /// the first `update cluster --yes` of a cluster made before ids), carried by every AWS resource Ballast makes
    /// for it (the `ballast.dev/cluster-id` tag). It tells this store's cluster from one of the same name in
    /// another store.
    pub fn cluster_id(&self) -> String {
        format!("{}/cluster-id", self.name)
    }

    /// The writers' lock: held while a change to the cluster's spec is written.
    pub fn lock(&self) -> String {
        format!("{}/lock.json", self.name)
    }

    /// A CA certificate (`pki/<ca>/cert.pem`).
    pub fn pki_cert(&self, ca: &str) -> String {
        format!("{}/pki/{ca}/cert.pem", self.name)
    }

    /// A CA's (or the service account's) private key: readable by the control-plane role only.
    pub fn pki_key(&self, ca: &str) -> String {
        format!("{}/pki/{ca}/key.pem", self.name)
    }

    /// The service account's public key (`pki/service-account/public.pem`).
    pub fn pki_public_key(&self, name: &str) -> String {
        format!("{}/pki/{name}/public.pem", self.name)
    }

    /// Every control-plane node's shipped audit log is under this prefix (docs/audit.md), in the state store or
    /// in the bucket `spec.auditLog.destination` names (below its prefix).
    pub fn audit_prefix(&self) -> String {
        format!("{}/audit/", self.name)
    }

    /// One instance's audit chunks (`audit/<writer>/`), named by their writer: the instance role session's
    /// `aws:userid` (`<role-id>:<instance-id>`), the only audit prefix the node's IAM policy lets it write (the
    /// instance id on a file store), as a log tail's ([`ClusterPaths::log_tail`]).
    pub fn audit_instance_prefix(&self, writer: &str) -> String {
        format!("{}/audit/{writer}/", self.name)
    }

    /// One audit chunk: its sequence number, zero-padded to 20 digits, so that key order is the order the lines
    /// were written, and a chunk retried after a lost answer or a crash lands on the same key (written once).
    pub fn audit_chunk(&self, writer: &str, sequence: u64) -> String {
        format!("{}/audit/{writer}/{sequence:020}.jsonl", self.name)
    }

    /// Where the operator's SSH public keys are (`ssh/<name>.pub`, docs/keys.md).
    pub fn ssh_prefix(&self) -> String {
        format!("{}/ssh/", self.name)
    }

    /// An operator's SSH public key (`ssh/<name>.pub`): public, in every node spec.
    pub fn ssh_public_key(&self, name: &str) -> String {
        format!("{}/ssh/{name}.pub", self.name)
    }

    pub fn keysets_prefix(&self) -> String {
        format!("{}/keysets/", self.name)
    }

    /// A keyset's metadata (`keysets/<name>.yaml`): its keys' ids, dates and states, no key material.
    pub fn keyset(&self, name: &str) -> String {
        format!("{}/keysets/{name}.yaml", self.name)
    }

    /// The certificate of a keyset's item `id` added by a rotation (`pki/<ca>/<id>/cert.pem`); the key
    /// `create cluster` made stays at [`ClusterPaths::pki_cert`].
    pub fn pki_item_cert(&self, ca: &str, id: &str) -> String {
        format!("{}/pki/{ca}/{id}/cert.pem", self.name)
    }

    /// The private key of a keyset's item `id` added by a rotation: readable by the control-plane role only.
    pub fn pki_item_key(&self, ca: &str, id: &str) -> String {
        format!("{}/pki/{ca}/{id}/key.pem", self.name)
    }

    /// The public key of a service-account item `id` added by a rotation.
    pub fn pki_item_public_key(&self, name: &str, id: &str) -> String {
        format!("{}/pki/{name}/{id}/public.pem", self.name)
    }

    /// A secret (`secrets/<name>`), e.g. the keys encrypting Kubernetes secrets at rest.
    pub fn secret(&self, secret: &str) -> String {
        format!("{}/secrets/{secret}", self.name)
    }

    /// The node spec of one instance group; its sha256 is in the group's user-data.
    pub fn node_spec(&self, group: &str) -> String {
        format!("{}/nodes/{group}/spec.yaml", self.name)
    }

    /// A node's boot report (and, on the control plane, its add-ons' progress), named by its writer: the
    /// instance role session's `aws:userid` (`<role-id>:<instance-id>`), the one key of this prefix its IAM
    /// policy lets it write, so that no node can replace another's report; the instance id on a file store.
    /// Readers find an instance's report by listing the prefix ([`writer_of_key`], [`instance_of_writer`]).
    pub fn report(&self, writer: &str) -> String {
        format!("{}{writer}.json", self.reports_prefix())
    }

    /// What every node's report key starts with: a listing of it names every report and its version.
    pub fn reports_prefix(&self) -> String {
        format!("{}/reports/", self.name)
    }

    /// The one bootstrap decision of the cluster's etcd and its membership epoch.
    pub fn etcd_cluster(&self) -> String {
        format!("{}/etcd/cluster.json", self.name)
    }

    /// Every etcd backup is under this prefix.
    pub fn etcd_backups(&self) -> String {
        format!("{}/etcd/backups/", self.name)
    }

    /// One etcd backup: snapshot and metadata under this prefix.
    pub fn etcd_backup(&self, backup_id: &str) -> String {
        format!("{}/etcd/backups/{backup_id}/", self.name)
    }

    /// An on-demand etcd backup request (`ballast etcd backup`), taken and deleted by the leader's supervisor.
    pub fn etcd_backup_request(&self) -> String {
        format!("{}/etcd/backup-request.json", self.name)
    }

    /// A termination handler's (or `rolling-update`'s) request that the control-plane node `instance_id` stop its
    /// etcd member before the instance goes (`ballast_state::termination::EtcdStopRequest`).
    pub fn etcd_stop_request(&self, instance_id: &str) -> String {
        format!("{}/etcd/stop-requests/{instance_id}.json", self.name)
    }

    /// Every member's published etcd health is under this prefix.
    pub fn etcd_health_prefix(&self) -> String {
        format!("{}/etcd/health/", self.name)
    }

    /// A marker a writer waiting for the cluster's lock writes to read the store's clock (its LastModified),
    /// deleted after: a lock's age is judged by the store's clock, never a writer's.
    pub fn lock_clock_marker(&self) -> String {
        format!("{}/lock-clock.json", self.name)
    }

    /// A marker `ballast etcd restore-backup` writes to read the store's clock (its LastModified), deleted after.
    pub fn etcd_clock_marker(&self) -> String {
        format!("{}/etcd/restore-clock.json", self.name)
    }

    /// Where workers find the node bootstrap service: the address of each control-plane node's service, kept
    /// by the control-plane nodes (`ballast_state::node_bootstrap`).
    pub fn node_bootstrap_services(&self) -> String {
        format!("{}/control-plane/node-bootstrap.json", self.name)
    }

    /// Present while the cluster's AWS resources are Terraform's (`update cluster --target terraform --yes`
    /// wrote them): a direct `update cluster --yes` is refused unless asked, and `delete cluster` asks for
    /// `terraform destroy` while the cluster's resources exist.
    pub fn terraform_managed(&self) -> String {
        format!("{}/terraform-managed.json", self.name)
    }

    /// Every node's published log tail is under this prefix (`ballast_state::log_tail`).
    pub fn log_tails_prefix(&self) -> String {
        format!("{}/logs/", self.name)
    }

    /// A node's published log tail, named by its writer: the instance role session's `aws:userid`
    /// (`<role-id>:<instance-id>`), the one key of this prefix its IAM policy lets it write.
    pub fn log_tail(&self, writer: &str) -> String {
        format!("{}{writer}.json", self.log_tails_prefix())
    }

    /// A dump's request that control-plane nodes publish their log tails now (`ballast toolbox dump`).
    pub fn log_tail_request(&self) -> String {
        format!("{}/log-tail-request.json", self.name)
    }

    /// A member's published etcd health (deleted when the member is removed).
    pub fn etcd_health(&self, instance_id: &str) -> String {
        format!("{}/etcd/health/{instance_id}.json", self.name)
    }
}

/// The name of the secret holding the keys that encrypt Kubernetes secrets at rest.
pub const ENCRYPTION_KEYS_SECRET: &str = "encryption-keys.yaml";

/// Suffix of a cluster's spec object, used to list clusters.
pub const CLUSTER_SPEC_SUFFIX: &str = "/cluster.yaml";

/// The instance a writer's name belongs to: what follows the last `:` of `<role-id>:<instance-id>` (an
/// instance role session's `aws:userid`, whose session name EC2 sets to the instance id), or the whole name
/// where the store has no IAM (a file store, whose writers are named by their instance id).
pub fn instance_of_writer(writer: &str) -> &str {
    writer.rsplit(':').next().unwrap_or(writer)
}

/// The writer a key directly under `prefix` names (`<prefix><writer>.json`, as [`ClusterPaths::report`] and
/// [`ClusterPaths::log_tail`] make them); `None` for any other key (deeper, or not JSON).
pub fn writer_of_key<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let writer = key.strip_prefix(prefix)?.strip_suffix(".json")?;
    (!writer.is_empty() && !writer.contains('/')).then_some(writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every key of `paths` that the CLI can reach with a name or id from outside, for the property below.
    fn keys(paths: &ClusterPaths) -> Vec<String> {
        vec![
            paths.cluster_spec(),
            paths.instance_group("nodes"),
            paths.completed(),
            paths.lock(),
            paths.cluster_id(),
            paths.pki_key(pki_names::KUBERNETES_CA),
            paths.keyset(pki_names::SERVICE_ACCOUNT),
            paths.secret("encryption-keys"),
            paths.node_spec("nodes"),
            paths.report("i-0123"),
            paths.etcd_cluster(),
            paths.etcd_backup("2026-12-02T06-00-00Z"),
            paths.node_bootstrap_services(),
            paths.log_tail("AROAEXAMPLE:i-0123"),
            paths.log_tail_request(),
        ]
    }

    #[test]
    fn a_writer_named_key_names_its_instance() {
        let paths = ClusterPaths::new("c.example.com");
        let prefix = paths.reports_prefix();
        let key = paths.report("AROAEXAMPLE:i-0abc");
        assert_eq!(writer_of_key(&key, &prefix), Some("AROAEXAMPLE:i-0abc"));
        assert_eq!(instance_of_writer("AROAEXAMPLE:i-0abc"), "i-0abc");
        assert_eq!(instance_of_writer("i-0abc"), "i-0abc");
        assert_eq!(
            writer_of_key(&paths.report("i-0abc"), &prefix),
            Some("i-0abc")
        );
        // Not a writer's key: deeper, not JSON, another prefix, or no name at all.
        for other in [
            format!("{prefix}x/i-0abc.json"),
            format!("{prefix}i-0abc.yaml"),
            paths.log_tail("AROAEXAMPLE:i-0abc"),
            format!("{prefix}.json"),
        ] {
            assert_eq!(writer_of_key(&other, &prefix), None, "{other}");
        }
    }

    #[test]
    fn names_that_reach_into_another_prefix_or_out_of_the_store_are_refused() {
        for bad in [
            "demo.example.com/pki",
            "demo.example.com/etcd",
            "..",
            ".",
            "",
            "/demo.example.com",
            "demo.example.com/",
            "demo..example.com",
            "Demo.example.com",
        ] {
            let err = ClusterPaths::checked(bad).expect_err(bad);
            assert_eq!(err.name, bad);
            assert!(err.to_string().contains("cluster name"), "{err}");
        }
        assert!(ClusterPaths::checked("demo.example.com").is_ok());
    }

    proptest! {
        /// No accepted name reaches another accepted cluster's objects: its keys start with its own prefix, and
        /// two different names' prefixes never nest. Names are drawn from DNS characters and the characters that
        /// make paths ('/', '.'), so most are refused and the accepted ones include near-misses of each other.
        #[test]
        fn no_name_reaches_another_clusters_prefix(
            a in "[a-z0-9./-]{0,24}",
            b in "[a-z0-9./-]{0,24}",
        ) {
            let (Ok(pa), Ok(pb)) = (ClusterPaths::checked(&a), ClusterPaths::checked(&b)) else {
                prop_assert!(ClusterPaths::checked(&a).is_err() || ClusterPaths::checked(&b).is_err());
                return Ok(());
            };
            prop_assert!(!a.contains('/') && !a.split('.').any(str::is_empty));
            for key in keys(&pa) {
                prop_assert!(key.starts_with(&pa.prefix()), "{key}");
                if a != b {
                    prop_assert!(!key.starts_with(&pb.prefix()), "{key} is under {}", pb.prefix());
                }
            }
        }
    }
}
