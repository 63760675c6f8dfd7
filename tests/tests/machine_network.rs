//! The local cloud's networks for machines (`localcloud::machine::network`): a router namespace per local cloud
//! with a bridge per VPC, a namespace per machine on its subnet. Machines on two subnets of a VPC reach each
//! other through the subnets' router; an address of the VPC's ranges that no bridge holds is unreachable there
//! (never routed off the host); two local clouds use the same CIDR at once; nothing is left after.
//!
//! Needs root and iproute2; fails, never skips.

use std::net::Ipv4Addr;
use std::process::Command;

use ballast_e2e::image::require_root;
use localcloud::machine::{CloudNetwork, Ipv4Net};

fn net(s: &str) -> Ipv4Net {
    Ipv4Net::parse(s, "test").expect("a network")
}

/// Runs Python in network namespace `ns`; returns (success, stdout + stderr).
fn python_in(ns: &str, script: &str) -> (bool, String) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "python3", "-c", script])
        .output()
        .expect("ip netns exec");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// A TCP connection from namespace `from` to `to:port`, where a listener in namespace `at` accepts one
/// connection and answers `hello`.
fn connect(at: &str, from: &str, to: Ipv4Addr, port: u16) -> String {
    let listener = Command::new("ip")
        .args([
            "netns",
            "exec",
            at,
            "python3",
            "-c",
            &format!(
                "import socket\ns = socket.socket()\ns.bind(('{to}', {port}))\ns.listen(1)\nprint('ready', flush=True)\n\
                 c, _ = s.accept()\nc.sendall(b'hello')\nc.close()\n"
            ),
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("a listener");
    let mut listener = listener;
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(listener.stdout.take().expect("stdout")),
        &mut ready,
    )
    .expect("the listener's ready line");
    assert_eq!(ready.trim(), "ready");
    let (ok, text) = python_in(
        from,
        &format!(
            "import socket\ns = socket.create_connection(('{to}', {port}), timeout=5)\nprint(s.recv(5).decode())\n"
        ),
    );
    let _ = listener.wait();
    assert!(ok, "connecting from {from} to {to}:{port}: {text}");
    text.trim().to_string()
}

fn namespaces() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip netns list")
            .stdout,
    )
    .into_owned()
}

#[test]
fn machines_reach_each_other_through_their_vpc_and_nothing_else_leaves() {
    require_root();
    let pid = std::process::id();
    let vpc = net("10.0.0.0/16");
    let (a_subnet, b_subnet) = (net("10.0.1.0/24"), net("10.0.2.0/24"));
    let (a_ip, b_ip) = (Ipv4Addr::new(10, 0, 1, 10), Ipv4Addr::new(10, 0, 2, 20));
    // Two local clouds at once, both on the same CIDR and addresses.
    let mut clouds = Vec::new();
    for cloud in ["a", "b"] {
        let mut network = CloudNetwork::create(&format!("ballast-e2e-{pid}-{cloud}"))
            .unwrap_or_else(|e| panic!("{e}"));
        network
            .add_vpc("vpc-00000001", &vpc)
            .unwrap_or_else(|e| panic!("{e}"));
        network
            .add_subnet("vpc-00000001", &a_subnet)
            .unwrap_or_else(|e| panic!("{e}"));
        network
            .add_subnet("vpc-00000001", &b_subnet)
            .unwrap_or_else(|e| panic!("{e}"));
        let a = network
            .attach("i-000000000a", "vpc-00000001", &a_subnet, a_ip)
            .unwrap_or_else(|e| panic!("{e}"));
        let b = network
            .attach("i-000000000b", "vpc-00000001", &b_subnet, b_ip)
            .unwrap_or_else(|e| panic!("{e}"));
        clouds.push((network, a, b));
    }
    for (network, a, b) in &clouds {
        // Across subnets, through the router (base + 1 of each).
        assert_eq!(
            connect(b, a, b_ip, 8080),
            "hello",
            "{}",
            network.namespace()
        );
        assert_eq!(connect(a, b, a_ip, 8081), "hello");
        // An address of the VPC that no machine holds: the router answers "no route to host" (the kernel
        // rate-limits ICMP errors, so a first try may go unanswered: a few tries, each of one second).
        let (ok, text) = python_in(
            a,
            "import socket\nfor _ in range(10):\n  try:\n    socket.create_connection(('10.0.3.5', 80), timeout=1)\n    \
             print('connected')\n    break\n  except OSError as e:\n    if e.errno is not None:\n      \
             print(e.errno)\n      break\nelse:\n  print('no answer')\n",
        );
        assert!(
            ok && text.trim() == "113",
            "10.0.3.5 from {a}: {text} (want EHOSTUNREACH, 113)"
        );
        // Any private address outside the VPC: unreachable in the router, whatever the host's own routes say.
        for outside in ["10.200.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1"] {
            let out = Command::new("ip")
                .args(["-n", network.namespace(), "route", "get", outside])
                .output()
                .expect("ip route get");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // An `unreachable` route: the kernel answers the lookup itself with EHOSTUNREACH.
            assert!(
                !out.status.success() && text.contains("No route to host"),
                "{outside} in {}: {text}",
                network.namespace()
            );
        }
    }
    let listed = namespaces();
    for (network, a, b) in &clouds {
        for ns in [network.namespace(), a.as_str(), b.as_str()] {
            assert!(
                listed
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(ns)),
                "{ns}: {listed}"
            );
        }
    }
    for (network, _, _) in clouds {
        network.destroy().unwrap_or_else(|e| panic!("{e}"));
    }
    let left: Vec<String> = namespaces()
        .lines()
        .filter(|l| l.contains(&format!("ballast-e2e-{pid}")))
        .map(str::to_string)
        .collect();
    assert_eq!(left, Vec::<String>::new(), "namespaces left after destroy");
}

#[test]
fn a_reserved_or_outside_address_is_refused_before_anything_is_made() {
    require_root();
    let name = format!("ballast-e2e-{}-r", std::process::id());
    let mut network = CloudNetwork::create(&name).unwrap_or_else(|e| panic!("{e}"));
    network
        .add_vpc("vpc-00000002", &net("10.0.0.0/16"))
        .unwrap_or_else(|e| panic!("{e}"));
    let subnet = net("10.0.1.0/24");
    network
        .add_subnet("vpc-00000002", &subnet)
        .unwrap_or_else(|e| panic!("{e}"));
    let e = network
        .attach(
            "i-0000000001",
            "vpc-00000002",
            &subnet,
            Ipv4Addr::new(10, 0, 1, 2),
        )
        .expect_err("base + 2 is AWS's resolver");
    assert!(e.to_string().contains("AWS reserves"), "{e}");
    assert!(!namespaces().contains(&format!("{name}-i-0000000001")));
    drop(network);
    assert!(
        !namespaces().contains(&name),
        "dropping the network removes its namespace"
    );
}
