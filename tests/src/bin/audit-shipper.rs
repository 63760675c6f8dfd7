//! nodeup's audit shipper (`nodeup/src/audit/`) as a process of its own, for `tests/tests/audit_shipping.rs`:
//! the same `open_destination`, `Shipper::new` and `Shipper::run` nodeup's boot calls on a control-plane node,
//! stopped the way nodeup is (SIGTERM: the last chunk flushed) or killed (SIGKILL). No kube-apiserver runs
//! here, so the test writes the audit log itself and points this at it.
//!
//! `audit-shipper LOG POSITION DESTINATION CLUSTER INSTANCE INTERVAL_MS MAX_BYTES [KMS_KEY]`

use std::path::PathBuf;
use std::time::Duration;

use ballast_state::audit::AuditShipping;
use nodeup::audit::shipper::{open_destination, Shipper, ShipperConfig};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    tracing_init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [log, position, destination, cluster, instance, interval_ms, max_bytes, rest @ ..] =
        args.as_slice()
    else {
        eprintln!("usage: audit-shipper LOG POSITION DESTINATION CLUSTER INSTANCE INTERVAL_MS MAX_BYTES [KMS_KEY]");
        std::process::exit(2);
    };
    let number = |what: &str, value: &str| -> u64 {
        value.parse().unwrap_or_else(|_| {
            eprintln!("{what} {value:?} is not a number");
            std::process::exit(2)
        })
    };
    let shipping = AuditShipping {
        destination: destination.clone(),
        kms_key_id: rest.first().cloned(),
        chunk_interval: format!("{}s", number("INTERVAL_MS", interval_ms) / 1000),
        chunk_max_bytes: number("MAX_BYTES", max_bytes),
    };
    let config = ShipperConfig {
        root: PathBuf::from("/"),
        log_path: PathBuf::from(log),
        // The test writes the log as the API server would, as this user.
        owner: nix::unistd::geteuid().as_raw(),
        position_file: PathBuf::from(position),
        cluster: cluster.clone(),
        instance_id: instance.clone(),
        writer: instance.clone(),
        // In milliseconds, below the spec's 5 s floor, so the test runs in seconds.
        interval: Duration::from_millis(number("INTERVAL_MS", interval_ms)),
        max_bytes: usize::try_from(shipping.chunk_max_bytes).unwrap_or(usize::MAX),
    };
    let store = match open_destination(&shipping).await {
        Ok(store) => store,
        Err(e) => {
            eprintln!("{}", ballast_common::error_chain(&e));
            std::process::exit(1);
        }
    };
    // As nodeup's boot does: the keys named by the credentials' aws:userid (the instance id when STS names
    // another session, as with the emulator's plain credentials).
    let writer = nodeup::tail_publish::writer_for(&store, instance).await;
    let shipper = match Shipper::new(ShipperConfig { writer, ..config }, store) {
        Ok(shipper) => shipper,
        Err(e) => {
            eprintln!("{}", ballast_common::error_chain(&e));
            std::process::exit(1);
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    // Ready: the test waits for this line before it writes, so the shipper's first look sees a running process.
    println!("ready");
    let shipped = shipper
        .run(async move {
            term.recv().await;
        })
        .await;
    println!(
        "stopped: {} chunks, {} bytes",
        shipped.chunks, shipped.bytes
    );
}

/// Its log on stderr, as nodeup's (`RUST_LOG` overrides `info`).
fn tracing_init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}
