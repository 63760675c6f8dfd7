//! `images/pin.sh` against real servers: Debian's `docker-registry` (the CNCF distribution registry) holding
//! images this test builds and pushes, and `python3 -m http.server` serving release files, both on loopback and
//! reached through `BALLAST_PIN_REDIRECT`, so the manifests keep their upstream URLs and references.
//!
//! Each test works on a manifest in a temp dir (a small one written here, and once a copy of the real
//! `images/manifest.yaml`), and checks the whole file after each run against what an independent rewrite in this
//! file expects: the pinned entries' own fields changed, every other byte the same.

// In a folder of its own, so that cargo does not take it for a test target.
#[path = "image_pin/servers.rs"]
mod servers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ballast_state::components::ComponentManifest;
use servers::{FileServer, Pushed, Registry};
use time::macros::format_description;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn now() -> String {
    time::OffsetDateTime::now_utc()
        .format(format_description!(
            "[year]-[month]-[day]T[hour]:[minute]:[second]Z"
        ))
        .expect("formatting the time")
}

/// Runs the real pin.sh on `manifest` with `BALLAST_PIN_REDIRECT=redirects`.
fn pin_sh(manifest: &Path, redirects: &str, args: &[&str]) -> Output {
    Command::new("sh")
        .arg(repo_root().join("images/pin.sh"))
        .arg("--manifest")
        .arg(manifest)
        .args(args)
        .env("BALLAST_PIN_REDIRECT", redirects)
        .stdin(Stdio::null())
        .output()
        .expect("running images/pin.sh")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// One value pin.sh is expected to write: the mapping that holds it (its keys from the top), the field
/// (`sha256` or `digest`), the value, the digestKind of an image, and the source it read.
#[derive(Clone, Debug)]
struct Pin {
    path: Vec<String>,
    field: &'static str,
    value: String,
    kind: Option<&'static str>,
    source: String,
}

fn path(dotted: &str) -> Vec<String> {
    dotted.split('/').map(str::to_string).collect()
}

/// The key of a block-mapping line (quotes removed) and its indentation; None for blank and comment lines.
fn key_of(line: &str) -> Option<(usize, String)> {
    let content = line.trim_start_matches(' ');
    if content.is_empty() || content.starts_with('#') || line == "---" {
        return None;
    }
    let indent = line.len() - content.len();
    let key = if let Some(rest) = content.strip_prefix('"') {
        rest.split('"').next().unwrap_or_default().to_string()
    } else {
        let end = content
            .find(": ")
            .unwrap_or_else(|| content.trim_end().trim_end_matches(':').len());
        content[..end].to_string()
    };
    Some((indent, key))
}

/// What pin.sh must make of `before` when it pins `pins` on `date`, written independently of pin.sh: in each
/// pinned entry's mapping the value line takes the value, followed by `digestKind` (images) and the provenance
/// block; its `reason:` line goes; every other line stays as it was.
fn expected_after(before: &str, pins: &[Pin], date: &str) -> String {
    let mut out = String::new();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in before.split_inclusive('\n') {
        let Some((indent, key)) = key_of(line.trim_end_matches('\n')) else {
            out.push_str(line);
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        let parent: Vec<String> = stack.iter().map(|(_, k)| k.clone()).collect();
        stack.push((indent, key.clone()));
        let Some(pin) = pins.iter().find(|p| p.path == parent) else {
            out.push_str(line);
            continue;
        };
        let pad = " ".repeat(indent);
        if key == pin.field {
            assert!(
                line.contains("unpinned"),
                "the test expects pin.sh to pin only unpinned values: {line}"
            );
            out.push_str(&format!("{pad}{}: {}\n", pin.field, pin.value));
            if let Some(kind) = pin.kind {
                out.push_str(&format!("{pad}digestKind: {kind}\n"));
            }
            out.push_str(&format!(
                "{pad}provenance:\n{pad}  pinnedBy: images/pin.sh\n{pad}  source: \"{}\"\n{pad}  date: \"{date}\"\n",
                pin.source
            ));
        } else if key == "reason" {
            continue;
        } else {
            assert!(
                key != "provenance" && key != "digestKind",
                "an unpinned entry with {key}: {line}"
            );
            out.push_str(line);
        }
    }
    out
}

/// The date pin.sh wrote in the run that made `after` from `before`: every provenance date in `after` that
/// `before` lacks, which must be one RFC 3339 UTC time between `start` and now.
fn run_date(before: &str, after: &str, start: &str) -> String {
    let dates = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.trim().strip_prefix("date: \""))
            .map(|d| d.trim_end_matches('"').to_string())
            .collect()
    };
    // As multisets: a second run within the same second writes the same date again.
    let mut new = dates(after);
    for old in dates(before) {
        if let Some(i) = new.iter().position(|d| *d == old) {
            new.remove(i);
        }
    }
    new.dedup();
    assert_eq!(new.len(), 1, "one new date per run: {new:?}\n{after}");
    let date = new.remove(0);
    let end = now();
    assert!(
        date.len() == 20 && date.as_str() >= start && date.as_str() <= end.as_str(),
        "{date} is not an RFC 3339 UTC time between {start} and {end}"
    );
    date
}

/// The release files and images of the small manifest, on real servers.
struct Upstream {
    registry: Registry,
    files: FileServer,
    tool: String,
    tool_old: String,
    recorded: String,
    multi_yaml: String,
    multi: Pushed,
    single: Pushed,
    recorded_image: Pushed,
}

impl Upstream {
    fn start() -> Upstream {
        Upstream::start_with(FileServer::start(), None)
    }

    /// With a registry that asks for a token from `token_realm` (on `files`).
    fn start_with(files: FileServer, token_realm: Option<&str>) -> Upstream {
        let registry = Registry::start_with(token_realm);
        Upstream {
            tool: files.put(
                "tool-1.0.0-linux-amd64.tar.gz",
                b"tool 1.0.0, as released\n",
            ),
            tool_old: files.put(
                "tool-0.9.0-linux-amd64.tar.gz",
                b"tool 0.9.0, as released\n",
            ),
            recorded: files.put("recorded-2.0.0", b"recorded 2.0.0\n"),
            multi_yaml: files.put("multi.yaml", b"kind: List\nitems: []\n"),
            multi: registry.push_image("multi/multi", "v1.0.0", "multi 1.0.0", true),
            single: registry.push_image("single", "v1.0.0", "single 1.0.0", false),
            recorded_image: registry.push_image("recorded", "v2.0.0", "recorded 2.0.0", true),
            registry,
            files,
        }
    }

    /// Upstream's hosts, as the small manifest names them, redirected to the local servers.
    fn redirects(&self) -> String {
        format!(
            "https://releases.example.test/={} registry.example.test/={}/",
            self.files.url(),
            self.registry.host()
        )
    }

    fn file_source(&self, name: &str) -> String {
        format!("{}{name}", self.files.url())
    }

    fn image_source(&self, repository: &str, tag: &str) -> String {
        format!("{}/{repository}:{tag}", self.registry.host())
    }

    /// The pins a full run over the 1.33 release makes.
    fn pins_133(&self) -> Vec<Pin> {
        vec![
            Pin {
                path: path("releases/1.33/components/tool"),
                field: "sha256",
                value: self.tool.clone(),
                kind: None,
                source: self.file_source("tool-1.0.0-linux-amd64.tar.gz"),
            },
            self.multi_manifest_pin(),
            self.multi_image_pin(),
            self.single_image_pin(),
        ]
    }

    fn multi_manifest_pin(&self) -> Pin {
        Pin {
            path: path("releases/1.33/addons/multi/manifest"),
            field: "sha256",
            value: self.multi_yaml.clone(),
            kind: None,
            source: self.file_source("multi.yaml"),
        }
    }

    fn multi_image_pin(&self) -> Pin {
        Pin {
            path: path("releases/1.33/addons/multi/images/multi"),
            field: "digest",
            value: self.multi.digest.clone(),
            kind: Some(self.multi.kind),
            source: self.image_source("multi/multi", "v1.0.0"),
        }
    }

    fn single_image_pin(&self) -> Pin {
        Pin {
            path: path("releases/1.33/addons/multi/images/single"),
            field: "digest",
            value: self.single.digest.clone(),
            kind: Some(self.single.kind),
            source: self.image_source("single", "v1.0.0"),
        }
    }

    fn old_tool_pin(&self) -> Pin {
        Pin {
            path: path("releases/1.32/components/old-tool"),
            field: "sha256",
            value: self.tool_old.clone(),
            kind: None,
            source: self.file_source("tool-0.9.0-linux-amd64.tar.gz"),
        }
    }

    /// A small manifest with one entry per case: unpinned with a reason (new shape), unpinned without one (old
    /// shape), pinned from a public record (checked, never rewritten), an index and a single-manifest image.
    fn manifest(&self) -> String {
        format!(
            r#"# pin.sh's test manifest: each entry is one case.
apiVersion: ballast.dev/v1alpha1
kind: ComponentManifest
arch: amd64
releases:
  "1.33":
    kubernetes: 1.33.4
    components:
      tool:
        version: 1.0.0
        # Unpinned with a reason: pin.sh fills it and drops the reason.
        url: https://releases.example.test/tool-1.0.0-linux-amd64.tar.gz   # upstream's URL, redirected
        sha256: unpinned
        reason: "no public record publishes this file's hash"
        archive: tar.gz
        files:
          tool: /usr/local/bin/tool
      recorded:
        version: 2.0.0
        url: https://releases.example.test/recorded-2.0.0
        sha256: {recorded}
        provenance:
          repository: example/records
          path: assets/recorded.yaml
          commit: 0123456789abcdef0123456789abcdef01234567
        archive: binary
        files:
          recorded-2.0.0: /usr/local/bin/recorded
    addons:
      multi:
        version: 1.0.0
        manifest:
          url: https://releases.example.test/multi.yaml
          sha256: unpinned
          reason: upstream publishes no checksum
          format: yaml
        images:
          multi:
            reference: registry.example.test/multi/multi:v1.0.0
            digest: unpinned
            reason: upstream names it by tag only
          single:
            # One platform only: its digest is the image manifest's.
            reference: registry.example.test/single:v1.0.0
            digest: unpinned
            reason: upstream names it by tag only
          recorded:
            reference: registry.example.test/recorded:v2.0.0
            digest: {recorded_image}
            digestKind: index
            provenance:
              repository: example/records
              path: images.yaml
              commit: 89abcdef0123456789abcdef0123456789abcdef
  "1.32":
    kubernetes: 1.32.8
    components:
      old-tool:
        # The old shape: unpinned, no reason.
        version: 0.9.0
        url: https://releases.example.test/tool-0.9.0-linux-amd64.tar.gz
        sha256: unpinned
        archive: tar.gz
        files:
          tool: /usr/local/bin/tool
"#,
            recorded = self.recorded,
            recorded_image = self.recorded_image.digest,
        )
    }
}

fn write_manifest(dir: &Path, text: &str) -> PathBuf {
    let manifest = dir.join("manifest.yaml");
    std::fs::write(&manifest, text).expect("writing the test manifest");
    manifest
}

#[test]
fn pins_files_by_sha256_and_tags_by_digest_and_writes_nothing_else() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = upstream.manifest();
    let manifest = write_manifest(tmp.path(), &original);

    // One release: the 1.32 entry stays unpinned.
    let start = now();
    let output = pin_sh(
        &manifest,
        &upstream.redirects(),
        &["--kubernetes-version", "1.33.4"],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let after = read(&manifest);
    let date = run_date(&original, &after, &start);
    assert_eq!(
        after,
        expected_after(&original, &upstream.pins_133(), &date),
        "{report}"
    );
    // The index's digest for the multi-arch tag, the manifest's for the single one, as pushed.
    assert_eq!(upstream.multi.kind, "index");
    assert_eq!(upstream.single.kind, "manifest");
    assert!(
        after.contains(&format!(
            "            digest: {}\n            digestKind: index\n",
            upstream.multi.digest
        )),
        "{after}"
    );
    // The public-record pins were checked against the servers, and left as they are.
    for entry in [
        "releases.1.33.components.recorded.sha256: unchanged",
        "releases.1.33.addons.multi.images.recorded.digest: unchanged",
    ] {
        assert!(report.contains(entry), "{entry}\n{report}");
    }
    assert!(report.contains("pinned 4, checked 2 unchanged"), "{report}");

    // Every release: the old-shape entry is pinned too (it had no reason to drop), and the pins of the first
    // run are checked, not rewritten.
    let start = now();
    let output = pin_sh(&manifest, &upstream.redirects(), &[]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let again = read(&manifest);
    let date = run_date(&after, &again, &start);
    assert_eq!(
        again,
        expected_after(&after, &[upstream.old_tool_pin()], &date),
        "{report}"
    );
    assert!(report.contains("pinned 1, checked 6 unchanged"), "{report}");

    // Nothing left to pin: a third run changes no byte.
    let output = pin_sh(&manifest, &upstream.redirects(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert_eq!(read(&manifest), again);
    assert!(
        text(&output).contains("pinned 0, checked 7 unchanged"),
        "{}",
        text(&output)
    );
}

#[test]
fn pins_files_from_a_local_directory_with_source() {
    // A maintainer's own downloads (--source DIR): the files are hashed from the directory, and the provenance
    // says so; images still come from their registry.
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = upstream.manifest();
    let manifest = write_manifest(tmp.path(), &original);
    let dir = upstream.files.dir();
    let start = now();
    let output = pin_sh(
        &manifest,
        &upstream.redirects(),
        &["--source", &dir.display().to_string()],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let after = read(&manifest);
    let date = run_date(&original, &after, &start);
    let mut pins = upstream.pins_133();
    pins.push(upstream.old_tool_pin());
    for pin in &mut pins {
        if pin.field == "sha256" {
            let name = pin.source.rsplit('/').next().expect("a file name");
            pin.source = format!("file://{}/{name}", dir.display());
        }
    }
    assert_eq!(after, expected_after(&original, &pins, &date), "{report}");
}

#[test]
fn asks_the_token_service_a_registry_names_and_keeps_the_token_to_itself() {
    // As public registries do for anonymous pulls: 401 with a Bearer challenge naming a token service, which
    // pin.sh asks for a pull token of that repository, then sends it. The token service is a file on the file
    // server (its log keeps each request's query string).
    let files = FileServer::start();
    let token = "a-pull-token-pin-sh-must-not-print";
    files.put(
        "token",
        format!("{{\"token\": \"{token}\", \"expires_in\": 300}}").as_bytes(),
    );
    let realm = format!("{}token", files.url());
    let upstream = Upstream::start_with(files, Some(&realm));
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = upstream.manifest();
    let manifest = write_manifest(tmp.path(), &original);
    let start = now();
    let output = pin_sh(
        &manifest,
        &upstream.redirects(),
        &["--kubernetes-version", "1.33"],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let after = read(&manifest);
    let date = run_date(&original, &after, &start);
    assert_eq!(
        after,
        expected_after(&original, &upstream.pins_133(), &date),
        "{report}"
    );
    // Percent-encoding's hex digits are in either case.
    let log = upstream.files.log().to_ascii_lowercase();
    for repository in ["multi%2fmulti", "single", "recorded"] {
        let asked = format!(
            "get /token?service={}&scope=repository%3a{repository}%3apull ",
            servers::TOKEN_SERVICE
        );
        assert!(log.contains(&asked), "{asked}\n{log}");
    }
    assert!(
        !report.contains(token),
        "pin.sh printed the token:\n{report}"
    );
    assert!(!after.contains(token));
}

#[test]
fn refuses_a_moved_tag_and_a_changed_file_and_changes_nothing() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let manifest = write_manifest(tmp.path(), &upstream.manifest());
    let output = pin_sh(
        &manifest,
        &upstream.redirects(),
        &["--kubernetes-version", "1.33"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let pinned = read(&manifest);

    // Upstream changes under the same names: the index tag pin.sh pinned, the tag a public record pinned, and
    // a release file.
    let moved = upstream
        .registry
        .push_image("multi/multi", "v1.0.0", "multi 1.0.0, rebuilt", true);
    let moved_recorded =
        upstream
            .registry
            .push_image("recorded", "v2.0.0", "recorded 2.0.0, rebuilt", true);
    assert_ne!(moved.digest, upstream.multi.digest);
    let changed = upstream.files.put(
        "tool-1.0.0-linux-amd64.tar.gz",
        b"tool 1.0.0, replaced upstream\n",
    );

    let output = pin_sh(&manifest, &upstream.redirects(), &[]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    for refusal in [
        format!(
            "releases.1.33.addons.multi.images.multi.digest: the tag moved: pinned {} (index), but {} now resolves to {} (index)",
            upstream.multi.digest,
            upstream.image_source("multi/multi", "v1.0.0"),
            moved.digest
        ),
        format!(
            "releases.1.33.addons.multi.images.recorded.digest: the tag moved: pinned {} (index), but {} now resolves to {} (index)",
            upstream.recorded_image.digest,
            upstream.image_source("recorded", "v2.0.0"),
            moved_recorded.digest
        ),
        format!(
            "releases.1.33.components.tool.sha256: the file changed: pinned sha256 {}, but {} now hashes to {changed}",
            upstream.tool,
            upstream.file_source("tool-1.0.0-linux-amd64.tar.gz")
        ),
        "is unchanged:".to_string(),
    ] {
        assert!(report.contains(&refusal), "{refusal}\n{report}");
    }
    // Nothing at all written: not even the 1.32 entry this run could have pinned.
    assert_eq!(read(&manifest), pinned, "{report}");
    assert!(read(&manifest).contains("        sha256: unpinned\n"));

    // --unpinned-only does not look at pins: it pins the 1.32 entry alone.
    let start = now();
    let output = pin_sh(&manifest, &upstream.redirects(), &["--unpinned-only"]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let after = read(&manifest);
    let date = run_date(&pinned, &after, &start);
    assert_eq!(
        after,
        expected_after(&pinned, &[upstream.old_tool_pin()], &date),
        "{report}"
    );
}

#[test]
fn leaves_what_it_cannot_reach_untouched_and_pins_the_rest() {
    let upstream = Upstream::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = upstream.manifest();
    let manifest = write_manifest(tmp.path(), &original);
    // The tool's file from a port nobody listens on (the first redirect that matches wins), and a tag the
    // registry does not hold.
    let closed = servers::free_port();
    let redirects = format!(
        "https://releases.example.test/tool-1.0.0=http://127.0.0.1:{closed}/tool-1.0.0 \
         registry.example.test/single:={}/absent: {}",
        upstream.registry.host(),
        upstream.redirects()
    );
    let start = now();
    let output = pin_sh(&manifest, &redirects, &["--kubernetes-version", "1.33"]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    let after = read(&manifest);
    let date = run_date(&original, &after, &start);
    assert_eq!(
        after,
        expected_after(
            &original,
            &[upstream.multi_manifest_pin(), upstream.multi_image_pin()],
            &date
        ),
        "{report}"
    );
    for line in [
        "these could not be reached and are left as they are:".to_string(),
        format!(
            "releases.1.33.components.tool.sha256: https://releases.example.test/tool-1.0.0-linux-amd64.tar.gz: \
             cannot reach 127.0.0.1:{closed}"
        ),
        format!(
            "releases.1.33.addons.multi.images.single.digest: registry.example.test/single:v1.0.0: \
             {} has no absent:v1.0.0 (HTTP 404)",
            upstream.registry.host()
        ),
    ] {
        assert!(report.contains(&line), "{line}\n{report}");
    }
    // Their reasons stay with them.
    assert_eq!(
        after
            .lines()
            .filter(|l| l.trim_start().starts_with("reason: "))
            .count(),
        2,
        "the unreachable entries keep their reasons:\n{after}"
    );
}

#[test]
fn refuses_redirects_that_are_not_from_to_or_speak_plain_http_off_loopback() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // No server is needed: these are refused before anything is fetched.
    let upstream_text = "apiVersion: ballast.dev/v1alpha1\nreleases:\n  \"1.33\":\n    kubernetes: 1.33.4\n    \
        components:\n      tool:\n        url: https://releases.example.test/tool\n        sha256: unpinned\n";
    let manifest = write_manifest(tmp.path(), upstream_text);
    for (redirects, says) in [
        (
            "https://releases.example.test/=http://192.0.2.1/",
            "plain HTTP only to a loopback host",
        ),
        (
            "https://releases.example.test/=http://127.0.0.1.example.com/",
            "plain HTTP only to a loopback host",
        ),
        (
            "https://releases.example.test/",
            "\"https://releases.example.test/\" is not FROM=TO",
        ),
        (
            "registry.example.test/=127.0.0.1:5000/\"x",
            "holds a quote, a backslash or a |",
        ),
        (
            "registry.example.test/=http://127.0.0.1:5000/",
            "an image reference maps to a reference",
        ),
        (
            "https://releases.example.test/=127.0.0.1:5000/",
            "a URL must map to an https://",
        ),
        (
            "ftp://releases.example.test/=https://mirror.example.com/",
            "a URL must be https:// or http://",
        ),
    ] {
        let output = pin_sh(&manifest, redirects, &[]);
        let report = text(&output);
        assert_eq!(output.status.code(), Some(1), "{redirects}: {report}");
        assert!(
            report.contains("BALLAST_PIN_REDIRECT") && report.contains(says),
            "{redirects}: expected {says:?}\n{report}"
        );
        assert_eq!(read(&manifest), upstream_text);
    }
}

/// One pinnable value of a manifest as lib.sh's reader sees it.
struct Entry {
    /// The keys of the mapping that holds it.
    path: Vec<String>,
    /// `sha256` (with a `url`) or `digest` (with a `reference`).
    field: &'static str,
    value: String,
    /// The URL or the image reference.
    locator: String,
}

impl Entry {
    /// How pin.sh names it in its messages.
    fn name(&self) -> String {
        format!("{}.{}", self.path.join("."), self.field)
    }
}

fn entries(manifest: &Path) -> Vec<Entry> {
    let output = Command::new("sh")
        .arg("-c")
        .arg(". \"$1\"; ballast_flatten \"$2\"")
        .arg("sh")
        .arg(repo_root().join("images/lib.sh"))
        .arg(manifest)
        .stdin(Stdio::null())
        .output()
        .expect("running lib.sh's reader");
    assert!(output.status.success(), "{}", text(&output));
    let flat = String::from_utf8_lossy(&output.stdout).to_string();
    let rows: Vec<Vec<&str>> = flat.lines().map(|l| l.split('\t').collect()).collect();
    let value_of = |parent: &[&str], key: &str| -> Option<String> {
        rows.iter()
            .find(|r| {
                r.len() == parent.len() + 2
                    && r[..parent.len()] == *parent
                    && r[parent.len()] == key
            })
            .map(|r| r[parent.len() + 1].to_string())
    };
    let mut found = Vec::new();
    for row in &rows {
        let Some((value, keys)) = row.split_last() else {
            continue;
        };
        let Some((field, parent)) = keys.split_last() else {
            continue;
        };
        let (field, locator) = match *field {
            "sha256" => ("sha256", value_of(parent, "url")),
            "digest" => ("digest", value_of(parent, "reference")),
            _ => continue,
        };
        if let Some(locator) = locator {
            found.push(Entry {
                path: parent.iter().map(|k| k.to_string()).collect(),
                field,
                value: value.to_string(),
                locator,
            });
        }
    }
    found
}

#[test]
fn on_a_copy_of_the_real_manifest_pins_only_what_is_redirected_and_guards_the_public_records() {
    let registry = Registry::start();
    let files = FileServer::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let original = read(&repo_root().join("images/manifest.yaml"));
    let manifest = write_manifest(tmp.path(), &original);
    let all = entries(&manifest);

    // An image no public record pins, served here under the manifest's own reference (every entry naming it:
    // a version both releases share); everything else is upstream, which this machine cannot reach.
    let image = all
        .iter()
        .find(|e| e.field == "digest" && e.value == "unpinned")
        .map(|e| e.locator.clone())
        .expect("the real manifest has an unpinned image for this test to serve; pick another case when none is left");
    let (repository, tag) = image
        .split_once('/')
        .and_then(|(_, rest)| rest.rsplit_once(':'))
        .expect("registry/repository:tag");
    let pushed = registry.push_image(repository, tag, &image, true);
    let source = format!("{}/{repository}:{tag}", registry.host());
    let pins: Vec<Pin> = all
        .iter()
        .filter(|e| e.locator == image && e.value == "unpinned")
        .map(|e| Pin {
            path: e.path.clone(),
            field: "digest",
            value: pushed.digest.clone(),
            kind: Some(pushed.kind),
            source: source.clone(),
        })
        .collect();
    let start = now();
    let output = pin_sh(&manifest, &format!("{image}={source}"), &[]);
    let report = text(&output);
    assert_eq!(output.status.code(), Some(3), "{report}");
    let after = read(&manifest);
    let date = run_date(&original, &after, &start);
    assert_eq!(after, expected_after(&original, &pins, &date), "{report}");
    assert!(
        report.contains(&format!("pinned {}, checked 0 unchanged", pins.len())),
        "{report}"
    );
    // What pin.sh wrote is what Ballast's own reader accepts (provenance, digestKind and all), and counts as
    // pinned there.
    let before =
        ComponentManifest::parse(&original, "the real manifest").expect("the real manifest");
    let pinned = ComponentManifest::parse(&after, "the pinned copy")
        .unwrap_or_else(|e| panic!("Ballast's reader refuses what pin.sh wrote: {e}\n{after}"));
    assert_eq!(
        pinned.unpinned_addons().len() + pins.len(),
        before.unpinned_addons().len(),
        "{:?}",
        pinned.unpinned_addons()
    );
    // Every other entry is named as out of reach, and left as it is.
    for entry in all.iter().filter(|e| e.locator != image) {
        assert!(
            report.contains(&format!("  - {}: {}: ", entry.name(), entry.locator)),
            "{} is not reported as out of reach\n{report}",
            entry.name()
        );
    }

    // A file a public record pins, served here with other bytes: refused, naming it, and nothing written.
    let file = all
        .iter()
        .find(|e| e.field == "sha256" && e.value != "unpinned")
        .expect("the real manifest pins a file");
    let name = file.locator.rsplit('/').next().expect("a file name");
    let served = files.put(name, b"not the release the public record hashed\n");
    let output = pin_sh(
        &manifest,
        &format!("{image}={source} {}={}{name}", file.locator, files.url()),
        &[],
    );
    let report = text(&output);
    assert_eq!(output.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!(
            "{}: the file changed: pinned sha256 {}, but {}{name} now hashes to {served}",
            file.name(),
            file.value,
            files.url()
        )),
        "{report}"
    );
    assert_eq!(read(&manifest), after, "{report}");
}
