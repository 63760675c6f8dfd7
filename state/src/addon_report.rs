//! What a control-plane node's add-on applier reports (`addons` in its boot report): whether it is still
//! waiting for its local API server, what it applied and at which versions, or why it failed. Pure.
//! `validate cluster` and `get instances -o yaml` show it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where the applier is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub enum AddonsState {
    /// The local API server has not answered yet (on the local cloud, which runs none, it never does).
    WaitingForApi,
    /// Every object of the set is as rendered.
    Applied,
    /// Rendering or applying failed; `detail` says why. The applier tries again later.
    Failed,
}

/// The `addons` section of a control-plane node's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonsReport {
    pub state: AddonsState,
    /// The API the applier talks to (`https://<private IP>:443`).
    pub api_server: String,
    /// Add-on -> pinned version (when rendered).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, String>,
    /// sha256 over every object of the set: two nodes with the same hash applied the same objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_sha256: Option<String>,
    /// Objects in the set, and how many this run wrote (the rest were already as rendered).
    pub objects: usize,
    pub applied: usize,
    /// RFC 3339, UTC: when this section was last written.
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Add-ons left out of an applied set, each with why and what to do (an unpinned image refuses only its own
    /// add-on; the others are applied).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub refused: BTreeMap<String, String>,
}

impl AddonsReport {
    pub fn waiting(api_server: &str, at: &str) -> Self {
        AddonsReport {
            state: AddonsState::WaitingForApi,
            api_server: api_server.to_string(),
            versions: BTreeMap::new(),
            set_sha256: None,
            objects: 0,
            applied: 0,
            updated_at: at.to_string(),
            detail: None,
            refused: BTreeMap::new(),
        }
    }

    /// One line for `validate cluster`: `applied 41 objects (calico 3.30.2, coredns 1.12.0, ...)`.
    pub fn summary(&self) -> String {
        let versions: Vec<String> = self
            .versions
            .iter()
            .map(|(name, version)| format!("{name} {version}"))
            .collect();
        match self.state {
            AddonsState::WaitingForApi => {
                format!("waiting for the API server at {}", self.api_server)
            }
            AddonsState::Applied => {
                let mut line = format!(
                    "applied: {} objects ({} written this run): {}",
                    self.objects,
                    self.applied,
                    versions.join(", ")
                );
                for (addon, why) in &self.refused {
                    line.push_str(&format!("; refused {addon}: {why}"));
                }
                line
            }
            AddonsState::Failed => format!(
                "failed: {}",
                self.detail.as_deref().unwrap_or("no detail recorded")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_summarizes() {
        let mut report = AddonsReport::waiting("https://10.0.1.10:443", "2026-01-01T00:00:00Z");
        assert_eq!(
            report.summary(),
            "waiting for the API server at https://10.0.1.10:443"
        );
        report.state = AddonsState::Applied;
        report.versions.insert("coredns".into(), "1.12.0".into());
        report.versions.insert("calico".into(), "3.30.2".into());
        report.objects = 20;
        report.applied = 3;
        assert_eq!(
            report.summary(),
            "applied: 20 objects (3 written this run): calico 3.30.2, coredns 1.12.0"
        );
        let mut partial = report.clone();
        partial
            .refused
            .insert("pod-identity-webhook".into(), "image unpinned".into());
        assert_eq!(
            partial.summary(),
            "applied: 20 objects (3 written this run): calico 3.30.2, coredns 1.12.0; refused \
             pod-identity-webhook: image unpinned"
        );
        let json = serde_json::to_string(&report).expect("json");
        assert!(json.contains("\"state\":\"Applied\""), "{json}");
        assert_eq!(
            serde_json::from_str::<AddonsReport>(&json).expect("parse"),
            report
        );
    }
}
