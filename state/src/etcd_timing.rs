//! etcd's raft timing: kops's `etcdClusters[].heartbeatInterval` and `leaderElectionTimeout`, Ballast's
//! `spec.etcd.heartbeatInterval` and `spec.etcd.leaderElectionTimeout`, which the supervisor passes to etcd as
//! `--heartbeat-interval` and `--election-timeout` (milliseconds).
//!
//! The values are written as kops writes them, Go durations (`100ms`, `1s`, `1.5s`, `1m0s`), and must come to a
//! whole number of milliseconds, since etcd's flags are in milliseconds. The bounds are etcd's own (its
//! `embed.Config.Validate`): both above zero, the election timeout at least five heartbeats and at most
//! 50,000 ms. Checking them here means a spec etcd would refuse at start is refused by `ballast` instead, naming
//! the field, before any node boots with it. Pure: no I/O.

/// etcd's default `--heartbeat-interval`, in ms.
pub const DEFAULT_HEARTBEAT_INTERVAL_MS: u32 = 100;
/// etcd's default `--election-timeout`, in ms.
pub const DEFAULT_ELECTION_TIMEOUT_MS: u32 = 1_000;
/// etcd refuses a longer election timeout (`maxElectionMs`).
pub const MAX_ELECTION_TIMEOUT_MS: u32 = 50_000;
/// etcd refuses an election timeout shorter than this many heartbeats.
pub const MIN_HEARTBEATS_PER_ELECTION: u32 = 5;
/// The longest heartbeat interval any valid election timeout allows (50,000 / 5).
pub const MAX_HEARTBEAT_INTERVAL_MS: u32 = MAX_ELECTION_TIMEOUT_MS / MIN_HEARTBEATS_PER_ELECTION;

/// The spec's field names, as errors name them.
pub const HEARTBEAT_FIELD: &str = "spec.etcd.heartbeatInterval";
pub const ELECTION_FIELD: &str = "spec.etcd.leaderElectionTimeout";

/// Why a timing value or pair is refused. The field is the caller's to name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimingError {
    /// Not a Go duration of milliseconds, seconds or minutes.
    #[error("{text:?} is not a duration in milliseconds (use e.g. 100ms, 1s, 1.5s)")]
    Malformed { text: String },
    /// A duration that is not a whole number of milliseconds (etcd's flags are in ms).
    #[error("{text:?} is not a whole number of milliseconds")]
    NotWholeMillis { text: String },
    /// Zero, or beyond what etcd accepts.
    #[error("{ms} ms is outside {min}..={max} ms")]
    OutOfRange { ms: u64, min: u32, max: u32 },
    /// The election timeout is shorter than five heartbeats: etcd would refuse to start.
    #[error(
        "leaderElectionTimeout {election_ms} ms is less than {MIN_HEARTBEATS_PER_ELECTION} x heartbeatInterval \
         {heartbeat_ms} ms{}: etcd refuses to start so",
        if defaulted.is_empty() { String::new() } else { format!(" ({defaulted} is etcd's default)") }
    )]
    TooFewHeartbeats {
        heartbeat_ms: u32,
        election_ms: u32,
        /// Which of the two was not set (etcd's default), or empty.
        defaulted: &'static str,
    },
}

/// The pair etcd starts with, in milliseconds, within etcd's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdTiming {
    pub heartbeat_interval_ms: u32,
    pub election_timeout_ms: u32,
}

impl Default for EtcdTiming {
    fn default() -> Self {
        EtcdTiming {
            heartbeat_interval_ms: DEFAULT_HEARTBEAT_INTERVAL_MS,
            election_timeout_ms: DEFAULT_ELECTION_TIMEOUT_MS,
        }
    }
}

impl EtcdTiming {
    /// The pair from the node spec's milliseconds, each absent one etcd's default; refused as etcd would.
    /// The error names which field of the pair is wrong.
    pub fn from_millis(
        heartbeat_ms: Option<u64>,
        election_ms: Option<u64>,
    ) -> Result<Self, (&'static str, TimingError)> {
        let heartbeat = match heartbeat_ms {
            Some(ms) => {
                in_range(ms, 1, MAX_HEARTBEAT_INTERVAL_MS).map_err(|e| (HEARTBEAT_FIELD, e))?
            }
            None => DEFAULT_HEARTBEAT_INTERVAL_MS,
        };
        let election = match election_ms {
            Some(ms) => in_range(ms, MIN_HEARTBEATS_PER_ELECTION, MAX_ELECTION_TIMEOUT_MS)
                .map_err(|e| (ELECTION_FIELD, e))?,
            None => DEFAULT_ELECTION_TIMEOUT_MS,
        };
        // `heartbeat` is at most 10,000 here: the product cannot overflow.
        if election < MIN_HEARTBEATS_PER_ELECTION * heartbeat {
            // Blame the field that was set: the other one is etcd's default, which the user did not choose.
            let (field, defaulted) = match (heartbeat_ms, election_ms) {
                (Some(_), None) => (HEARTBEAT_FIELD, "leaderElectionTimeout"),
                (None, Some(_)) => (ELECTION_FIELD, "heartbeatInterval"),
                _ => (ELECTION_FIELD, ""),
            };
            return Err((
                field,
                TimingError::TooFewHeartbeats {
                    heartbeat_ms: heartbeat,
                    election_ms: election,
                    defaulted,
                },
            ));
        }
        Ok(EtcdTiming {
            heartbeat_interval_ms: heartbeat,
            election_timeout_ms: election,
        })
    }

    /// The pair from the spec's texts (`spec.etcd.heartbeatInterval`, `spec.etcd.leaderElectionTimeout`).
    pub fn from_spec(
        heartbeat: Option<&str>,
        election: Option<&str>,
    ) -> Result<Self, (&'static str, TimingError)> {
        let heartbeat_ms = heartbeat
            .map(parse_millis)
            .transpose()
            .map_err(|e| (HEARTBEAT_FIELD, e))?;
        let election_ms = election
            .map(parse_millis)
            .transpose()
            .map_err(|e| (ELECTION_FIELD, e))?;
        Self::from_millis(heartbeat_ms, election_ms)
    }
}

fn in_range(ms: u64, min: u32, max: u32) -> Result<u32, TimingError> {
    match u32::try_from(ms) {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(TimingError::OutOfRange { ms, min, max }),
    }
}

/// The longest text read: a Go duration of at most 50 s needs far less, and the bound keeps a pasted blob from
/// being walked.
const MAX_TEXT: usize = 32;
/// Nanoseconds per millisecond.
const NS_PER_MS: u64 = 1_000_000;

/// Reads a Go duration of milliseconds, seconds and minutes (`100ms`, `1s`, `1.5s`, `1m0s`, `1s500ms`), as kops
/// writes a `metav1.Duration`, into whole milliseconds. Bounds are [`EtcdTiming`]'s; this only refuses what is
/// not a duration, or not whole milliseconds. Every step is checked arithmetic: a huge number is an error.
pub fn parse_millis(text: &str) -> Result<u64, TimingError> {
    let malformed = || TimingError::Malformed {
        text: text.to_string(),
    };
    if text.is_empty() || text.len() > MAX_TEXT {
        return Err(malformed());
    }
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut total_ns: u64 = 0;
    while i < bytes.len() {
        // The whole part, then an optional fraction.
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let whole = &text[start..i];
        let mut fraction = "";
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            let f_start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            fraction = &text[f_start..i];
            if fraction.is_empty() {
                return Err(malformed());
            }
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(malformed());
        }
        let rest = &text[i..];
        let (unit_ns, unit_len) = if rest.starts_with("ms") {
            (NS_PER_MS, 2)
        } else if rest.starts_with('s') {
            (1_000 * NS_PER_MS, 1)
        } else if rest.starts_with('m') {
            (60_000 * NS_PER_MS, 1)
        } else {
            return Err(malformed());
        };
        i += unit_len;
        let too_long = || TimingError::OutOfRange {
            ms: u64::MAX,
            min: 1,
            max: MAX_ELECTION_TIMEOUT_MS,
        };
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| too_long())?
        };
        let mut group = whole.checked_mul(unit_ns).ok_or_else(too_long)?;
        // The fraction's digits, each a tenth of the one before; beyond a nanosecond is not a whole millisecond.
        let mut scale = unit_ns;
        for digit in fraction.bytes() {
            scale /= 10;
            let d = u64::from(digit - b'0');
            if scale == 0 {
                if d != 0 {
                    return Err(TimingError::NotWholeMillis {
                        text: text.to_string(),
                    });
                }
                continue;
            }
            group = group.checked_add(d * scale).ok_or_else(too_long)?;
        }
        total_ns = total_ns.checked_add(group).ok_or_else(too_long)?;
    }
    if !total_ns.is_multiple_of(NS_PER_MS) {
        return Err(TimingError::NotWholeMillis {
            text: text.to_string(),
        });
    }
    Ok(total_ns / NS_PER_MS)
}

/// How a number of milliseconds is written back in the spec (`100ms`, `1s`, `1500ms`): the whole seconds when
/// it is some, else milliseconds; [`parse_millis`] reads it back as the same number.
pub fn format_millis(ms: u32) -> String {
    if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_of_milliseconds_are_read() {
        for (text, ms) in [
            ("100ms", 100),
            ("1ms", 1),
            ("1s", 1_000),
            ("1.5s", 1_500),
            (".25s", 250),
            ("1m0s", 60_000),
            ("1s500ms", 1_500),
            ("0.001s", 1),
            ("2.000000000s", 2_000),
            ("0ms", 0),
        ] {
            assert_eq!(parse_millis(text), Ok(ms), "{text}");
        }
    }

    #[test]
    fn what_is_not_a_duration_of_whole_milliseconds_is_refused() {
        for text in [
            "", "100", "ms", "1.s", "1h", "10us", "1ns", "-1s", "1 s", "1e3ms", "1sms", "abc",
        ] {
            assert!(
                matches!(parse_millis(text), Err(TimingError::Malformed { .. })),
                "{text}: {:?}",
                parse_millis(text)
            );
        }
        for text in ["1.5ms", "0.0001s", "1.0000000001s"] {
            assert!(
                matches!(parse_millis(text), Err(TimingError::NotWholeMillis { .. })),
                "{text}: {:?}",
                parse_millis(text)
            );
        }
        // A huge number is an error, never a wrapped value; a long text is not walked.
        assert!(parse_millis("99999999999999999999m").is_err());
        assert!(parse_millis("9999999999999m").is_err());
        assert!(parse_millis(&"1".repeat(100)).is_err());
    }

    #[test]
    fn defaults_are_etcds() {
        assert_eq!(
            EtcdTiming::from_spec(None, None),
            Ok(EtcdTiming {
                heartbeat_interval_ms: 100,
                election_timeout_ms: 1_000
            })
        );
        assert_eq!(
            EtcdTiming::from_spec(Some("50ms"), Some("500ms")),
            Ok(EtcdTiming {
                heartbeat_interval_ms: 50,
                election_timeout_ms: 500
            })
        );
    }

    #[test]
    fn each_bound_is_etcds_and_names_its_field() {
        let err =
            |h: Option<&str>, e: Option<&str>| EtcdTiming::from_spec(h, e).expect_err("refused");
        // Zero, either field.
        assert_eq!(err(Some("0ms"), None).0, HEARTBEAT_FIELD);
        assert_eq!(err(None, Some("0s")).0, ELECTION_FIELD);
        // Above etcd's 50,000 ms.
        let (field, e) = err(Some("100ms"), Some("50001ms"));
        assert_eq!(field, ELECTION_FIELD);
        assert!(e.to_string().contains("5..=50000"), "{e}");
        assert!(EtcdTiming::from_spec(Some("10s"), Some("50s")).is_ok());
        // A heartbeat no election timeout can hold five times.
        assert_eq!(
            err(Some("10001ms"), Some("50s")),
            (
                HEARTBEAT_FIELD,
                TimingError::OutOfRange {
                    ms: 10_001,
                    min: 1,
                    max: 10_000
                }
            )
        );
        // Fewer than five heartbeats per election: blame the field that was set.
        let (field, e) = err(Some("300ms"), None);
        assert_eq!(field, HEARTBEAT_FIELD);
        assert!(e.to_string().contains("etcd's default"), "{e}");
        assert_eq!(err(None, Some("400ms")).0, ELECTION_FIELD);
        assert_eq!(err(Some("100ms"), Some("499ms")).0, ELECTION_FIELD);
        assert!(EtcdTiming::from_spec(Some("100ms"), Some("500ms")).is_ok());
        assert!(EtcdTiming::from_spec(Some("200ms"), None).is_ok());
        // The least etcd accepts.
        assert!(EtcdTiming::from_spec(Some("1ms"), Some("5ms")).is_ok());
        // Malformed, by field.
        assert_eq!(err(Some("fast"), None).0, HEARTBEAT_FIELD);
        assert_eq!(err(None, Some("1.5ms")).0, ELECTION_FIELD);
    }

    #[test]
    fn formatted_values_read_back() {
        for ms in [1, 50, 100, 999, 1_000, 1_500, 10_000, 50_000] {
            assert_eq!(parse_millis(&format_millis(ms)), Ok(u64::from(ms)));
        }
        assert_eq!(format_millis(500), "500ms");
        assert_eq!(format_millis(2_000), "2s");
    }
}
