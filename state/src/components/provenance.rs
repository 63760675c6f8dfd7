//! Where each pinned value of the manifest came from, why each unpinned one is not pinned, and what kind of
//! object an image digest names.
//!
//! The rule the manifest keeps: no provenance, no pin. A `sha256` or `digest` that is pinned carries a
//! `provenance` (the public record it was read from, or what `images/pin.sh` hashed), and one that says
//! `unpinned` carries a `reason` instead. [`pin_problems`] refuses every other combination, so a value nobody can
//! trace back never reaches a bake, and an `unpinned` nobody explained never looks like an oversight.

use serde::{Deserialize, Serialize};

/// The longest `reason` accepted: a sentence or three, not a document.
pub const MAX_REASON_CHARS: usize = 600;
/// What `provenance.pinnedBy` says for a value `images/pin.sh` pinned from the network itself.
pub const PIN_SH: &str = "images/pin.sh";
/// The pinner of what was built on this machine (the local cloud's manifest): its source is the Go module
/// directory (`go/...`) whose go.sum is the provenance of what was built. Never in the embedded manifest.
pub const BUILD_GO: &str = "tools/build-go";
/// The longest `path`, `within` or `source` accepted.
const MAX_FIELD_CHARS: usize = 300;

/// Where a pinned value was read: a public record (`repository`, `path`, `commit`, and `within` when the value
/// is in a file inside an archive the repository holds), or `images/pin.sh` (`pinnedBy`, `source`, `date`).
/// Read as one mapping with every field optional, so that a wrong mix is named field by field
/// ([`Provenance::problems`]) rather than as "matches no variant".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provenance {
    /// `owner/name` of a public GitHub repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The file in that repository that records the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// When `path` is an archive (a published Helm chart), the file inside it that records the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    /// The commit the value was read at: 40 lowercase hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// [`PIN_SH`]: the value was hashed by images/pin.sh, not read from a record; [`BUILD_GO`]: it is the hash
    /// of what tools/build-go built here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_by: Option<String>,
    /// What images/pin.sh hashed: the URL, or the registry reference it resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When images/pin.sh pinned it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
}

/// A provenance, told by its kind once it is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProvenanceKind<'a> {
    Record {
        repository: &'a str,
        path: &'a str,
        within: Option<&'a str>,
        commit: &'a str,
    },
    PinSh {
        source: &'a str,
        date: &'a str,
    },
}

impl Provenance {
    /// A public record's provenance.
    pub fn record(repository: &str, path: &str, commit: &str) -> Self {
        Provenance {
            repository: Some(repository.into()),
            path: Some(path.into()),
            commit: Some(commit.into()),
            ..Provenance::default()
        }
    }

    /// Which kind it is; `None` for a mix or an incomplete one (which [`Self::problems`] names).
    pub fn kind(&self) -> Option<ProvenanceKind<'_>> {
        match self {
            Provenance {
                repository: Some(repository),
                path: Some(path),
                within,
                commit: Some(commit),
                pinned_by: None,
                source: None,
                date: None,
            } => Some(ProvenanceKind::Record {
                repository,
                path,
                within: within.as_deref(),
                commit,
            }),
            Provenance {
                repository: None,
                path: None,
                within: None,
                commit: None,
                pinned_by: Some(_),
                source: Some(source),
                date: Some(date),
            } => Some(ProvenanceKind::PinSh { source, date }),
            _ => None,
        }
    }

    /// One line for people: `kubernetes/kops pkg/assets/assetdata/k8s-1.33.yaml @ 268927e2...`.
    pub fn describe(&self) -> String {
        match self.kind() {
            Some(ProvenanceKind::Record {
                repository,
                path,
                within,
                commit,
            }) => match within {
                Some(within) => format!("{repository} {path} ({within}) @ {commit}"),
                None => format!("{repository} {path} @ {commit}"),
            },
            Some(ProvenanceKind::PinSh { source, date }) => match self.pinned_by.as_deref() {
                Some(BUILD_GO) => format!("built by {BUILD_GO} from {source} at {date}"),
                _ => format!("pinned by {PIN_SH} from {source} at {date}"),
            },
            None => "an incomplete provenance".to_string(),
        }
    }

    /// Every way this provenance is wrong, each naming its field under `at` (`...sha256`'s sibling).
    pub fn problems(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let record = self.repository.is_some()
            || self.path.is_some()
            || self.within.is_some()
            || self.commit.is_some();
        let pin_sh = self.pinned_by.is_some() || self.source.is_some() || self.date.is_some();
        if record && pin_sh {
            problems.push(format!(
                "{at}.provenance: either a public record (repository, path, commit) or images/pin.sh's \
                 (pinnedBy, source, date), not fields of both"
            ));
            return problems;
        }
        if !record && !pin_sh {
            problems.push(format!(
                "{at}.provenance: empty; name the public record the value was read from (repository, path, \
                 commit), or let images/pin.sh pin it (pinnedBy, source, date)"
            ));
            return problems;
        }
        if record {
            match self.repository.as_deref() {
                None => problems.push(format!(
                    "{at}.provenance.repository: missing (owner/name of the repository holding the record)"
                )),
                Some(repository) if !github_repository(repository) => problems.push(format!(
                    "{at}.provenance.repository: {repository:?} is not a GitHub owner/name"
                )),
                Some(_) => {}
            }
            for (field, value, required) in [
                ("path", self.path.as_deref(), true),
                ("within", self.within.as_deref(), false),
            ] {
                match value {
                    None if required => problems.push(format!(
                        "{at}.provenance.{field}: missing (the file in the repository that records the value)"
                    )),
                    Some(value) if !relative_path(value) => problems.push(format!(
                        "{at}.provenance.{field}: {value:?} must be a relative path of at most \
                         {MAX_FIELD_CHARS} characters, without `..`, spaces, quotes or `|`"
                    )),
                    _ => {}
                }
            }
            match self.commit.as_deref() {
                None => problems.push(format!(
                    "{at}.provenance.commit: missing (the 40-hex commit the value was read at)"
                )),
                Some(commit) if !git_commit(commit) => problems.push(format!(
                    "{at}.provenance.commit: {commit:?} is not a commit: expected 40 lowercase hex digits \
                     (a full object name, not a tag or a short hash)"
                )),
                Some(_) => {}
            }
        } else {
            match self.pinned_by.as_deref() {
                Some(PIN_SH | BUILD_GO) => {}
                Some(other) => problems.push(format!(
                    "{at}.provenance.pinnedBy: {other:?}; only {PIN_SH:?} pins from the network, and \
                     {BUILD_GO:?} what it built here (name a public record with repository, path and commit \
                     otherwise)"
                )),
                None => problems.push(format!("{at}.provenance.pinnedBy: missing ({PIN_SH:?})")),
            }
            match self.source.as_deref() {
                None => problems.push(format!(
                    "{at}.provenance.source: missing (the URL or registry reference images/pin.sh hashed)"
                )),
                Some(source) if !plain(source) || source.chars().count() > MAX_FIELD_CHARS => problems
                    .push(format!(
                        "{at}.provenance.source: {source:?} must be a URL or reference of at most \
                         {MAX_FIELD_CHARS} characters, without spaces, quotes or `|`"
                    )),
                Some(_) => {}
            }
            match self.date.as_deref() {
                None => problems.push(format!(
                    "{at}.provenance.date: missing (when images/pin.sh pinned it, RFC 3339)"
                )),
                Some(date) if !rfc3339(date) => problems.push(format!(
                    "{at}.provenance.date: {date:?} is not an RFC 3339 time like 2026-12-02T13:00:00Z"
                )),
                Some(_) => {}
            }
        }
        problems
    }
}

/// What an image's digest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DigestKind {
    /// An image index (OCI) or manifest list (Docker): what a registry serves for a multi-platform image. The
    /// bake checks the index's own digest, then that it lists the image's platform.
    Index,
    /// One platform's image manifest.
    Manifest,
}

impl DigestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DigestKind::Index => "index",
            DigestKind::Manifest => "manifest",
        }
    }
}

/// The rule "no provenance, no pin; no reason, no `unpinned`" for one value at `at` (the path of its
/// `sha256` or `digest`, e.g. `releases."1.33".components.kubelet`), whose kind `what` names in messages.
pub(super) fn pin_problems(
    at: &str,
    what: &str,
    pinned: bool,
    provenance: Option<&Provenance>,
    reason: Option<&str>,
    problems: &mut Vec<String>,
) {
    match (pinned, provenance, reason) {
        (true, None, _) => problems.push(format!(
            "{at}.provenance: the {what} is pinned without a provenance; name the public record it was read from \
             (repository, path, commit), or pin it with images/pin.sh (no provenance, no pin)"
        )),
        (true, Some(provenance), _) => problems.extend(provenance.problems(at)),
        (false, Some(_), _) => problems.push(format!(
            "{at}.provenance: the {what} is `unpinned`, so nothing was read from a record; remove the \
             provenance, or pin the value it names"
        )),
        (false, None, None) => problems.push(format!(
            "{at}.reason: the {what} is `unpinned` without a reason; say why no public record supports it \
             (images/pin.sh fills it on a machine with internet)"
        )),
        (false, None, Some(_)) => {}
    }
    match (pinned, reason) {
        (true, Some(_)) => problems.push(format!(
            "{at}.reason: the {what} is pinned, and only an `unpinned` value has a reason; remove it"
        )),
        (false, Some(reason)) if reason.trim().is_empty() => problems.push(format!(
            "{at}.reason: empty; say why no public record supports the {what}"
        )),
        (false, Some(reason)) if reason.chars().count() > MAX_REASON_CHARS => problems.push(format!(
            "{at}.reason: {} characters, at most {MAX_REASON_CHARS}",
            reason.chars().count()
        )),
        (false, Some(reason)) if reason.contains(['"', '\\', '\n', '\t']) => problems.push(format!(
            "{at}.reason: quotes, backslashes, tabs and line breaks are not readable by images/install.sh"
        )),
        _ => {}
    }
}

/// `owner/name` as GitHub spells them.
fn github_repository(value: &str) -> bool {
    let ok = |part: &str| {
        !part.is_empty()
            && part.len() <= 100
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && part != "."
            && part != ".."
    };
    matches!(value.split_once('/'), Some((owner, name)) if ok(owner) && ok(name) && !name.contains('/'))
}

fn git_commit(value: &str) -> bool {
    value.len() == 40
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn plain(value: &str) -> bool {
    !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '|' | '"' | '\'' | '\\'))
}

fn relative_path(value: &str) -> bool {
    plain(value)
        && value.chars().count() <= MAX_FIELD_CHARS
        && !value.starts_with('/')
        && value.split('/').all(|s| !s.is_empty() && s != "..")
}

/// `2026-12-02T13:00:00Z`, with optional fractions and a numeric offset; each field in its range.
fn rfc3339(value: &str) -> bool {
    let bytes = value.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = value.get(range)?;
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if bytes.len() < 20
        || bytes[4] != b'-'
        || bytes[7] != b'-'
        || !matches!(bytes[10], b'T' | b't')
        || bytes[13] != b':'
        || bytes[16] != b':'
    {
        return false;
    }
    let fields = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    );
    let (Some(_), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = fields else {
        return false;
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return false;
    }
    let mut rest = &value[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 9 {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => {
            [h1, h2, m1, m2].iter().all(|b| b.is_ascii_digit())
                && (*h1 - b'0') * 10 + (*h2 - b'0') <= 23
                && (*m1 - b'0') * 10 + (*m2 - b'0') <= 59
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMIT: &str = "268927e26409f861634e18f3632c9dd483c350cf";

    fn problems_of(provenance: Provenance) -> Vec<String> {
        provenance.problems("x")
    }

    #[test]
    fn a_public_record_needs_repository_path_and_a_full_commit() {
        let good = Provenance::record(
            "kubernetes/kops",
            "pkg/assets/assetdata/k8s-1.33.yaml",
            COMMIT,
        );
        assert_eq!(problems_of(good.clone()), Vec::<String>::new());
        assert!(matches!(good.kind(), Some(ProvenanceKind::Record { .. })));
        assert_eq!(
            good.describe(),
            format!("kubernetes/kops pkg/assets/assetdata/k8s-1.33.yaml @ {COMMIT}")
        );
        for (commit, why) in [
            ("268927e", "short"),
            ("v1.33.4", "a tag"),
            ("268927E26409F861634E18F3632C9DD483C350CF", "upper case"),
            ("268927e26409f861634e18f3632c9dd483c350cf0", "41 digits"),
        ] {
            let all =
                problems_of(Provenance::record("kubernetes/kops", "a.yaml", commit)).join("\n");
            assert!(all.contains("x.provenance.commit:"), "{why}: {all}");
            assert!(all.contains("40 lowercase hex digits"), "{why}: {all}");
        }
        let all = problems_of(Provenance::record("kops", "../a.yaml", COMMIT)).join("\n");
        assert!(all.contains("x.provenance.repository: \"kops\""), "{all}");
        assert!(all.contains("x.provenance.path: \"../a.yaml\""), "{all}");
        let missing = Provenance {
            repository: Some("kubernetes/kops".into()),
            ..Provenance::default()
        };
        let all = problems_of(missing).join("\n");
        assert!(all.contains("x.provenance.path: missing"), "{all}");
        assert!(all.contains("x.provenance.commit: missing"), "{all}");
    }

    #[test]
    fn pin_sh_provenance_names_source_and_date() {
        let good = Provenance {
            pinned_by: Some(PIN_SH.into()),
            source: Some("docker.io/calico/node:v3.30.2".into()),
            date: Some("2026-12-02T13:00:00Z".into()),
            ..Provenance::default()
        };
        assert_eq!(problems_of(good.clone()), Vec::<String>::new());
        assert!(matches!(good.kind(), Some(ProvenanceKind::PinSh { .. })));
        let bad = Provenance {
            pinned_by: Some("me".into()),
            source: Some("a b".into()),
            date: Some("2026-13-02T13:00:00Z".into()),
            ..Provenance::default()
        };
        let all = problems_of(bad).join("\n");
        assert!(all.contains("x.provenance.pinnedBy: \"me\""), "{all}");
        assert!(all.contains("x.provenance.source: \"a b\""), "{all}");
        assert!(
            all.contains("x.provenance.date: \"2026-13-02T13:00:00Z\""),
            "{all}"
        );
        let mixed = Provenance {
            commit: Some(COMMIT.into()),
            ..good
        };
        let all = problems_of(mixed).join("\n");
        assert!(all.contains("not fields of both"), "{all}");
        assert!(problems_of(Provenance::default())[0].contains("empty"));
    }

    #[test]
    fn rfc3339_times_are_checked_field_by_field() {
        for good in [
            "2026-12-02T13:00:00Z",
            "2026-12-02T13:00:00.123Z",
            "2026-12-02T13:00:00+01:00",
        ] {
            assert!(rfc3339(good), "{good}");
        }
        for bad in [
            "2026-12-02 13:00:00Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T13:00:00",
            "2026-12-32T13:00:00Z",
            "2026-12-02T13:00:00.Z",
            "2026-12-02T13:00:00+1:00",
            "yesterday",
        ] {
            assert!(!rfc3339(bad), "{bad}");
        }
    }

    #[test]
    fn no_provenance_no_pin_and_no_reason_no_unpinned() {
        let record = Provenance::record("kubernetes/kops", "a.yaml", COMMIT);
        // (pinned, provenance, reason, the problems' beginnings)
        type Case<'a> = (bool, Option<&'a Provenance>, Option<&'a str>, &'a [&'a str]);
        let cases: [Case<'_>; 6] = [
            (true, Some(&record), None, &[]),
            (false, None, Some("upstream names it by tag only"), &[]),
            (
                true,
                None,
                None,
                &["x.provenance: the sha256 is pinned without a provenance"],
            ),
            (
                false,
                None,
                None,
                &["x.reason: the sha256 is `unpinned` without a reason"],
            ),
            (
                false,
                Some(&record),
                Some("why"),
                &["x.provenance: the sha256 is `unpinned`"],
            ),
            (
                true,
                Some(&record),
                Some("why"),
                &["x.reason: the sha256 is pinned"],
            ),
        ];
        for (pinned, provenance, reason, want) in cases {
            let mut problems = Vec::new();
            pin_problems("x", "sha256", pinned, provenance, reason, &mut problems);
            assert_eq!(problems.len(), want.len(), "{problems:#?}");
            for (got, want) in problems.iter().zip(want) {
                assert!(got.starts_with(want), "{got} does not start with {want}");
            }
        }
        let mut problems = Vec::new();
        let long = "a".repeat(MAX_REASON_CHARS + 1);
        pin_problems("x", "digest", false, None, Some(&long), &mut problems);
        assert!(problems[0].contains("at most 600"), "{problems:?}");
    }
}
