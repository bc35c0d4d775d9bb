//! The `offload` binary: `check`, `fmt` and `analyze` on good and bad input.

use std::path::PathBuf;
use std::process::Command;

fn offload(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_offload"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run offload");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn examples() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("examples/kernels"),
    )
    .unwrap()
    .map(|e| e.unwrap().path())
    .filter(|p| p.extension().is_some_and(|e| e == "obc"))
    .map(|p| p.to_string_lossy().into_owned())
    .collect();
    v.sort();
    v
}

fn temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offload-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn check_passes_every_example() {
    let files = examples();
    let mut args = vec!["check"];
    args.extend(files.iter().map(String::as_str));
    let (code, out, err) = offload(&args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok ")).count(),
        files.len(),
        "{out}"
    );
}

#[test]
fn check_reports_every_error_with_a_caret() {
    let p = temp(
        "two.obc",
        "func a() -> i32 {\n    ret\n}\n\nfunc b() {\n    f32.add\n    ret\n}\n",
    );
    let (code, _, err) = offload(&["check", p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("two.obc:2:5"), "{err}");
    assert!(err.contains("two.obc:6:5"), "{err}");
    assert!(err.contains("^^^"), "{err}");
    assert!(err.contains("found 2 problem(s)"), "{err}");
}

#[test]
fn check_of_garbage_or_missing_files_is_an_error_not_a_panic() {
    let garbage = temp("garbage.obc", "\u{0}\u{1}kernel ((((\n}}}} @@@ \u{feff}");
    let (code, _, err) = offload(&["check", garbage.to_str().unwrap(), "/nonexistent/x.obc"]);
    assert_eq!(code, 1);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("cannot read /nonexistent/x.obc"), "{err}");
    assert!(err.contains("2 of 2 file(s) failed"), "{err}");
}

#[test]
fn fmt_says_that_source_files_are_formatted_by_rustfmt() {
    // It said "expected `class`, `func` or `kernel`" on a `.ofk` file.
    let p = temp("k.ofk", "fn a() {}\n");
    let (code, _, err) = offload(&["fmt", p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("is source (Rust syntax)") && err.contains("rustfmt"),
        "{err}"
    );
}

#[test]
fn fmt_prints_canonical_text_and_check_mode_detects_drift() {
    let p = temp(
        "messy.obc",
        "kernel   k(i:i64,xs:i32[]) {   ; comment\n  load xs\n      i32.const 0\n i32.const 1 ; one\n i32.astore\n ret\n}\n",
    );
    let (code, out, err) = offload(&["fmt", p.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "; comment\nkernel k(i: i64, xs: i32[]) {\n    load xs\n    i32.const 0\n    i32.const 1              ; one\n    i32.astore\n    ret\n}\n",
        "comments survive formatting"
    );
    let (code, _, err) = offload(&["fmt", "--check", p.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("not in canonical form"), "{err}");
    // The check shows how the file differs.
    assert!(
        err.contains("+    load xs") && err.contains("-  load xs"),
        "{err}"
    );
    let canon = temp("canon.obc", &out);
    assert_eq!(offload(&["fmt", "--check", canon.to_str().unwrap()]).0, 0);
    // Several files: each is checked (the counts name how many failed),
    // and --write rewrites them all.
    let (pa, ca) = (p.to_str().unwrap(), canon.to_str().unwrap());
    let (code, _, err) = offload(&["fmt", "--check", ca, pa, ca]);
    assert_eq!(code, 1);
    assert!(err.contains("1 of 3 file(s) failed"), "{err}");
    let (code, _, err) = offload(&["fmt", ca, pa]);
    assert_eq!(code, 1);
    assert!(err.contains("give --write or --check"), "{err}");
    let (code, out, err) = offload(&["fmt", "--write", pa, ca]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), format!("formatted {pa}"));
    assert_eq!(offload(&["fmt", "--check", pa, ca]).0, 0);
}

#[test]
fn analyze_shows_sites() {
    let (code, out, err) = offload(&["analyze", "examples/kernels/saxpy.obc"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("function saxpy"), "{out}");
    assert!(out.contains("site 0 @0 [poll]"), "{out}");
    let (code, _, err) = offload(&["analyze", "examples/kernels/saxpy.obc", "--func", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("no function `nope`"), "{err}");
}

/// `offload demo | head -1`: the reader goes away after one line, and the
/// tool ends quietly (by `SIGPIPE`, as other Unix tools do) instead of
/// panicking in `println!`.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_tool_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_offload"))
        .args(["demo", "--workers", "1"])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run offload");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut first)
        .expect("a first line");
    // The reader (and with it the pipe's only read end) is dropped here.
    assert!(first.starts_with("offload demo"), "{first}");
    let out = child.wait_with_output().expect("wait");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
}

#[test]
fn demo_runs_every_example_and_checks_it() {
    let (code, out, err) = offload(&["demo", "--shrink", "50", "--workers", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("all 10 examples match native Rust"), "{out}");
    for k in [
        "saxpy",
        "mandelbrot",
        "nbody",
        "blackscholes",
        "matmul",
        "histogram",
        "alloc_vectors",
        "linked_list",
        "shape_areas",
        "checked_div",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(k) && l.contains(" ok ")),
            "{k} missing or failed:\n{out}"
        );
    }
    let (code, _, err) = offload(&["demo", "--alloc", "bogus"]);
    assert_eq!(code, 2, "clap rejects a bad policy");
    assert!(err.contains("unknown allocation policy"), "{err}");
}

#[test]
fn bench_prints_json_lines_with_ratios() {
    let (code, out, err) = offload(&[
        "bench",
        "--json",
        "--shrink",
        "64",
        "--reps",
        "1",
        "--workers",
        "2",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 10, "{out}");
    for l in &lines {
        for field in [
            "\"bench\":",
            "\"device\":\"cpu\"",
            "\"baseline\":",
            "\"slowdown\":",
            "\"offload_ns\":",
            "\"baseline_ns\":",
            "\"target\":",
            "\"met\":",
        ] {
            assert!(l.contains(field), "{field} missing in {l}");
        }
        assert!(l.starts_with('{') && l.ends_with('}'), "{l}");
    }
    for b in [
        "saxpy",
        "mandelbrot",
        "nbody",
        "matmul",
        "blackscholes",
        "deopt 1%",
        "compile saxpy (quick)",
        "compile saxpy (optimized)",
        "saxpy worst of 20, 2 busy threads",
        "two half saxpys in flight",
    ] {
        assert!(
            lines
                .iter()
                .any(|l| l.contains(&format!("\"bench\":\"{b}\""))),
            "{b} missing:\n{out}"
        );
    }
}

#[test]
fn experiment_all_writes_a_table_csv_and_svg() {
    let dir = std::env::temp_dir().join(format!("offload-exp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("exp.csv");
    let svg = dir.join("exp.svg");
    let (code, out, err) = offload(&[
        "experiment",
        "--all",
        "--launches",
        "4",
        "--items",
        "512",
        "--workers",
        "2",
        "--check",
        "--repeat",
        "2",
        "--csv",
        csv.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // A table row per (workload, policy), each checked against the
    // interpreter.
    for w in offload_cli::tools::experiment::WORKLOADS {
        for p in offload::policy::NAMES {
            let row = out
                .lines()
                .find(|l| {
                    let mut words = l.split_whitespace();
                    words.next() == Some(w) && words.next() == Some(p)
                })
                .unwrap_or_else(|| panic!("no row for {w} / {p} in\n{out}"));
            assert!(row.trim_end().ends_with("yes"), "{row}");
        }
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "workload,policy,run,launch,warmup,device,version,time_ms,cumulative_ms,on_device,replayed,deopts,decision"
    );
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 6 * 4 * 4 * 2, "every launch of both runs");
    assert!(rows.iter().all(|r| r.split(',').count() == 13), "{text}");
    // Runs and launches count from 1; the warm-up launch ran in the
    // interpreter (no version), the next on a compiled version.
    assert!(
        rows[0].starts_with("stable,never,1,1,true,interp,,"),
        "{}",
        rows[0]
    );
    assert!(
        rows[1].starts_with("stable,never,1,2,false,cpu,1,"),
        "{}",
        rows[1]
    );
    assert!(rows[4].starts_with("stable,never,2,1,true,"), "{}", rows[4]);
    assert!(out.contains("inputs change at launch"), "{out}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg"), "{}", &plot[..plot.len().min(200)]);
    for label in [
        "phase-change: cumulative time after the warm-up",
        "trap-limit (1 recompile)",
        "cost-model",
        "inputs change (launch",
    ] {
        assert!(plot.contains(label), "{label} missing from the SVG");
    }
}

#[test]
fn experiment_rejects_unknown_workloads_and_policies() {
    let (code, _, err) = offload(&["experiment", "--workload", "nope"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("unknown workload `nope`") && err.contains("phase-change"),
        "{err}"
    );
    let (code, _, err) = offload(&["experiment", "--workload", "stable", "--policy", "maybe"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("unknown policy `maybe`") && err.contains("trap-limit"),
        "{err}"
    );
}

#[test]
fn isa_lists_every_instruction_from_the_table() {
    let (code, out, err) = offload(&["isa"]);
    assert_eq!(code, 0, "{err}");
    // A header, its rule, and a row per instruction.
    let rows: Vec<&str> = out.lines().skip(2).collect();
    assert_eq!(rows.len(), offload::ir::Opcode::ALL.len(), "{out}");
    for op in offload::ir::Opcode::ALL {
        assert!(
            rows.iter()
                .any(|r| r.split_whitespace().next() == Some(op.mnemonic())),
            "{} missing",
            op.mnemonic()
        );
    }
    let add = rows.iter().find(|r| r.starts_with("i32.add ")).unwrap();
    assert!(
        add.contains("[i32 i32] -> [i32]") && add.contains("wrapping"),
        "{add}"
    );
    let (code, out, _) = offload(&["isa", "f64.aload"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("[f64[] i32] -> [f64]") && out.contains("null, bounds"),
        "{out}"
    );
}

#[test]
fn isa_and_check_name_offloads_instruction_for_a_jvm_mnemonic() {
    let (code, _, err) = offload(&["isa", "invokevirtual"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("the JVM's `invokevirtual` is `callvirt` in offload"),
        "{err}"
    );
    let (code, _, err) = offload(&["isa", "i32.ad"]);
    assert_eq!(code, 0, "a prefix lists its instructions: {err}");
    let f = temp(
        "jvm.obc",
        "kernel k(i: i64, out: i32[]) {\n    load out\n    i32.const 0\n    i32.const 1\n    i32.const 2\n    iadd\n    i32.astore\n    ret\n}\n",
    );
    let (code, _, err) = offload(&["check", f.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("unknown instruction `iadd` (the JVM's `iadd` is `i32.add` in offload"),
        "{err}"
    );
    assert!(err.contains('^'), "no caret: {err}");
}
