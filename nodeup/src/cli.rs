//! nodeup's command line (clap only: what each flag means and its default).

use std::path::PathBuf;

use clap::Parser;

use crate::services::ServiceMode;

/// Ballast's node agent.
#[derive(Debug, Clone, Parser)]
#[command(name = "nodeup", version)]
pub struct Cli {
    /// The root under which nodeup writes everything (`/` on a real node); nothing outside it is touched.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// How long to keep retrying IMDS for each value (seconds).
    #[arg(long, default_value_t = 60)]
    pub imds_timeout_secs: u64,
    /// How long to keep retrying the state store, overall (seconds).
    #[arg(long, env = "NODEUP_STORE_TIMEOUT_SECS", default_value_t = 120)]
    pub store_timeout_secs: u64,
    /// How services are started: systemd, the built-in supervisor, or auto (systemd when it runs and the root
    /// is `/`).
    #[arg(long, env = "NODEUP_SERVICES", value_enum, default_value_t = ServiceMode::Auto)]
    pub services: ServiceMode,
    /// Exit once configured instead of staying up (the supervisor's children are stopped; a control-plane
    /// node's etcd supervisor does not run).
    #[arg(long)]
    pub once: bool,
    /// The etcd binary a control-plane node runs [default: /usr/local/bin/etcd, the AMI's, else
    /// /usr/bin/etcd].
    #[arg(long, env = "NODEUP_ETCD_BINARY")]
    pub etcd_binary: Option<PathBuf>,
    /// The etcdctl binary (snapshot restores) [default: next to etcd].
    #[arg(long, env = "NODEUP_ETCDCTL_BINARY")]
    pub etcdctl_binary: Option<PathBuf>,
    /// Where a control-plane node keeps etcd's data: on its member's EBS volume (`volume`, what every instance
    /// of a cluster does), or on the root disk (`root-disk`: for running nodeup outside EC2, where there is no
    /// volume; the data then dies with the instance).
    #[arg(long, env = "NODEUP_ETCD_DATA", value_enum, default_value_t = EtcdData::Volume)]
    pub etcd_data: EtcdData,
}

/// Where a control-plane node keeps etcd's data (`--etcd-data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EtcdData {
    /// The member's EBS volume, found by tags, attached and mounted at etcd's state directory.
    Volume,
    /// The instance's root disk.
    RootDisk,
}

impl Cli {
    /// The etcd and etcdctl binaries: the flags, else the AMI's etcd (`/usr/local/bin`), else Debian's
    /// (`/usr/bin`), and etcdctl next to it.
    pub fn etcd_binaries(&self) -> (PathBuf, PathBuf) {
        let etcd = self.etcd_binary.clone().unwrap_or_else(|| {
            let baked = PathBuf::from("/usr/local/bin/etcd");
            if baked.is_file() {
                baked
            } else {
                PathBuf::from("/usr/bin/etcd")
            }
        });
        let etcdctl = self
            .etcdctl_binary
            .clone()
            .unwrap_or_else(|| etcd.with_file_name("etcdctl"));
        (etcd, etcdctl)
    }
}
