//! Rendering data for stdout: aligned tables, YAML documents, JSON.

use ballast_state::terminal::escape_controls;
use serde::Serialize;

use crate::error::{json_error, yaml_error, CommandError};

/// Left-aligned columns separated by three spaces, like kops and kubectl (the workspace's one table writer,
/// `ballast_common::table`), every cell's control characters escaped first (`ballast_state::terminal`): a cell
/// may hold a name from the operator's input (a kops field, a label key), and the table goes to a terminal.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            row.iter()
                .map(|cell| escape_controls(cell).into_owned())
                .collect()
        })
        .collect();
    ballast_common::table::table(header, &rows)
}

/// YAML documents separated by `---`.
pub fn yaml_documents<T: Serialize>(objects: &[T]) -> Result<String, CommandError> {
    ballast_state::document::to_yaml_documents(objects).map_err(yaml_error)
}

/// Pretty JSON: one object as itself, several as a list.
pub fn json<T: Serialize>(objects: &[T]) -> Result<String, CommandError> {
    let rendered = if objects.len() == 1 {
        serde_json::to_string_pretty(&objects[0])
    } else {
        serde_json::to_string_pretty(objects)
    };
    rendered.map(|s| s + "\n").map_err(json_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns() {
        let out = table(
            &["NAME", "ROLE"],
            &[
                vec!["control-plane-us-west-2a".into(), "ControlPlane".into()],
                vec!["nodes".into(), "Node".into()],
            ],
        );
        assert_eq!(
            out,
            "NAME                       ROLE\ncontrol-plane-us-west-2a   ControlPlane\nnodes                      Node\n"
        );
    }
}
