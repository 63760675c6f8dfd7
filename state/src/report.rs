//! A node's boot report: what `nodeup` did on one instance, written to `reports/<role-id>:<instance-id>.json` in the
//! state store (and kept under the node's root as `var/lib/nodeup/report.json`), so that an operator sees why a
//! node did not come up without logging in to it. `ballast get instances` reads them.
//!
//! Pure: the type, its JSON form and a few questions about it. Each instance writes only its own report
//! (`Precondition::None`).

use serde::{Deserialize, Serialize};

use crate::layout::ClusterPaths;
use crate::spec::{Role, API_VERSION};

pub const KIND_NODE_REPORT: &str = "NodeReport";

/// Where in its run nodeup is, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum Phase {
    /// Every file is written and every service whose binary exists was started: the node is configured.
    Configured,
    /// A step failed; `errors` says which and why. Nothing was written to the node after the failing step.
    Failed,
}

/// The steps of a run, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// IMDS identity and the boot config from user-data.
    Identity,
    /// The node spec (sha256 checked) and the secrets it names, from the state store.
    Fetch,
    /// Every file, rendered in memory, and the node's certificates issued (or kept).
    Render,
    /// Changed files written (temporary file + rename).
    Write,
    /// Services whose files changed started or restarted.
    Services,
}

/// How long a step took, and whether it succeeded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepTiming {
    pub step: Step,
    pub millis: u64,
    pub ok: bool,
}

/// What happened to a file nodeup manages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum FileAction {
    Created,
    /// Its content, mode or owner changed.
    Updated,
    /// nodeup wrote it before and the node spec no longer asks for it (root's `authorized_keys` once every SSH
    /// key was deleted).
    Removed,
}

/// A file nodeup wrote (unchanged files are only counted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileWritten {
    /// The path on the node (without `--root`).
    pub path: String,
    pub action: FileAction,
    /// Octal, e.g. `0600`.
    pub mode: String,
}

/// What nodeup did with a service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum ServiceState {
    /// Started (it was not running, and none of its files changed since it was last started).
    Started,
    /// Restarted because one of its files changed.
    Restarted,
    /// Already running with unchanged files: left alone.
    Unchanged,
    /// Its binary is not on this host: not started, never pretended to run.
    Absent,
    /// Starting it failed; `detail` says why.
    Failed,
}

/// One service and what was done with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServiceReport {
    pub name: String,
    pub state: ServiceState,
    /// The binary checked (for `Absent`), or the error (for `Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A node's boot report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeReport {
    pub api_version: String,
    pub kind: String,
    pub instance_id: String,
    /// From the boot config; `None` when nodeup failed before it could read one.
    pub cluster_name: Option<String>,
    pub instance_group: Option<String>,
    pub role: Option<Role>,
    pub private_ip: Option<String>,
    pub availability_zone: Option<String>,
    pub phase: Phase,
    /// The sha256 of the node spec this run applied (or was refused).
    pub node_spec_sha256: Option<String>,
    pub nodeup_version: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: String,
    /// From nodeup's start (process start) to the end of its run.
    pub total_millis: u64,
    pub steps: Vec<StepTiming>,
    /// Files written by this run, sorted by path; empty when nothing changed.
    pub files_written: Vec<FileWritten>,
    /// Files already as wanted.
    pub files_unchanged: usize,
    pub services: Vec<ServiceReport>,
    /// Every error, outermost first, each a full sentence with its cause.
    pub errors: Vec<String>,
    /// The last lines of nodeup's log (never a secret: nodeup does not log them).
    pub log_tail: Vec<String>,
    /// On a control-plane node: its add-on applier's progress (`crate::addon_report`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons: Option<crate::addon_report::AddonsReport>,
}

impl NodeReport {
    /// An empty report for `instance_id`, to be filled by a run.
    pub fn new(instance_id: &str, nodeup_version: &str, started_at: &str) -> Self {
        NodeReport {
            api_version: API_VERSION.to_string(),
            kind: KIND_NODE_REPORT.to_string(),
            instance_id: instance_id.to_string(),
            cluster_name: None,
            instance_group: None,
            role: None,
            private_ip: None,
            availability_zone: None,
            phase: Phase::Failed,
            node_spec_sha256: None,
            nodeup_version: nodeup_version.to_string(),
            started_at: started_at.to_string(),
            finished_at: started_at.to_string(),
            total_millis: 0,
            steps: Vec::new(),
            files_written: Vec::new(),
            files_unchanged: 0,
            services: Vec::new(),
            errors: Vec::new(),
            log_tail: Vec::new(),
            addons: None,
        }
    }

    pub fn is_configured(&self) -> bool {
        self.phase == Phase::Configured
    }

    /// Services in `state`, by name.
    pub fn services_in(&self, state: ServiceState) -> Vec<&str> {
        self.services
            .iter()
            .filter(|s| s.state == state)
            .map(|s| s.name.as_str())
            .collect()
    }

    /// The report as stored (pretty JSON).
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec_pretty(self)
    }

    pub fn from_json(data: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(data)
    }
}

/// The prefix under which every report of `cluster` lives (`<cluster>/reports/`); list it for `get instances`.
pub fn reports_prefix(cluster: &str) -> String {
    ClusterPaths::new(cluster)
        .report("")
        .trim_end_matches(".json")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_lives_where_the_layout_says() {
        let mut report = NodeReport::new("i-0abc", "0.1.0", "2025-01-01T00:00:00Z");
        report.phase = Phase::Configured;
        report.role = Some(Role::Node);
        report.services.push(ServiceReport {
            name: "kubelet".into(),
            state: ServiceState::Absent,
            detail: Some("/usr/local/bin/kubelet".into()),
        });
        report.steps.push(StepTiming {
            step: Step::Fetch,
            millis: 12,
            ok: true,
        });
        let json = report.to_json().expect("json");
        let text = String::from_utf8(json.clone()).expect("utf8");
        assert!(text.contains("\"phase\": \"Configured\""), "{text}");
        assert!(text.contains("\"step\": \"fetch\""), "{text}");
        assert_eq!(NodeReport::from_json(&json).expect("parse"), report);
        assert!(report.is_configured());
        assert_eq!(report.services_in(ServiceState::Absent), ["kubelet"]);
        assert_eq!(reports_prefix("c.example.com"), "c.example.com/reports/");
        assert!(ClusterPaths::new("c.example.com")
            .report("i-0abc")
            .starts_with(&reports_prefix("c.example.com")));
    }
}
