//! The one way Ballast writes times: RFC 3339 in UTC (`2025-01-02T03:04:05Z`), in reports, records, tables and
//! the local cloud's IMDS answers.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// `t` as RFC 3339, with its fraction of a second if it has one. Empty only for a time RFC 3339 cannot write
/// (a year outside 0..=9999), which no clock of ours returns.
pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// Now, as RFC 3339 (UTC).
pub fn now_rfc3339() -> String {
    rfc3339(OffsetDateTime::now_utc())
}

/// Now, as RFC 3339 and as Unix seconds (records carry both: one for people, one for freshness checks).
pub fn now_stamp() -> (String, i64) {
    let now = OffsetDateTime::now_utc();
    (rfc3339(now), now.unix_timestamp())
}

/// Unix seconds as RFC 3339 in UTC, to the second; the number itself when it is out of RFC 3339's range.
pub fn unix_rfc3339(unix: i64) -> String {
    OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| unix.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_rfc3339_in_utc() {
        assert_eq!(unix_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(unix_rfc3339(1_735_787_045), "2025-01-02T03:04:05Z");
        assert_eq!(unix_rfc3339(i64::MAX), i64::MAX.to_string());
        assert_eq!(
            rfc3339(time::macros::datetime!(2025-01-02 03:04:05.5 UTC)),
            "2025-01-02T03:04:05.5Z"
        );
        let (text, unix) = now_stamp();
        assert!(
            text.starts_with(&unix_rfc3339(unix)[..16]),
            "{text} vs {unix}"
        );
        assert!(now_rfc3339().ends_with('Z'));
    }
}
