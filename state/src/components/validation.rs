//! The manifest's rules beyond its shape, and the YAML subset `images/lib.sh`'s awk reader can read.

use std::collections::BTreeMap;

use crate::spec::API_VERSION;

use super::lookup::split_version;
use super::{Archive, ComponentManifest, Release, COMPONENTS, MANIFEST_KIND};

/// Components whose version must be the release's Kubernetes version.
const KUBERNETES_COMPONENTS: [&str; 2] = ["kubelet", "kubectl"];

impl ComponentManifest {
    pub(super) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.api_version != API_VERSION {
            problems.push(format!(
                "apiVersion: {:?}, expected {API_VERSION:?}",
                self.api_version
            ));
        }
        if self.kind != MANIFEST_KIND {
            problems.push(format!("kind: {:?}, expected {MANIFEST_KIND:?}", self.kind));
        }
        if !matches!(self.arch.as_str(), "amd64" | "arm64") {
            problems.push(format!(
                "arch: {:?}, expected \"amd64\" or \"arm64\"",
                self.arch
            ));
        }
        if self.releases.is_empty() {
            problems.push("releases: none pinned".to_string());
        }
        for (minor, release) in &self.releases {
            release_problems(minor, release, &mut problems);
        }
        problems
    }
}

fn release_problems(minor: &str, release: &Release, problems: &mut Vec<String>) {
    let at = format!("releases.{minor:?}");
    if let Some(date) = &release.end_of_life {
        if !is_date(date) {
            problems.push(format!(
                "{at}.endOfLife: {date:?} is not a date (YYYY-MM-DD)"
            ));
        }
    }
    match split_version(minor) {
        Some((m, None)) if m == minor => {}
        _ => problems.push(format!(
            "{at}: a release is keyed by a quoted minor version like \"1.33\""
        )),
    }
    match split_version(&release.kubernetes) {
        Some((m, Some(_))) if m == minor && !release.kubernetes.starts_with('v') => {}
        _ => problems.push(format!(
            "{at}.kubernetes: {:?} is not a {minor}.PATCH version",
            release.kubernetes
        )),
    }
    for name in COMPONENTS {
        if !release.components.contains_key(name) {
            problems.push(format!("{at}.components: {name} is missing"));
        }
    }
    super::addons::addon_problems(&at, &release.addons, problems);
    let mut destinations: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, component) in &release.components {
        let at = format!("{at}.components.{name}");
        if !COMPONENTS.contains(&name.as_str()) {
            problems.push(format!(
                "{at}: unknown component (known: {})",
                COMPONENTS.join(", ")
            ));
        }
        if KUBERNETES_COMPONENTS.contains(&name.as_str()) && component.version != release.kubernetes
        {
            problems.push(format!(
                "{at}.version: {:?}, but the release is Kubernetes {}",
                component.version, release.kubernetes
            ));
        }
        if !shell_safe(&component.version) || component.version.is_empty() {
            problems.push(format!(
                "{at}.version: {:?} must be non-empty, without spaces or `|`",
                component.version
            ));
        }
        if !component.url.starts_with("https://") || !shell_safe(&component.url) {
            problems.push(format!(
                "{at}.url: {:?} must be an https:// URL without spaces or `|`",
                component.url
            ));
        }
        if let Some(command) = &component.version_command {
            if !command.starts_with('/') || command.contains('|') || command.contains('\t') {
                problems.push(format!(
                    "{at}.versionCommand: {command:?} must start with an absolute path and hold no `|` or tab"
                ));
            }
        }
        super::provenance::pin_problems(
            &at,
            "sha256",
            component.sha256 != super::Sha256::Unpinned,
            component.provenance.as_ref(),
            component.reason.as_deref(),
            problems,
        );
        if component.files.is_empty() {
            problems.push(format!("{at}.files: nothing is installed from it"));
        }
        if component.archive == Archive::Binary
            && (component.files.len() != 1 || !component.files.contains_key(component.file_name()))
        {
            problems.push(format!(
                "{at}.files: a `binary` artifact installs exactly one file, keyed by the URL's file name {:?}",
                component.file_name()
            ));
        }
        for (from, to) in &component.files {
            if from.starts_with('/') || !clean_path(from) {
                problems.push(format!(
                    "{at}.files: {from:?} must be a relative path in the archive, without `..`, spaces or `|`"
                ));
            }
            if !to.starts_with('/') || !clean_path(to) {
                problems.push(format!(
                    "{at}.files.{from:?}: {to:?} must be an absolute path, without `..`, spaces or `|`"
                ));
            }
            if let Some(other) = destinations.insert(to, name) {
                problems.push(format!(
                    "{at}.files.{from:?}: {to:?} is installed by {other} too"
                ));
            }
        }
    }
}

fn shell_safe(value: &str) -> bool {
    !value
        .chars()
        .any(|c| c.is_whitespace() || c == '|' || c == '"' || c == '\'' || c == '\\')
}

fn clean_path(path: &str) -> bool {
    shell_safe(path)
        && !path.is_empty()
        && path
            .split('/')
            .all(|segment| segment != ".." && segment != ".")
}

/// What `images/lib.sh`'s awk reader cannot read: each problem with its line number.
pub(super) fn shell_subset_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let content = line.trim_start_matches(' ');
        if content.is_empty() || content.starts_with('#') || content == "---" {
            continue;
        }
        if content.starts_with('\t') || line.contains('\t') {
            problems.push(format!(
                "line {number}: tabs are not readable by images/install.sh"
            ));
        } else if content.starts_with('-') {
            problems.push(format!(
                "line {number}: lists are not readable by images/install.sh: use a mapping"
            ));
        } else if content
            .strip_suffix(':')
            .is_some_and(|key| split_version(key).is_some_and(|(_, patch)| patch.is_none()))
        {
            problems.push(format!(
                "line {number}: quote the minor version {content:?}: unquoted, YAML reads 1.30 as the number 1.3"
            ));
        } else if let Some((_, value)) = content.split_once(": ") {
            let value = value.trim();
            if value.starts_with(['{', '[', '&', '*', '|', '>', '!']) {
                problems.push(format!(
                    "line {number}: {value:?}: flow style, anchors, tags and block scalars are not readable by images/install.sh"
                ));
            }
        }
    }
    problems
}

/// `YYYY-MM-DD` with a month and day that can be.
fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let number = |p: &str, len: usize| {
        (p.len() == len && p.bytes().all(|b| b.is_ascii_digit())).then(|| p.parse::<u32>().ok())?
    };
    match parts.as_slice() {
        [y, m, d] => {
            number(y, 4).is_some()
                && number(m, 2).is_some_and(|m| (1..=12).contains(&m))
                && number(d, 2).is_some_and(|d| (1..=31).contains(&d))
        }
        _ => false,
    }
}
