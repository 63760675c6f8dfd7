//! nodeup's command line (clap only: what each flag means and its default).

use std::path::PathBuf;
use std::time::Duration;

use ballast_state::duration::{parse_duration, DurationError};
use clap::Parser;

use crate::bootstrap::directory::{REPUBLISH_EVERY_MAX, REPUBLISH_EVERY_MIN};
use crate::retry::{CREDENTIALS_WAIT_MAX, CREDENTIALS_WAIT_MIN};
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
    /// How often a control-plane node publishes its bootstrap service's address again, dropping the entries of
    /// control-plane instances EC2 no longer lists (docs/node-identity.md): a duration from 1s to 1h.
    #[arg(
        long,
        env = "NODEUP_BOOTSTRAP_REPUBLISH_EVERY",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_republish_every
    )]
    pub bootstrap_republish_every: Duration,
    /// How long a booting node waits for its instance role's credentials to appear in IMDS (an instance profile
    /// is associated a moment after launch) before it records "no credentials" in its identity file and goes on:
    /// a duration from 1s to 10m.
    #[arg(
        long,
        env = "NODEUP_CREDENTIALS_WAIT",
        value_name = "DURATION",
        default_value = "60s",
        value_parser = parse_credentials_wait
    )]
    pub credentials_wait: Duration,
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

/// A duration flag's value that cannot be used (`--bootstrap-republish-every`, `--credentials-wait`; clap names
/// the flag).
#[derive(Debug, thiserror::Error)]
pub enum DurationFlagError {
    /// Not in the one duration grammar (`30s`, `15m`, `1h`).
    #[error(transparent)]
    NotADuration(#[from] DurationError),
    /// Outside the flag's bounds.
    #[error("{text:?} is outside {range}")]
    OutOfRange { text: String, range: &'static str },
}

/// `text` in the duration grammar, within `min..=max` (`range` says so in the error).
fn bounded_duration(
    text: &str,
    min: Duration,
    max: Duration,
    range: &'static str,
) -> Result<Duration, DurationFlagError> {
    let duration = parse_duration(text)?;
    if !(min..=max).contains(&duration) {
        return Err(DurationFlagError::OutOfRange {
            text: text.to_string(),
            range,
        });
    }
    Ok(duration)
}

/// The republish interval: within [`REPUBLISH_EVERY_MIN`] and [`REPUBLISH_EVERY_MAX`].
pub fn parse_republish_every(text: &str) -> Result<Duration, DurationFlagError> {
    bounded_duration(text, REPUBLISH_EVERY_MIN, REPUBLISH_EVERY_MAX, "1s to 1h")
}

/// The credentials wait: within [`CREDENTIALS_WAIT_MIN`] and [`CREDENTIALS_WAIT_MAX`].
pub fn parse_credentials_wait(text: &str) -> Result<Duration, DurationFlagError> {
    bounded_duration(
        text,
        CREDENTIALS_WAIT_MIN,
        CREDENTIALS_WAIT_MAX,
        "1s to 10m",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::directory::REPUBLISH_EVERY;
    use crate::retry::CREDENTIALS_WAIT;

    #[test]
    fn the_republish_interval_defaults_to_a_minute_and_is_held_to_its_bounds() {
        let cli = Cli::try_parse_from(["nodeup"]).expect("no flags");
        assert_eq!(cli.bootstrap_republish_every, REPUBLISH_EVERY);
        for (text, want) in [("1s", 1), ("2s", 2), ("15m", 900), ("1h", 3600)] {
            assert_eq!(
                parse_republish_every(text).expect(text),
                Duration::from_secs(want)
            );
        }
        for text in ["61m", "1h1s", "2h", "7d"] {
            let err = Cli::try_parse_from(["nodeup", "--bootstrap-republish-every", text])
                .expect_err(text)
                .to_string();
            assert!(
                err.contains("--bootstrap-republish-every") && err.contains("outside 1s to 1h"),
                "{text}: {err}"
            );
        }
        // The grammar has no unit below the second and no zero: its 1s is the least it could mean.
        for text in ["soon", "0s", "500ms", "1.5s"] {
            let err = Cli::try_parse_from(["nodeup", "--bootstrap-republish-every", text])
                .expect_err(text)
                .to_string();
            assert!(
                err.contains("--bootstrap-republish-every") && err.contains("is not a duration"),
                "{text}: {err}"
            );
        }
    }

    #[test]
    fn the_credentials_wait_defaults_to_a_minute_and_is_held_to_its_bounds() {
        let cli = Cli::try_parse_from(["nodeup"]).expect("no flags");
        assert_eq!(cli.credentials_wait, CREDENTIALS_WAIT);
        for (text, want) in [("1s", 1), ("3s", 3), ("10m", 600)] {
            assert_eq!(
                parse_credentials_wait(text).expect(text),
                Duration::from_secs(want)
            );
        }
        for text in ["10m1s", "1h", "0s", "later"] {
            let err = Cli::try_parse_from(["nodeup", "--credentials-wait", text])
                .expect_err(text)
                .to_string();
            assert!(
                err.contains("--credentials-wait")
                    && (err.contains("outside 1s to 10m") || err.contains("is not a duration")),
                "{text}: {err}"
            );
        }
    }
}
