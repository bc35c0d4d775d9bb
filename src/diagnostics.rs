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
    // The report says `error:`; the assembler's and the verifier's say
    // which of the two found it (the source front end's are plain errors,
    // as rustc's are).
    let phase = match d.phase {
        Phase::Parse => "parse error: ",
        Phase::Verify => "verify error: ",
        Phase::Compile => "",
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
        format!("{phase}{}", d.message)
    } else {
        format!("{phase}{} ({})", d.message, loc.join(" "))
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

/// `n` and a noun, plural unless `n` is 1: `1 object`, `2 arrays`,
/// `0 objects`.
pub fn count_text(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
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

/// `bytes` as text, or where it stops being UTF-8: `NAME:LINE:COL: not
/// UTF-8 text (byte 0xNN)`, the column counted in characters.
pub fn utf8_text(name: &str, bytes: Vec<u8>) -> Result<String, String> {
    utf8_at(bytes).map_err(|(line, col, byte)| {
        format!(
            "{name}:{line}:{col}: not UTF-8 text (byte 0x{byte:02x}); offload reads source files as UTF-8"
        )
    })
}

/// `bytes` as text, or the line and column (1-based, in characters) of the
/// first byte that is not UTF-8, and that byte.
pub fn utf8_at(bytes: Vec<u8>) -> Result<String, (usize, usize, u8)> {
    String::from_utf8(bytes).map_err(|e| {
        let bytes = e.as_bytes();
        let at = e.utf8_error().valid_up_to();
        let good = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let line = good.matches('\n').count() + 1;
        let col = good.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col, bytes[at])
    })
}

/// Reads a source file as text, every failure named with the file (and,
/// for bad UTF-8, the line and column).
pub fn read_source(path: &std::path::Path) -> Result<String, String> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {name}: {e}"))?;
    utf8_text(&name, bytes)
}

/// A size in bytes in the binary unit that suits it (`512 B`, `1.50 KiB`,
/// `64.0 MiB`, `2.00 GiB`), three significant digits.
pub fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", UNITS[unit])
}

/// A duration in the unit that suits it (ns, µs, ms or s), three significant
/// digits: for notes, where each figure stands alone. Table columns use
/// one unit per column instead.
pub fn duration_text(d: std::time::Duration) -> String {
    let ns = d.as_nanos() as f64;
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {unit}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn bad_utf8_is_located() {
        let bytes = b"kernel k(i: i64) {\n    ret \xff\n}".to_vec();
        let e = super::utf8_text("k.obc", bytes).unwrap_err();
        assert!(
            e.starts_with("k.obc:2:9: not UTF-8 text (byte 0xff)"),
            "{e}"
        );
        let e = super::utf8_text("x", b"\xc3\xa9\xc3".to_vec()).unwrap_err();
        assert!(e.starts_with("x:1:2:"), "{e}");
        assert_eq!(super::utf8_text("x", b"ok".to_vec()).unwrap(), "ok");
    }

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
