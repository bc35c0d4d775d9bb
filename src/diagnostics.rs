//! Rendering [`Diagnostic`]s for people: the message, then the source line with
//! a caret under the fault (via `codespan-reporting`).

use codespan_reporting::diagnostic::{Diagnostic as Report, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Config};
use offload_ir::{Diagnostic, Phase};

/// Render one diagnostic against the source it came from, as plain text.
pub fn render(d: &Diagnostic, source: &str) -> String {
    let file = SimpleFile::new(d.file.to_string(), source);
    let start = (d.span.start as usize).min(source.len());
    let mut end = (d.span.end as usize).clamp(start, source.len());
    if end == start && end < source.len() {
        // Point at one character rather than at nothing.
        end = source[start..]
            .chars()
            .next()
            .map_or(start, |c| start + c.len_utf8());
    }
    let phase = match d.phase {
        Phase::Parse => "parse error",
        Phase::Verify => "verify error",
    };
    let mut label = Label::primary((), start..end);
    if let Some(e) = &d.expected {
        label = label.with_message(format!("expected {e}"));
    }
    let mut notes = Vec::new();
    if let Some(f) = &d.found {
        notes.push(format!("found {f}"));
    }
    let mut loc = Vec::new();
    if let Some(func) = &d.func {
        loc.push(format!("in `{func}`"));
    }
    if let Some(bci) = d.bci {
        loc.push(format!("at bci {bci}"));
    }
    let msg = if loc.is_empty() {
        format!("{phase}: {}", d.message)
    } else {
        format!("{phase}: {} ({})", d.message, loc.join(" "))
    };
    let report = Report::error()
        .with_message(msg)
        .with_labels(vec![label])
        .with_notes(notes);
    term::emit_into_string(&Config::default(), &file, &report)
        // The span always lies inside `source`, so this cannot fail; fall back to
        // the one-line form rather than panic.
        .unwrap_or_else(|_| format!("{d}\n"))
}

/// Render every diagnostic.
pub fn render_all(ds: &[Diagnostic], source: &str) -> String {
    ds.iter().map(|d| render(d, source)).collect()
}

/// A float as offload prints it everywhere: the shortest text that reads
/// back to the same value, with a `.0` on whole numbers and an exponent for
/// very large and very small magnitudes (`1.0`, `0.1`, `1e300`, `NaN`,
/// `inf`). That is the format of Rust's `{:?}` for floats, used here on
/// purpose and only for numbers.
pub fn f64_text(x: f64) -> String {
    format!("{x:?}")
}

/// [`f64_text`] for an `f32` (shortest for the `f32`, not for its widening).
pub fn f32_text(x: f32) -> String {
    format!("{x:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_the_line_and_a_caret() {
        let src = "kernel k(i: i64) {\n    i32.add\n    ret\n}\n";
        let err = offload_ir::load("k.obc", src).unwrap_err();
        let text = render_all(&err.0, src);
        assert!(text.contains("stack underflow"), "{text}");
        assert!(text.contains("k.obc:2:5"), "{text}");
        assert!(text.contains("i32.add"), "{text}");
        assert!(text.contains('^'), "{text}");
    }
}
