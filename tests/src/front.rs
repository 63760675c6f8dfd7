//! An HTTP front for the AWS emulator that a test can take down in the middle of a run and bring back.
//!
//! moto keeps its whole state in its process's memory, so killing the emulator and starting it again gives an
//! empty cloud, not the same one back: nothing would be left to converge. What an operator meets when AWS goes
//! away half way through `ballast update cluster --yes` is a connection that drops and an endpoint that refuses
//! connections, while everything AWS already did stays done. This front gives exactly that: it forwards TCP to
//! the emulator, counts the requests it forwards, and after the N-th one it cuts every open connection (the N-th
//! request reached the emulator; its answer may be lost) and stops listening until [`Front::restore`], on the
//! same port. The emulator and its state are untouched.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The request line's ending: one per HTTP/1.1 request (AWS query and REST bodies never hold it).
const REQUEST_LINE_END: &[u8] = b" HTTP/1.1\r\n";

#[derive(Default)]
struct Shared {
    /// Requests forwarded since the front last came up.
    requests: AtomicU64,
    /// Cut after this many requests (0: never).
    cut_at: AtomicU64,
    down: AtomicBool,
    /// Every socket of every open connection, both sides, so a cut can close them all.
    sockets: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        let sockets = std::mem::take(&mut *self.sockets.lock().expect("front sockets lock"));
        for socket in sockets {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

/// A TCP forwarder on a loopback port in front of an emulator.
pub struct Front {
    addr: SocketAddr,
    upstream: SocketAddr,
    shared: Arc<Shared>,
    /// Requests forwarded before each restore, summed.
    earlier_requests: u64,
}

impl Front {
    /// Listens on a free loopback port, forwarding to `upstream` (the emulator's `IP:PORT`).
    pub fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the emulator's front");
        let addr = listener.local_addr().expect("the front's address");
        let front = Front {
            addr,
            upstream,
            shared: Arc::new(Shared::default()),
            earlier_requests: 0,
        };
        front.serve(listener);
        front
    }

    /// The endpoint clients use instead of the emulator's.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Cuts every connection and stops listening once `n` more requests have been forwarded.
    pub fn cut_after(&self, n: u64) {
        let so_far = self.shared.requests.load(Ordering::SeqCst);
        self.shared.cut_at.store(so_far + n, Ordering::SeqCst);
    }

    /// True once a cut happened (and until [`Front::restore`]).
    pub fn is_down(&self) -> bool {
        self.shared.down.load(Ordering::SeqCst)
    }

    /// Requests forwarded in all, over every time the front was up.
    pub fn requests(&self) -> u64 {
        self.earlier_requests + self.shared.requests.load(Ordering::SeqCst)
    }

    /// Listens again on the same port, with no cut pending.
    pub fn restore(&mut self) {
        self.shared.cut();
        // The accept loop notices `down` within its poll interval and drops the old listener.
        std::thread::sleep(Duration::from_millis(100));
        self.earlier_requests += self.shared.requests.load(Ordering::SeqCst);
        self.shared = Arc::new(Shared::default());
        let listener = TcpListener::bind(self.addr)
            .unwrap_or_else(|e| panic!("binding the emulator's front again on {}: {e}", self.addr));
        self.serve(listener);
    }

    fn serve(&self, listener: TcpListener) {
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let shared = Arc::clone(&self.shared);
        let upstream = self.upstream;
        std::thread::spawn(move || {
            // Polled so that a cut closes the listener (new connections are then refused, as by a dead endpoint).
            while !shared.down.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => connect(client, upstream, &shared),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(_) => break,
                }
            }
        });
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.shared.cut();
    }
}

fn connect(client: TcpStream, upstream: SocketAddr, shared: &Arc<Shared>) {
    let _ = client.set_nonblocking(false);
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    if let Ok(mut sockets) = shared.sockets.lock() {
        sockets.extend([client_copy, server_copy]);
    }
    let (Ok(client_reader), Ok(server_writer)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let requests = Arc::clone(shared);
    std::thread::spawn(move || forward_requests(client_reader, server_writer, &requests));
    std::thread::spawn(move || {
        let (mut server, mut client) = (server, client);
        let _ = std::io::copy(&mut server, &mut client);
        let _ = client.shutdown(Shutdown::Write);
    });
}

/// Copies the client's bytes to the emulator, counting requests; the chunk holding the request that reaches the
/// cut point is delivered, then everything is cut.
fn forward_requests(mut client: TcpStream, mut server: TcpStream, shared: &Shared) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let new_requests = chunk
            .windows(REQUEST_LINE_END.len())
            .filter(|w| *w == REQUEST_LINE_END)
            .count() as u64;
        let total = shared.requests.fetch_add(new_requests, Ordering::SeqCst) + new_requests;
        if server.write_all(chunk).is_err() {
            break;
        }
        let cut_at = shared.cut_at.load(Ordering::SeqCst);
        if cut_at > 0 && total >= cut_at {
            shared.cut();
            break;
        }
    }
    let _ = server.shutdown(Shutdown::Write);
}
