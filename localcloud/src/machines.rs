//! The runner's second way to run an instance (`localcloud run --instances machines`): a machine booted from the
//! image registered as its AMI, on its subnet's bridge, with IMDS and the AWS API on its own link-local addresses
//! and its EBS volumes as block devices (`machine`). nodeup is started by the image's own unit, as on EC2; the
//! only thing the local cloud adds to the image is what a VPC endpoint adds on AWS: where the AWS API is
//! (`AWS_ENDPOINT_URL`, in a drop-in for nodeup's unit).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use crate::imds::{CredentialIssuer, ImdsServer, InstanceMetadata};
use crate::machine::disks::{self, DiskError};
use crate::machine::link::{self, Forwarder};
use crate::machine::network::{machine_namespace, resolver_address};
use crate::machine::resolver::{self, Names};
use crate::machine::{
    CloudNetwork, Ipv4Net, Machine, MachineError, MachineRuntime, MachineSpec, NetworkError,
    Stopped,
};
pub use crate::state::MachinesRecord;

/// A failure to boot or stop a machine instance.
#[derive(Debug, thiserror::Error)]
pub enum MachineInstanceError {
    /// The instance's AMI is none of the images this cloud registered for machines.
    #[error(
        "{instance_id} runs {ami}, which is no machine image of this local cloud (registered: {known}): launch it \
         from one of those"
    )]
    NoImage {
        instance_id: String,
        ami: String,
        known: String,
    },
    /// The instance's subnet or VPC could not be read, or has no IPv4 CIDR.
    #[error("reading the network of {instance_id}: {message}")]
    Subnet {
        instance_id: String,
        message: String,
    },
    #[error(transparent)]
    Network(#[from] NetworkError),
    #[error(transparent)]
    Machine(#[from] MachineError),
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MachineInstanceError {
    let what = what.into();
    move |source| MachineInstanceError::Io { what, source }
}

/// The machines of one local cloud: the runtime, the network, the images, where their roots live.
#[derive(Debug)]
pub struct Machines {
    record: MachinesRecord,
    runtime: MachineRuntime,
    network: Mutex<Networks>,
    /// `<state>/machines`: one directory per instance (its root volume's upper layer, runc bundle, console).
    dir: PathBuf,
    /// The emulator, where each machine's AWS API listener forwards.
    emulator: SocketAddr,
    /// What the VPCs' resolvers answer beyond EC2's private names (the load balancers set them).
    names: Names,
}

#[derive(Debug)]
struct Networks {
    cloud: CloudNetwork,
    vpcs: BTreeSet<String>,
    subnets: BTreeSet<String>,
    /// Each VPC's resolver task (aborted when dropped).
    resolvers: Vec<AbortOnDrop>,
}

/// A task that ends with its owner.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running machine instance and what serves it.
#[derive(Debug)]
pub struct MachineInstance {
    pub machine: Machine,
    api: Forwarder,
    /// Its volumes on loop devices: volume id -> (loop device, NVMe controller number).
    disks: BTreeMap<String, (PathBuf, u32)>,
}

/// What a machine instance needs from EC2 to boot: its subnet's and VPC's CIDRs.
#[derive(Debug, Clone)]
pub struct Placement {
    pub vpc_id: String,
    pub vpc_cidr: Ipv4Net,
    pub subnet_id: String,
    pub subnet_cidr: Ipv4Net,
    pub address: Ipv4Addr,
}

impl Machines {
    /// Makes the cloud's router namespace; machines' roots go under `dir`.
    pub fn new(
        record: MachinesRecord,
        dir: PathBuf,
        emulator: SocketAddr,
    ) -> Result<Machines, MachineInstanceError> {
        let runtime = MachineRuntime::new(&record.runc, &record.runc_root)?;
        for (ami, image) in &record.images {
            if !image
                .join(crate::machine::spec::INIT.trim_start_matches('/'))
                .exists()
            {
                return Err(MachineInstanceError::Io {
                    what: format!(
                        "machine image {} (for {ami}) has no {}: bake it with images/install.sh",
                        image.display(),
                        crate::machine::spec::INIT
                    ),
                    source: std::io::Error::from(std::io::ErrorKind::NotFound),
                });
            }
        }
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let cloud = CloudNetwork::create(&record.namespace)?;
        Ok(Machines {
            record,
            runtime,
            network: Mutex::new(Networks {
                cloud,
                vpcs: BTreeSet::new(),
                subnets: BTreeSet::new(),
                resolvers: Vec::new(),
            }),
            dir,
            emulator,
            names: Names::default(),
        })
    }

    /// The names the VPCs' resolvers answer for the cloud's own services.
    pub fn names(&self) -> Names {
        self.names.clone()
    }

    pub fn record(&self) -> &MachinesRecord {
        &self.record
    }

    /// The image of AMI `ami`.
    pub fn image(&self, instance_id: &str, ami: &str) -> Result<&Path, MachineInstanceError> {
        self.record
            .images
            .get(ami)
            .map(PathBuf::as_path)
            .ok_or_else(|| MachineInstanceError::NoImage {
                instance_id: instance_id.to_string(),
                ami: ami.to_string(),
                known: self
                    .record
                    .images
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The directory of instance `instance_id`'s machine.
    pub fn machine_dir(&self, instance_id: &str) -> PathBuf {
        self.dir.join(instance_id)
    }

    /// Boots instance `meta` as a machine at `placement`: its network namespace on its subnet, IMDS and the AWS
    /// API on its link-local addresses, its root an overlay of `image`, systemd its init. Blocking (runc):
    /// call from a blocking task. Everything made is taken down again when a step fails.
    pub fn boot(
        &self,
        meta: &InstanceMetadata,
        placement: &Placement,
        image: &Path,
        issuer: CredentialIssuer,
        runtime: &tokio::runtime::Handle,
    ) -> Result<(MachineInstance, ImdsServer), MachineInstanceError> {
        let id = meta.instance_id.as_str();
        let namespace = {
            let mut net = self.lock_network();
            if net.vpcs.insert(placement.vpc_id.clone()) {
                let resolver = net
                    .cloud
                    .add_vpc(&placement.vpc_id, &placement.vpc_cidr)
                    .map_err(MachineInstanceError::from)
                    .and_then(|()| self.start_resolver(&net.cloud, &placement.vpc_cidr, runtime));
                match resolver {
                    Ok(task) => net.resolvers.push(task),
                    Err(e) => {
                        net.vpcs.remove(&placement.vpc_id);
                        return Err(e);
                    }
                }
            }
            if net.subnets.insert(placement.subnet_id.clone()) {
                if let Err(e) = net
                    .cloud
                    .add_subnet(&placement.vpc_id, &placement.subnet_cidr)
                {
                    net.subnets.remove(&placement.subnet_id);
                    return Err(e.into());
                }
            }
            // A namespace left by a boot that failed half way goes first.
            let stale = machine_namespace(net.cloud.namespace(), id);
            if Path::new("/run/netns").join(&stale).exists() {
                let _ = net.cloud.detach(id);
            }
            net.cloud.attach(
                id,
                &placement.vpc_id,
                &placement.subnet_cidr,
                placement.address,
            )?
        };
        let served = (|| {
            link::add_addresses(&namespace)?;
            let _guard = runtime.enter();
            let imds_listener = link::listen_in(
                &namespace,
                SocketAddr::new(link::IMDS_ADDRESS.into(), link::PORT),
            )
            .map_err(io(format!("listening for {id}'s IMDS")))?;
            let api_listener = link::listen_in(
                &namespace,
                SocketAddr::new(link::API_ADDRESS.into(), link::PORT),
            )
            .map_err(io(format!("listening for {id}'s AWS API")))?;
            let imds = ImdsServer::serve(imds_listener, meta.clone(), issuer)
                .map_err(io(format!("serving {id}'s IMDS")))?;
            let api = Forwarder::start(api_listener, self.emulator);
            Ok::<_, MachineInstanceError>((imds, api))
        })();
        let (imds, api) = match served {
            Ok(served) => served,
            Err(e) => {
                let _ = self.lock_network().cloud.detach(id);
                return Err(e);
            }
        };
        let machine = (|| {
            let dir = self.machine_dir(id);
            write_instance_files(&dir.join("upper"), meta, placement)?;
            let hostname = hostname(&meta.private_ip);
            let netns = Path::new("/run/netns").join(&namespace);
            let cgroup = format!("{}/{id}", self.record.cgroup);
            let spec = MachineSpec {
                hostname: &hostname,
                network: Some(&netns),
                cgroup: &cgroup,
                binds: &[],
            };
            Ok::<_, MachineInstanceError>(self.runtime.boot(id, &dir, image, &spec)?)
        })();
        match machine {
            Ok(machine) => Ok((
                MachineInstance {
                    machine,
                    api,
                    disks: BTreeMap::new(),
                },
                imds,
            )),
            Err(e) => {
                api.close();
                drop(imds);
                let _ = self.lock_network().cloud.detach(id);
                Err(e)
            }
        }
    }

    /// The VPC's resolver at its base + 2 (`machine::resolver`), on the router's side of the VPC's bridge.
    fn start_resolver(
        &self,
        cloud: &CloudNetwork,
        vpc_cidr: &Ipv4Net,
        runtime: &tokio::runtime::Handle,
    ) -> Result<AbortOnDrop, MachineInstanceError> {
        let address = resolver_address(vpc_cidr).ok_or_else(|| MachineInstanceError::Io {
            what: format!("the resolver of VPC {vpc_cidr}"),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        })?;
        let _guard = runtime.enter();
        let socket = link::udp_in(cloud.namespace(), SocketAddr::new(address.into(), 53))
            .map_err(io(format!("listening for the resolver at {address}")))?;
        Ok(AbortOnDrop(
            runtime.spawn(resolver::serve(socket, self.names.clone())),
        ))
    }

    fn lock_network(&self) -> std::sync::MutexGuard<'_, Networks> {
        // A panic while holding it leaves the names it tracks still valid.
        self.network
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Shuts a machine down: gracefully (systemd halts it, power cut after `grace`) or by power cut; then its
    /// volumes come off their loop devices and its network namespace goes. Blocking. Returns how it ended.
    pub fn shut_down(
        &self,
        instance_id: &str,
        mut instance: MachineInstance,
        graceful: Option<Duration>,
    ) -> Result<Stopped, MachineInstanceError> {
        let stopped = match graceful {
            Some(grace) => instance.machine.stop(grace),
            None => instance.machine.power_cut().map(|()| Stopped::PowerCut),
        };
        instance.api.close();
        for (volume_id, (device, _)) in std::mem::take(&mut instance.disks) {
            if let Err(e) = disks::detach(&device) {
                tracing::warn!(%instance_id, volume = %volume_id, error = %e, "taking a volume off its loop device");
            }
        }
        let network = self.lock_network().cloud.detach(instance_id);
        let stopped = stopped?;
        network?;
        Ok(stopped)
    }

    /// Attaches volume `volume_id` (its file made `size_gib` large if new) to a running machine: on a loop
    /// device, shown in the machine as a Nitro instance's EBS volume. Returns the device inside the machine.
    pub fn attach_volume(
        &self,
        instance: &mut MachineInstance,
        volumes_dir: &Path,
        volume_id: &str,
        size_gib: u64,
    ) -> Result<String, MachineInstanceError> {
        let pid = instance
            .machine
            .init_pid()
            .ok_or_else(|| MachineInstanceError::Io {
                what: format!("machine {} is not running", instance.machine.id),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            })?;
        let file = disks::volume_file(volumes_dir, volume_id);
        disks::ensure_file(&file, size_gib)?;
        let device = disks::attach(&file)?;
        let used: BTreeSet<u32> = instance.disks.values().map(|(_, n)| *n).collect();
        let index = disks::free_index(&used);
        match disks::expose(pid, &device, index, volume_id) {
            Ok(inside) => {
                instance
                    .disks
                    .insert(volume_id.to_string(), (device, index));
                Ok(inside)
            }
            Err(e) => {
                let _ = disks::detach(&device);
                Err(e.into())
            }
        }
    }

    /// Detaches volume `volume_id` from a running machine (gone from its `/dev`; the loop device is released as
    /// soon as nothing in the machine holds it).
    pub fn detach_volume(
        &self,
        instance: &mut MachineInstance,
        volume_id: &str,
    ) -> Result<(), MachineInstanceError> {
        let Some((device, index)) = instance.disks.remove(volume_id) else {
            return Ok(());
        };
        if let Some(pid) = instance.machine.init_pid() {
            disks::hide(pid, index, volume_id);
        }
        disks::detach(&device)?;
        Ok(())
    }
}

impl MachineInstance {
    /// Whether the machine still runs.
    pub fn is_running(&mut self) -> bool {
        self.machine.is_running()
    }

    /// The first half of a power cut (see [`Machine::kill_all`]).
    pub fn kill_all(&mut self) {
        self.machine.kill_all();
    }
}

/// An EC2 instance's hostname from its private address (`ip-10-0-1-10`).
pub fn hostname(private_ip: &str) -> String {
    format!("ip-{}", private_ip.replace('.', "-"))
}

/// The drop-in that tells nodeup where the AWS API is, as a private endpoint's users do on AWS.
pub const NODEUP_DROP_IN: &str = "etc/systemd/system/nodeup.service.d/50-local-cloud.conf";

/// What EC2's DHCP tells an instance about names: the VPC's resolver (the VPC's base address + 2, as AWS's
/// "AmazonProvidedDNS") and the domain of its private DNS name.
pub fn resolv_conf(meta: &InstanceMetadata, placement: &Placement) -> String {
    let mut text =
        String::from("# Written by Ballast's local cloud, as EC2's DHCP options would be.\n");
    if let Some((_, domain)) = meta.local_hostname.split_once('.') {
        text.push_str(&format!("search {domain}\n"));
    }
    if let Some(resolver) = placement.vpc_cidr.nth(2) {
        text.push_str(&format!("nameserver {resolver}\n"));
    }
    text
}

/// What the local cloud writes into a new machine's root volume before its first boot: its resolver (the
/// image's `/etc/resolv.conf` is whatever its bake left) and nodeup's drop-in.
fn write_instance_files(
    upper: &Path,
    meta: &InstanceMetadata,
    placement: &Placement,
) -> Result<(), MachineInstanceError> {
    let resolv = upper.join("etc/resolv.conf");
    std::fs::create_dir_all(upper.join("etc")).map_err(io("creating the root volume's /etc"))?;
    // The bake's may be a symlink (systemd-resolved's stub): replaced, never written through.
    let _ = std::fs::remove_file(&resolv);
    std::fs::write(&resolv, resolv_conf(meta, placement))
        .map_err(io(format!("writing {}", resolv.display())))?;
    let path = upper.join(NODEUP_DROP_IN);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    }
    let text = format!(
        "# Written by Ballast's local cloud: where this VPC reaches the AWS API (docs/local-cloud.md).\n\
         [Service]\nEnvironment=AWS_ENDPOINT_URL={}\n",
        link::api_endpoint()
    );
    std::fs::write(&path, text).map_err(io(format!("writing {}", path.display())))
}

impl Drop for Machines {
    /// The machines' cgroup parent goes with the cloud (runc removes each machine's own cgroup, not its parents);
    /// the router namespace goes with the network.
    fn drop(&mut self) {
        remove_cgroup_parent(&self.record.cgroup);
    }
}

/// Removes `cgroup` (and its parent, once empty) from every hierarchy.
fn remove_cgroup_parent(cgroup: &str) {
    let relative = cgroup.trim_start_matches('/');
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(relative);
        let _ = std::fs::remove_dir(&dir);
        if let Some(parent) = dir.parent().filter(|p| *p != hierarchy) {
            let _ = std::fs::remove_dir(parent);
        }
    }
}

fn cgroup_hierarchies() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut out: Vec<PathBuf> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.is_symlink())
        .collect();
    // cgroup v2: one hierarchy at the root itself.
    if root.join("cgroup.controllers").exists() {
        out = vec![root.to_path_buf()];
    }
    out
}

/// Every process of machine `instance_id` (its cgroup and those its systemd made under it), from the first
/// hierarchy that has it.
pub fn machine_processes(record: &MachinesRecord, instance_id: &str) -> Vec<u32> {
    let relative = format!("{}/{instance_id}", record.cgroup.trim_start_matches('/'));
    for hierarchy in cgroup_hierarchies() {
        let top = hierarchy.join(&relative);
        if !top.is_dir() {
            continue;
        }
        let mut pids = Vec::new();
        let mut dirs = vec![top];
        while let Some(dir) = dirs.pop() {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(entry.path());
                }
            }
        }
        pids.sort_unstable();
        pids.dedup();
        return pids;
    }
    Vec::new()
}

/// What systemd in machine `instance_id` says of `unit` (`active`, `failed`, ...), asked through runc; `None`
/// when the machine does not run.
pub fn unit_state(record: &MachinesRecord, instance_id: &str, unit: &str) -> Option<String> {
    let out = std::process::Command::new(&record.runc)
        .arg("--root")
        .arg(&record.runc_root)
        .args(["exec", instance_id, "/bin/systemctl", "is-active", unit])
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    let state = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!state.is_empty()).then_some(state)
}

/// Where machine `instance_id` keeps its journal (its root volume's, so it outlives the machine).
pub fn journal_dir(machines_dir: &Path, instance_id: &str) -> PathBuf {
    machines_dir.join(instance_id).join("var/log/journal")
}

/// What `localcloud down` does for machines a runner left behind (it was SIGKILLed): every runc container of the
/// cloud killed and deleted, their roots unmounted, the volumes' loop devices released, every namespace of the
/// cloud removed, its cgroups removed. Best effort: [`leftovers`] says what survived.
pub fn clean_up(record: &MachinesRecord, machines_dir: &Path, volumes_dir: &Path) {
    for id in runc_containers(record) {
        let runc = |args: &[&str]| {
            let _ = std::process::Command::new(&record.runc)
                .arg("--root")
                .arg(&record.runc_root)
                .args(args)
                .output();
        };
        runc(&["kill", "--all", &id, "KILL"]);
        runc(&["delete", "--force", &id]);
    }
    for mount in crate::volumes::mounts_under(machines_dir).into_iter().rev() {
        let _ = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH);
    }
    for device in volume_loops(volumes_dir) {
        let _ = disks::detach(Path::new(&device));
    }
    for namespace in namespaces(record) {
        let _ = crate::machine::network::ip(&["netns", "delete", &namespace]);
    }
    for id in std::fs::read_dir(machines_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        let cgroup = format!("{}/{}", record.cgroup, id.file_name().to_string_lossy());
        let relative = cgroup.trim_start_matches('/').to_string();
        for hierarchy in cgroup_hierarchies() {
            let _ = std::fs::remove_dir(hierarchy.join(&relative));
        }
    }
    remove_cgroup_parent(&record.cgroup);
}

/// What is left of a cloud's machines: runc containers, mounts under the machines' directory, loop devices over
/// its volumes, namespaces of the cloud, cgroups. One entry per survivor; empty when nothing is.
pub fn leftovers(record: &MachinesRecord, machines_dir: &Path, volumes_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for id in runc_containers(record) {
        out.push(format!(
            "machine {id} (runc state in {})",
            record.runc_root.display()
        ));
    }
    for mount in crate::volumes::mounts_under(machines_dir) {
        out.push(format!("mount {}", mount.display()));
    }
    for device in volume_loops(volumes_dir) {
        out.push(format!("loop device {device}"));
    }
    for namespace in namespaces(record) {
        out.push(format!("network namespace {namespace}"));
    }
    let relative = record.cgroup.trim_start_matches('/');
    for hierarchy in cgroup_hierarchies() {
        let dir = hierarchy.join(relative);
        if dir.exists() {
            out.push(format!("cgroup {}", dir.display()));
        }
    }
    out
}

/// The containers runc knows in the cloud's state directory.
fn runc_containers(record: &MachinesRecord) -> Vec<String> {
    std::fs::read_dir(&record.runc_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The loop devices over any volume file in `volumes_dir`.
fn volume_loops(volumes_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(volumes_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "img") {
            out.extend(disks::loops_of(&path).unwrap_or_default());
        }
    }
    out
}

/// The cloud's router namespace and its machines' (`<namespace>` and `<namespace>-*`).
fn namespaces(record: &MachinesRecord) -> Vec<String> {
    let prefix = format!("{}-", record.namespace);
    std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| *name == record.namespace || name.starts_with(&prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_is_named_as_ec2_names_instances() {
        assert_eq!(hostname("172.20.32.10"), "ip-172-20-32-10");
    }
}
