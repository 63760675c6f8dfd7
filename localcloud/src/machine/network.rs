//! The local cloud's networks for machines: each local cloud a network namespace of its own (its "router"),
//! holding a Linux bridge per VPC; each machine a network namespace joined to its VPC's bridge by a veth pair,
//! its `eth0` at its private address with its subnet's router (the subnet's base + 1, as AWS reserves it) as its
//! default gateway.
//!
//! Nothing of a VPC's address space ever leaves this host: the router namespace has no uplink and no default
//! route, and before any bridge exists it holds `unreachable` routes for every private range (RFC 1918 and RFC
//! 6598's shared space) and for each VPC's CIDR, under the bridges' own subnet routes. A packet for a VPC address
//! that no bridge holds is answered "unreachable" there and dropped. Two local clouds never share a namespace, so
//! both may use the same CIDR.
//!
//! Pure parts (addresses, names) apart from the `ip` commands that make them (iproute2, as an operator would).

use std::net::Ipv4Addr;
use std::process::Command;

/// The ranges a VPC may draw from (RFC 1918, and RFC 6598's shared space, which AWS allows for a VPC's CIDR):
/// unreachable in a cloud's router namespace unless a bridge holds the subnet.
pub const PRIVATE_RANGES: [&str; 4] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
];

/// A failure to make, join or remove a network, naming the command and what it said.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// A CIDR that is not `a.b.c.d/n` with its host bits zero.
    #[error("{what}: {value:?} is not an IPv4 network (a.b.c.d/n, host bits zero)")]
    BadCidr { what: String, value: String },
    /// An address outside the subnet it is to live on, or one AWS reserves.
    #[error("{address} cannot be a machine's address on subnet {subnet}: {why}")]
    BadAddress {
        address: Ipv4Addr,
        subnet: String,
        why: &'static str,
    },
    /// An `ip` command failed.
    #[error("`{command}` failed: {stderr}")]
    Command { command: String, stderr: String },
    /// `ip` could not be run at all.
    #[error("cannot run ip (iproute2): {0}")]
    NoIp(#[source] std::io::Error),
}

/// An IPv4 network: its base address and prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    base: Ipv4Addr,
    prefix: u8,
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

impl Ipv4Net {
    /// Parses `a.b.c.d/n`; `what` names it in the error.
    pub fn parse(value: &str, what: &str) -> Result<Ipv4Net, NetworkError> {
        let bad = || NetworkError::BadCidr {
            what: what.to_string(),
            value: value.to_string(),
        };
        let (address, prefix) = value.split_once('/').ok_or_else(bad)?;
        let base: Ipv4Addr = address.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        let net = Ipv4Net { base, prefix };
        if u32::from(base) & !net.mask() != 0 {
            return Err(bad());
        }
        Ok(net)
    }

    fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        }
    }

    pub fn base(&self) -> Ipv4Addr {
        self.base
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn contains(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & self.mask() == u32::from(self.base)
    }

    /// The network's `n`-th address (base + n), if it is inside.
    pub fn nth(&self, n: u32) -> Option<Ipv4Addr> {
        let address = Ipv4Addr::from(u32::from(self.base).checked_add(n)?);
        self.contains(address).then_some(address)
    }

    /// The last address (the broadcast address AWS reserves).
    fn last(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) | !self.mask())
    }

    /// The address `n` below the last one, if it is not one AWS reserves (base to base + 3).
    pub fn nth_from_top(&self, n: u32) -> Option<Ipv4Addr> {
        let address = Ipv4Addr::from(u32::from(self.last()).checked_sub(n)?);
        (self.contains(address) && u32::from(address) > u32::from(self.base) + 3).then_some(address)
    }
}

/// The subnet's router: base + 1, as AWS reserves it; the bridge holds it, and machines route through it.
pub fn gateway(subnet: &Ipv4Net) -> Option<Ipv4Addr> {
    subnet.nth(1)
}

/// Whether `address` can be a machine's on `subnet`: inside it, and none of the five AWS reserves (base to
/// base + 3, and the last).
pub fn check_address(subnet: &Ipv4Net, address: Ipv4Addr) -> Result<(), NetworkError> {
    let bad = |why| NetworkError::BadAddress {
        address,
        subnet: subnet.to_string(),
        why,
    };
    if !subnet.contains(address) {
        return Err(bad("it is outside the subnet"));
    }
    let offset = u32::from(address) - u32::from(subnet.base());
    if offset < 4 || address == subnet.last() {
        return Err(bad(
            "AWS reserves the first four addresses and the last of every subnet",
        ));
    }
    Ok(())
}

/// A VPC's bridge in its cloud's namespace: `br-` and the last 8 characters of the VPC id (names are at most 15).
pub fn bridge_name(vpc_id: &str) -> String {
    format!("br-{}", tail(vpc_id, 8))
}

/// A machine's veth end in its cloud's namespace: `v` and the last 12 characters of its instance id.
pub fn host_side_name(instance_id: &str) -> String {
    format!("v{}", tail(instance_id, 12))
}

/// A machine's network namespace: its cloud's namespace, `-`, its instance id.
pub fn machine_namespace(cloud_namespace: &str, instance_id: &str) -> String {
    format!("{cloud_namespace}-{instance_id}")
}

fn tail(id: &str, n: usize) -> String {
    let chars: Vec<char> = id.chars().filter(char::is_ascii_alphanumeric).collect();
    chars[chars.len().saturating_sub(n)..].iter().collect()
}

/// The VPC's resolver: its base address + 2, as AWS reserves it.
pub fn resolver_address(vpc: &Ipv4Net) -> Option<Ipv4Addr> {
    vpc.nth(2)
}

/// An address of the VPC's own services (its resolver, a load balancer's node in a subnet) on VPC `vpc_id`'s
/// bridge in router namespace `namespace`: reached by every machine of the VPC, on its subnet's link or through
/// its router. An address already there is kept.
pub fn add_service_address(
    namespace: &str,
    vpc_id: &str,
    address: Ipv4Addr,
) -> Result<(), NetworkError> {
    match ip(&[
        "-n",
        namespace,
        "addr",
        "add",
        &format!("{address}/32"),
        "dev",
        &bridge_name(vpc_id),
    ]) {
        Err(NetworkError::Command { stderr, .. }) if stderr.contains("File exists") => Ok(()),
        other => other,
    }
}

/// `ip ARGS`, failing with what it said.
pub(crate) fn ip(args: &[&str]) -> Result<(), NetworkError> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(NetworkError::NoIp)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(NetworkError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// One local cloud's network: its router namespace, made by [`CloudNetwork::create`], removed with everything in
/// it (bridges, the machines' veth ends) by [`CloudNetwork::destroy`] or on drop.
#[derive(Debug)]
pub struct CloudNetwork {
    namespace: String,
    machines: Vec<String>,
}

impl CloudNetwork {
    /// Makes the router namespace `namespace` (`/run/netns/<namespace>`): loopback up, forwarding on, and every
    /// private range unreachable before any bridge exists.
    pub fn create(namespace: &str) -> Result<CloudNetwork, NetworkError> {
        ip(&["netns", "add", namespace])?;
        let network = CloudNetwork {
            namespace: namespace.to_string(),
            machines: Vec::new(),
        };
        ip(&["-n", namespace, "link", "set", "lo", "up"])?;
        for range in PRIVATE_RANGES {
            ip(&["-n", namespace, "route", "add", "unreachable", range])?;
        }
        // A VPC's router forwards, and sends no ICMP redirects: on AWS every packet between subnets goes through
        // it. (Its subnets share the VPC's bridge, so Linux would otherwise redirect a machine to its peer in
        // another subnet, and the redirects' rate limit would hold back the router's own "unreachable" answers.)
        // Set before any bridge exists, so `default` reaches every interface made later.
        for setting in [
            "net.ipv4.ip_forward=1",
            "net.ipv4.conf.all.send_redirects=0",
            "net.ipv4.conf.default.send_redirects=0",
        ] {
            ip(&["netns", "exec", namespace, "sysctl", "-qw", setting])?;
        }
        Ok(network)
    }

    /// The router namespace's name.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A VPC's bridge, its CIDR unreachable under the subnets its bridge will hold (a VPC outside the private
    /// ranges is held in too), and its resolver's address (base + 2, [`resolver_address`]) on the bridge.
    pub fn add_vpc(&self, vpc_id: &str, cidr: &Ipv4Net) -> Result<(), NetworkError> {
        let bridge = bridge_name(vpc_id);
        let ns = self.namespace.as_str();
        ip(&["-n", ns, "link", "add", &bridge, "type", "bridge"])?;
        ip(&["-n", ns, "link", "set", &bridge, "up"])?;
        ip(&["-n", ns, "route", "add", "unreachable", &cidr.to_string()])?;
        let resolver = resolver_address(cidr).ok_or_else(|| NetworkError::BadCidr {
            what: "a VPC".into(),
            value: cidr.to_string(),
        })?;
        add_service_address(ns, vpc_id, resolver)
    }

    /// A subnet of a VPC: its router address (base + 1) on the VPC's bridge, which routes the subnet there.
    pub fn add_subnet(&self, vpc_id: &str, subnet: &Ipv4Net) -> Result<(), NetworkError> {
        let router = gateway(subnet).ok_or_else(|| NetworkError::BadCidr {
            what: "a subnet".into(),
            value: subnet.to_string(),
        })?;
        ip(&[
            "-n",
            &self.namespace,
            "addr",
            "add",
            &format!("{router}/{}", subnet.prefix()),
            "dev",
            &bridge_name(vpc_id),
        ])
    }

    /// Makes instance `instance_id`'s network namespace on `subnet` of VPC `vpc_id` at `address`: `eth0` at the
    /// address, its default route through the subnet's router. Returns the namespace's name (for the machine's
    /// runtime spec: `/run/netns/<name>`).
    pub fn attach(
        &mut self,
        instance_id: &str,
        vpc_id: &str,
        subnet: &Ipv4Net,
        address: Ipv4Addr,
    ) -> Result<String, NetworkError> {
        check_address(subnet, address)?;
        let router = gateway(subnet).ok_or_else(|| NetworkError::BadCidr {
            what: "a subnet".into(),
            value: subnet.to_string(),
        })?;
        let machine = machine_namespace(&self.namespace, instance_id);
        let outside = host_side_name(instance_id);
        let ns = self.namespace.clone();
        ip(&["netns", "add", &machine])?;
        self.machines.push(machine.clone());
        ip(&["-n", &machine, "link", "set", "lo", "up"])?;
        // As an instance in a VPC: its route to its subnet's router is the only one; no redirect changes that.
        for setting in [
            "net.ipv4.conf.all.accept_redirects=0",
            "net.ipv4.conf.default.accept_redirects=0",
        ] {
            ip(&["netns", "exec", &machine, "sysctl", "-qw", setting])?;
        }
        ip(&[
            "-n", &ns, "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns",
            &machine,
        ])?;
        ip(&[
            "-n",
            &ns,
            "link",
            "set",
            &outside,
            "master",
            &bridge_name(vpc_id),
        ])?;
        ip(&["-n", &ns, "link", "set", &outside, "up"])?;
        ip(&[
            "-n",
            &machine,
            "addr",
            "add",
            &format!("{address}/{}", subnet.prefix()),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &machine, "link", "set", "eth0", "up"])?;
        ip(&[
            "-n",
            &machine,
            "route",
            "add",
            "default",
            "via",
            &router.to_string(),
        ])?;
        Ok(machine)
    }

    /// Removes a machine's namespace (its veth pair goes with it).
    pub fn detach(&mut self, instance_id: &str) -> Result<(), NetworkError> {
        let machine = machine_namespace(&self.namespace, instance_id);
        self.machines.retain(|m| m != &machine);
        ip(&["netns", "delete", &machine])
    }

    /// Removes every machine's namespace and the router namespace, with its bridges.
    pub fn destroy(mut self) -> Result<(), NetworkError> {
        self.remove_all()
    }

    fn remove_all(&mut self) -> Result<(), NetworkError> {
        let mut first = None;
        for machine in std::mem::take(&mut self.machines) {
            if let Err(e) = ip(&["netns", "delete", &machine]) {
                first.get_or_insert(e);
            }
        }
        if !self.namespace.is_empty() {
            if let Err(e) = ip(&["netns", "delete", &self.namespace]) {
                first.get_or_insert(e);
            }
            self.namespace.clear();
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for CloudNetwork {
    fn drop(&mut self) {
        if let Err(e) = self.remove_all() {
            tracing::warn!("removing a local cloud's network: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Ipv4Net {
        Ipv4Net::parse(s, "test").expect("a network")
    }

    #[test]
    fn a_cidr_is_a_network_address_and_a_prefix() {
        assert_eq!(net("10.0.0.0/16").to_string(), "10.0.0.0/16");
        for bad in [
            "10.0.0.1/16",
            "10.0.0.0",
            "10.0.0.0/33",
            "ten/8",
            "10.0.0.0/x",
        ] {
            let e = Ipv4Net::parse(bad, "spec.networkCIDR").expect_err(bad);
            assert!(e.to_string().contains("spec.networkCIDR"), "{e}");
        }
        assert!(net("0.0.0.0/0").contains(Ipv4Addr::new(8, 8, 8, 8)));
    }

    #[test]
    fn the_router_is_base_plus_one_and_aws_reserved_addresses_are_refused() {
        let subnet = net("10.0.1.0/24");
        assert_eq!(gateway(&subnet), Some(Ipv4Addr::new(10, 0, 1, 1)));
        check_address(&subnet, Ipv4Addr::new(10, 0, 1, 4)).expect("the first usable");
        check_address(&subnet, Ipv4Addr::new(10, 0, 1, 254)).expect("the last usable");
        for reserved in [0, 1, 2, 3, 255] {
            let e =
                check_address(&subnet, Ipv4Addr::new(10, 0, 1, reserved)).expect_err("reserved");
            assert!(e.to_string().contains("AWS reserves"), "{e}");
        }
        let e = check_address(&subnet, Ipv4Addr::new(10, 0, 2, 9)).expect_err("outside");
        assert!(e.to_string().contains("outside the subnet"), "{e}");
    }

    #[test]
    fn interface_names_fit_linux_limit() {
        assert_eq!(bridge_name("vpc-0123456789abcdef0"), "br-9abcdef0");
        assert_eq!(host_side_name("i-0123456789abcdef0"), "v56789abcdef0");
        assert!(bridge_name("vpc-0123456789abcdef0").len() <= 15);
        assert!(host_side_name("i-0123456789abcdef0").len() <= 15);
        assert_eq!(host_side_name("i-1"), "vi1");
    }
}
