//! The one table writer for what Ballast prints to a terminal (`ballast get ...`, `ballast etcd ...`,
//! `localcloud status`): left-aligned columns three spaces apart under a header, as kops and kubectl print them,
//! laid out by `comfy-table` (widths by displayed characters, so a multi-byte name keeps its column straight).

use comfy_table::{presets, CellAlignment, Table};

/// Spaces between two columns.
const GAP: u16 = 3;

/// `header` and `rows` as aligned columns, one line each, every line ending in `\n`, no trailing spaces. A row
/// shorter than the header leaves its last columns empty; cells past the header's columns are printed too.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut table = Table::new();
    // No borders at all: only the padding separates columns.
    table.load_preset(presets::NOTHING);
    table.set_header(header.iter().copied());
    for row in rows {
        table.add_row(row.iter().map(String::as_str));
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, GAP));
        column.set_cell_alignment(CellAlignment::Left);
    }
    let mut out = table.trim_fmt();
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_under_the_header() {
        let out = table(
            &["NAME", "ROLE"],
            &[
                vec!["control-plane-us-west-2a".into(), "ControlPlane".into()],
                vec!["nodes".into(), "Node".into()],
            ],
        );
        assert_eq!(
            out,
            "NAME                       ROLE\n\
             control-plane-us-west-2a   ControlPlane\n\
             nodes                      Node\n"
        );
    }

    #[test]
    fn multi_byte_cells_short_rows_and_no_rows() {
        let out = table(
            &["ID", "NOTE", "AGE"],
            &[
                vec!["é1".into(), "naïve".into(), "3m".into()],
                vec!["i-0abc".into()],
            ],
        );
        assert_eq!(
            out,
            "ID       NOTE    AGE\n\
             é1       naïve   3m\n\
             i-0abc\n"
        );
        assert_eq!(table(&["ID", "STATE"], &[]), "ID   STATE\n");
    }
}
