//! File tests of the source language: every `tests/files/*.ofk` starts
//! with a header line naming its subtest,
//!
//! ```text
//! // test compile      (the bytecode the front end makes, printed)
//! // test error        (the errors, rendered with their carets)
//! ```
//!
//! then the source. The expected output follows the source after a line
//! `// ----- expected -----`, one `// ` line per output line;
//! `OFFLOAD_BLESS=1` rewrites it from the actual output.

use crate::bless;
use crate::kinds::{comment, uncomment};
use std::path::Path;

const MARKER: &str = "// ----- expected -----";

fn output(kind: &str, name: &str, src: &str) -> Result<String, String> {
    match kind {
        "compile" => match offload::lang::compile_verified(name, src) {
            Ok(v) => {
                let text = offload::ir::print_module(&v);
                // What the front end makes is ordinary bytecode: its text
                // assembles back to a module that verifies.
                offload::ir::load(name, &text)
                    .map_err(|d| format!("the printed bytecode does not load:\n{d}\n{text}"))?;
                Ok(text)
            }
            Err(d) => Err(format!(
                "does not compile:\n{}",
                offload::diagnostics::render_all(&d.0, src)
            )),
        },
        "error" => match offload::lang::compile_verified(name, src) {
            Ok(_) => Err("compiles, but the test expects an error".into()),
            Err(d) => {
                if d.0
                    .iter()
                    .any(|d| d.message.contains("internal compiler error"))
                {
                    return Err(format!(
                        "the front end made bytecode the verifier rejects:\n{}",
                        offload::diagnostics::render_all(&d.0, src)
                    ));
                }
                Ok(offload::diagnostics::render_all(&d.0, src))
            }
        },
        other => Err(format!("unknown subtest `{other}` (compile, error)")),
    }
}

/// Every source file test: compile or error, against its expectation.
#[test]
fn source_file_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/files");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the tests/files directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "ofk"))
        .collect();
    paths.sort();
    let (mut compiles, mut errors) = (0, 0);
    let mut failures = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).expect("a readable file test");
        let kind = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// test "))
            .map(str::trim)
            .unwrap_or_else(|| panic!("{name}: the first line must be `// test compile|error`"))
            .to_string();
        let (input, expected) = match text.find(MARKER) {
            Some(at) => (
                &text[..at],
                uncomment(text[at + MARKER.len()..].trim_start_matches('\n'), "//"),
            ),
            None => (text.as_str(), String::new()),
        };
        match output(&kind, &name, input) {
            Ok(actual) if actual == expected => {}
            Ok(actual) if bless() => {
                std::fs::write(path, format!("{input}{MARKER}\n{}", comment(&actual, "//")))
                    .expect("blessing");
            }
            Ok(actual) => failures.push(format!(
                "{name}: output differs\n--- expected\n{expected}--- actual\n{actual}"
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
        if kind == "compile" {
            compiles += 1;
        } else {
            errors += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} source file test(s) failed (OFFLOAD_BLESS=1 rewrites expectations):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(compiles >= 8, "only {compiles} compile tests");
    assert!(errors >= 30, "only {errors} error tests");
}
