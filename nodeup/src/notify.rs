//! Telling systemd that nodeup is ready (`sd_notify`): `nodeup.service` is `Type=notify`, so systemd waits for
//! `READY=1` before it counts the node as started, and restarts nodeup when it never comes.

/// `READY=1` to systemd when it started us as `Type=notify` (`$NOTIFY_SOCKET`, through the `sd-notify` crate);
/// nothing otherwise. A failure to send is logged, never fatal: the node is configured either way.
///
/// The socket is a path (`/run/systemd/notify` for a system service such as `nodeup.service`); `sd-notify` does
/// not reach sockets in the abstract namespace (`@name`), which only some container managers hand out.
pub fn notify_ready() {
    if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
        tracing::warn!("sd_notify READY=1: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one test that sets `NOTIFY_SOCKET` in this process: systemd's side is a datagram socket at a path.
    #[test]
    fn ready_reaches_the_notify_socket() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notify");
        let systemd =
            std::os::unix::net::UnixDatagram::bind(&path).expect("bind the notify socket");
        systemd
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("read timeout");
        std::env::set_var("NOTIFY_SOCKET", &path);
        notify_ready();
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = systemd.recv(&mut buf).expect("READY=1 arrives");
        assert_eq!(
            std::str::from_utf8(&buf[..n]).expect("text").trim_end(),
            "READY=1"
        );
    }
}
