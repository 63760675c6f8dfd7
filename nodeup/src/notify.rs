//! Telling systemd that nodeup is ready (`sd_notify`): `nodeup.service` is `Type=notify`, so systemd waits for
//! `READY=1` before it counts the node as started, and restarts nodeup when it never comes.

use std::path::Path;

/// `READY=1` to systemd when it started us as `Type=notify` (`$NOTIFY_SOCKET`); nothing otherwise. A failure
/// to send is logged, never fatal: the node is configured either way.
pub fn notify_ready() {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let sock = match std::os::unix::net::UnixDatagram::unbound() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("sd_notify: {e}");
            return;
        }
    };
    let path = Path::new(&socket);
    // A leading `@` names a socket in the abstract namespace (systemd's choice in some setups).
    let sent = match path.to_str().and_then(|s| s.strip_prefix('@')) {
        Some(abstract_name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes())
                .and_then(|addr| sock.send_to_addr(b"READY=1", &addr))
        }
        None => sock.send_to(b"READY=1", path),
    };
    if let Err(e) = sent {
        tracing::warn!("sd_notify READY=1: {e}");
    }
}
