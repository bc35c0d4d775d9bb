//! File tests in the style of cranelift's filetests.
//!
//! Each `.obc` file under `tests/filetests/` starts with a header line
//! `; test <kind>`, then the input, then a line `; ----- expected -----` and the
//! expected output, one `; ` comment line per output line. Kinds:
//!
//! - `verify`: parse and verify; the output is `ok` or every diagnostic as
//!   `line:col: <phase> error: <detail>`.
//! - `print`: the canonical text of the module (which must also parse back to
//!   an equal module).
//! - `analyze`: the shared analyses of every function with a body.
//!
//! Run with `OFFLOAD_BLESS=1` to rewrite the expected sections from the actual
//! output. One `#[test]` runs the whole directory.

use offload_ir::{FuncId, analysis, parse_module, print_module, verify};
use std::path::Path;

const MARKER: &str = "; ----- expected -----";

fn diagnostics_text(ds: &offload_ir::Diagnostics) -> String {
    ds.0.iter()
        .map(|d| {
            let phase = match d.phase {
                offload_ir::Phase::Parse => "parse",
                offload_ir::Phase::Verify => "verify",
            };
            format!(
                "{}:{}: {phase} error: {}\n",
                d.span.line,
                d.span.col,
                d.detail()
            )
        })
        .collect()
}

fn run(kind: &str, name: &str, input: &str) -> Result<String, String> {
    match kind {
        "verify" => Ok(match parse_module(name, input).and_then(verify) {
            Ok(_) => "ok\n".into(),
            Err(ds) => diagnostics_text(&ds),
        }),
        "print" => {
            let m = parse_module(name, input).map_err(|d| diagnostics_text(&d))?;
            let text = print_module(&m);
            let again = parse_module(name, &text)
                .map_err(|d| format!("printed text does not parse:\n{}", diagnostics_text(&d)))?;
            if again != m {
                return Err("printed text parses to a different module".into());
            }
            Ok(text)
        }
        "analyze" => {
            let v = parse_module(name, input)
                .and_then(verify)
                .map_err(|d| diagnostics_text(&d))?;
            Ok((0..v.funcs.len())
                .map(FuncId::new)
                .filter(|&f| !v.func(f).is_abstract())
                .map(|f| analysis::dump(&v, f))
                .collect())
        }
        other => Err(format!("unknown test kind `{other}`")),
    }
}

fn comment(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.is_empty() {
                ";\n".to_string()
            } else {
                format!("; {l}\n")
            }
        })
        .collect()
}

fn uncomment(text: &str) -> String {
    text.lines()
        .map(|l| {
            format!(
                "{}\n",
                l.strip_prefix("; ")
                    .unwrap_or(l.strip_prefix(';').unwrap_or(l))
            )
        })
        .collect()
}

#[test]
fn filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests");
    let bless = std::env::var_os("OFFLOAD_BLESS").is_some();
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("filetests directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "obc"))
        .collect();
    paths.sort();
    let mut failures = Vec::new();
    let mut invalid = 0;
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(path).expect("read filetest");
        let Some(kind) = text.lines().next().and_then(|l| l.strip_prefix("; test ")) else {
            failures.push(format!("{name}: first line must be `; test <kind>`"));
            continue;
        };
        let kind = kind.trim().to_string();
        let (input, expected) = match text.find(MARKER) {
            Some(at) => (
                &text[..at],
                uncomment(text[at + MARKER.len()..].trim_start_matches('\n')),
            ),
            None => (text.as_str(), String::new()),
        };
        let actual = match run(&kind, &name, input) {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        if kind == "verify" && actual != "ok\n" {
            invalid += 1;
        }
        if actual != expected {
            if bless {
                let new = format!("{}{MARKER}\n{}", input, comment(&actual));
                std::fs::write(path, new).expect("bless");
            } else {
                failures.push(format!(
                    "{name}: output differs\n--- expected\n{expected}--- actual\n{actual}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} filetest(s) failed (OFFLOAD_BLESS=1 rewrites expectations):\n\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(paths.len() >= 50, "only {} filetests", paths.len());
    assert!(
        invalid >= 40,
        "only {invalid} invalid programs pinned; keep at least 40"
    );
}
