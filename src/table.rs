//! Text tables, through comfy-table: columns sized to their widest cell
//! (long names never push a row out of line), a rule under the header, no
//! borders. Shared by the library's reports and the binary; not public API.

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
    // No padding on the left, so that rows start at the line's start.
    let mut t = t.clone();
    for c in t.column_iter_mut() {
        c.set_padding((0, 1));
    }
    // The style's empty left border: drop the blank column it leaves.
    let lines: Vec<String> = t.lines().collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches(' ').len())
        .min()
        .unwrap_or(0);
    let mut s = String::new();
    for l in &lines {
        s.push_str(l.get(indent..).unwrap_or("").trim_end());
        s.push('\n');
    }
    s
}
