//! The one duration grammar of Ballast: spec fields (`spec.etcd.backup.interval`), `--wait` flags, and the etcd
//! supervisor's settings all read durations through [`parse_duration`], and print them with [`human_duration`].
//!
//! Grammar: one or more `<digits><unit>` groups, units `s`, `m`, `h` and `d` (`30s`, `15m`, `1h30m`, `7d`),
//! no spaces, no sign, no fraction. The total must be positive and at most [`MAX_DURATION`] (10 years): longer
//! spans have no use in a cluster's settings or waits, and the bound keeps the sum (and the deadlines callers
//! compute from it) far from overflowing. Every step of the sum is checked, so a huge number is an error, never
//! a panic or a wrapped value.

use std::time::Duration;

/// Seconds in a day.
const DAY_SECS: u64 = 86_400;
/// The longest duration accepted, in days (10 years of 365 days).
pub const MAX_DURATION_DAYS: u64 = 3_650;
/// The longest duration accepted: `3650d` (10 years).
pub const MAX_DURATION: Duration = Duration::from_secs(MAX_DURATION_DAYS * DAY_SECS);

/// Why a text is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the grammar (or zero).
    #[error("{text:?} is not a duration (use e.g. 30s, 15m, 1h, 7d)")]
    Malformed { text: String },
    /// Longer than [`MAX_DURATION`].
    #[error("{text:?} is longer than the longest duration, {MAX_DURATION_DAYS}d (10 years)")]
    TooLong { text: String },
}

/// Parses `30s`, `15m`, `1h`, `7d` or a sum of them (`1h30m`): a positive duration up to [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let duration = parse_sum(text)?;
    if duration.is_zero() {
        return Err(DurationError::Malformed {
            text: text.to_string(),
        });
    }
    Ok(duration)
}

/// As [`parse_duration`], and also zero: `0`, or groups of the grammar that add up to nothing (`0s`, `0m0s`):
/// a wait that may be none (`--wait 0`, `--lock-wait 0s`). Every unit still needs its number: `0hms` is refused,
/// not read as zero.
pub fn parse_duration_or_zero(text: &str) -> Result<Duration, DurationError> {
    if !text.is_empty() && text.bytes().all(|b| b == b'0') {
        return Ok(Duration::ZERO);
    }
    parse_sum(text)
}

/// The grammar's sum, zero included, at most [`MAX_DURATION`].
fn parse_sum(text: &str) -> Result<Duration, DurationError> {
    let malformed = || DurationError::Malformed {
        text: text.to_string(),
    };
    let too_long = || DurationError::TooLong {
        text: text.to_string(),
    };
    let mut total: u64 = 0;
    // The number being read, `None` until its first digit.
    let mut number: Option<u64> = None;
    for c in text.chars() {
        // `to_digit` takes ASCII digits only: other scripts' digits are not numbers here.
        if let Some(digit) = c.to_digit(10) {
            let so_far = number.unwrap_or(0);
            let next = so_far
                .checked_mul(10)
                .and_then(|n| n.checked_add(u64::from(digit)))
                .ok_or_else(too_long)?;
            number = Some(next);
            continue;
        }
        let unit_secs = match c {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => DAY_SECS,
            _ => return Err(malformed()),
        };
        let count = number.take().ok_or_else(malformed)?;
        total = count
            .checked_mul(unit_secs)
            .and_then(|secs| total.checked_add(secs))
            .ok_or_else(too_long)?;
    }
    // Trailing digits without a unit, or no group at all.
    if number.is_some() || text.is_empty() {
        return Err(malformed());
    }
    let duration = Duration::from_secs(total);
    if duration > MAX_DURATION {
        return Err(too_long());
    }
    Ok(duration)
}

/// `2m`, `1h30m`, `45s`, `0s`: hours, minutes and seconds, whole seconds only (what `--wait` messages show).
pub fn human_duration(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_durations() {
        for (text, secs) in [
            ("1s", 1),
            ("30s", 30),
            ("15m", 900),
            ("1h", 3_600),
            ("7d", 604_800),
            ("1h30m", 5_400),
            ("1d12h", 129_600),
            ("90s", 90),
            ("015m", 900),
            ("0h5m", 300),
            ("3650d", 315_360_000),
            ("3649d23h59m60s", 315_360_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_durations() {
        for text in [
            "", "0s", "0m0s", "15", "1h30", "x", "h", "m15", "1w", "1.5h", "-5m", "+5m", " 5m",
            "5m ", "5 m", "1H", "٣s",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::Malformed {
                    text: text.to_string()
                }),
                "{text:?}"
            );
        }
    }

    /// A wait may be zero, but only in the grammar: a unit with no number before it is not a duration.
    #[test]
    fn zero_is_a_number_or_groups_that_add_up_to_nothing() {
        for text in ["0", "00", "0s", "0m0s", "0d0h0m0s"] {
            assert_eq!(parse_duration_or_zero(text), Ok(Duration::ZERO), "{text}");
        }
        assert_eq!(parse_duration_or_zero("1m30s"), Ok(Duration::from_secs(90)));
        for text in ["0hms", "0smhd", "0s m", "h", "0h m", "", "0x", "-0", "0 "] {
            assert_eq!(
                parse_duration_or_zero(text),
                Err(DurationError::Malformed {
                    text: text.to_string()
                }),
                "{text:?}"
            );
        }
        assert_eq!(
            parse_duration_or_zero("3651d"),
            Err(DurationError::TooLong {
                text: "3651d".to_string()
            })
        );
    }

    #[test]
    fn too_long_durations_are_errors_not_panics() {
        for text in [
            "3651d",
            "3650d1s",
            "87601h",
            "300000000000000d",
            "18446744073709551615s",
            "18446744073709551616s",
            "99999999999999999999999999999d",
            "213503982334601d1d",
        ] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::TooLong {
                    text: text.to_string()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn the_maximum_is_ten_years() {
        assert_eq!(MAX_DURATION, Duration::from_secs(10 * 365 * 86_400));
        assert_eq!(parse_duration("3650d"), Ok(MAX_DURATION));
        let message = parse_duration("300000000000000d")
            .expect_err("too long")
            .to_string();
        assert_eq!(
            message,
            "\"300000000000000d\" is longer than the longest duration, 3650d (10 years)"
        );
        assert_eq!(
            parse_duration("soon").expect_err("malformed").to_string(),
            "\"soon\" is not a duration (use e.g. 30s, 15m, 1h, 7d)"
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(Duration::from_secs(120)), "2m");
        assert_eq!(human_duration(Duration::from_secs(5430)), "1h30m30s");
        assert_eq!(human_duration(Duration::from_secs(45)), "45s");
        assert_eq!(human_duration(Duration::from_secs(7 * 86_400)), "168h");
        assert_eq!(human_duration(Duration::ZERO), "0s");
        assert_eq!(human_duration(Duration::from_millis(1_500)), "1s");
    }
}
