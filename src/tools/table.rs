//! Text tables for the binary's output, through comfy-table: columns sized
//! to their widest cell (long names never push a row out of line), a rule
//! under the header, no borders.

use comfy_table::{CellAlignment, Table, TableStyle, presets::NOTHING};

/// A table with this header and the project's style.
pub fn new<S: ToString>(header: impl IntoIterator<Item = S>) -> Table {
    const STYLE: TableStyle =
        NOTHING.header_separator(comfy_table::LineStyle::new(' ', '─', ' ', ' '));
    let mut t = Table::new();
    t.load_style(STYLE).set_header(
        header
            .into_iter()
            .map(|h| h.to_string())
            .collect::<Vec<_>>(),
    );
    t
}

/// Right-aligns these columns (numbers).
pub fn right(t: &mut Table, columns: &[usize]) {
    for &i in columns {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
}

/// The table as text, each line without trailing blanks, ending in a
/// newline.
pub fn text(t: &Table) -> String {
    let mut s = String::new();
    for l in t.lines() {
        s.push_str(l.trim_end());
        s.push('\n');
    }
    s
}
