//! What EC2 serves every instance on link-local addresses, for machines: the instance metadata service at
//! `169.254.169.254:80`, and the local cloud's AWS API at [`API_ADDRESS`]`:80` (the regional endpoints, which on
//! AWS a private subnet reaches through VPC endpoints or a NAT).
//!
//! Both live inside each machine's own network namespace, on its loopback interface: the runner binds their
//! listeners there (a socket stays in the namespace it was made in, whichever thread serves it later) and serves
//! them from the host. A machine therefore reaches its own IMDS and nothing else's: no packet for
//! 169.254.169.254 ever leaves it, as none leaves an EC2 instance, and no machine's address can be spoofed to
//! another's metadata. The AWS API listener forwards each connection to the emulator on the host's loopback;
//! the emulator authenticates every request by its signature, as AWS does.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;

use tokio::io::copy_bidirectional;

use super::network::{ip, NetworkError};

/// Where an instance finds its metadata (the AWS SDKs' default endpoint).
pub const IMDS_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);
/// Where a machine finds the local cloud's AWS API: a link-local address AWS does not use (it serves DNS at
/// .253, NTP at .123, ECS and EKS agents at 169.254.170.x). Machines are told by their `AWS_ENDPOINT_URL`.
pub const API_ADDRESS: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 250);
/// The port of both.
pub const PORT: u16 = 80;

/// `AWS_ENDPOINT_URL` inside a machine.
pub fn api_endpoint() -> String {
    format!("http://{API_ADDRESS}")
}

/// Puts the link-local addresses on the loopback interface of machine namespace `namespace`.
pub fn add_addresses(namespace: &str) -> Result<(), NetworkError> {
    for address in [IMDS_ADDRESS, API_ADDRESS] {
        ip(&[
            "-n",
            namespace,
            "addr",
            "add",
            &format!("{address}/32"),
            "dev",
            "lo",
        ])?;
    }
    Ok(())
}

/// A TCP listener on `addr` inside network namespace `namespace` (`/run/netns/<namespace>`), ready for tokio.
pub fn listen_in(namespace: &str, addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let listener = in_namespace(namespace, || {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })?;
    tokio::net::TcpListener::from_std(listener)
}

/// A UDP socket bound to `addr` inside network namespace `namespace`, ready for tokio.
pub fn udp_in(namespace: &str, addr: SocketAddr) -> std::io::Result<tokio::net::UdpSocket> {
    let socket = in_namespace(namespace, || {
        let socket = std::net::UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(socket)
    })?;
    tokio::net::UdpSocket::from_std(socket)
}

/// Runs `make` on a thread of its own that enters network namespace `namespace` and ends, so no thread of the
/// runner stays in it (a socket stays in the namespace it was made in).
fn in_namespace<T: Send>(
    namespace: &str,
    make: impl FnOnce() -> std::io::Result<T> + Send,
) -> std::io::Result<T> {
    let path = std::path::Path::new("/run/netns").join(namespace);
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> std::io::Result<T> {
                let ns = std::fs::File::open(&path).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("opening {}: {e}", path.display()))
                })?;
                nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).map_err(
                    |e| std::io::Error::other(format!("entering {}: {e}", path.display())),
                )?;
                make()
            })
            .join()
            .map_err(|_| std::io::Error::other("the namespace thread panicked"))?
    })
}

/// Forwards every connection a listener accepts to `target`, until dropped or closed.
#[derive(Debug)]
pub struct Forwarder {
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    /// Accepts on `listener` and copies each connection both ways to a new connection to `target`.
    pub fn start(listener: tokio::net::TcpListener, target: SocketAddr) -> Forwarder {
        let task = tokio::spawn(async move {
            loop {
                let (mut inbound, _) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::debug!(error = %e, "accepting a connection to forward");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                tokio::spawn(async move {
                    match tokio::net::TcpStream::connect(target).await {
                        Ok(mut outbound) => {
                            let _ = copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                        Err(e) => tracing::debug!(%target, error = %e, "forwarding a connection"),
                    }
                });
            }
        });
        Forwarder { task }
    }

    /// Stops accepting (connections being forwarded end with their peers).
    pub fn close(self) {
        self.task.abort();
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
