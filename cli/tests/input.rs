//! Large and odd input through the binary: reading stays linear in the size
//! of the input (a generated multi-megabyte program goes through the parser,
//! `offload fmt`, script mode and a piped REPL within a deadline that a
//! quadratic pass would blow), and every input error — bad UTF-8, an
//! unclosed brace — is reported with its location in every mode, without
//! ending a piped session.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_offload")
}

fn temp(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("offload-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Runs the binary with `stdin`, killing it past `limit`.
fn run(args: &[&str], stdin: &[u8], limit: Duration) -> (i32, String, String, Duration) {
    let mut child = Command::new(bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let t = Instant::now();
    let out = std::thread::scope(|s| {
        let h = s.spawn(|| child.wait_with_output().unwrap());
        while !h.is_finished() {
            assert!(
                t.elapsed() < limit,
                "`offload {}` ran past {limit:?}: reading input is not linear",
                args.join(" ")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        h.join().unwrap()
    });
    writer.join().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t.elapsed(),
    )
}

/// A kernel of about `bytes` bytes: a few locals, a long straight body.
fn long_kernel(bytes: usize) -> String {
    let mut s = String::from(
        "kernel long(i: i64, out: i64[]) {\n    local acc: i64\n    i64.const 0\n    store acc\n",
    );
    let mut n = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "    load acc\n    i64.const {n}\n    i64.add\n    store acc\n"
        ));
        n += 1;
    }
    s.push_str(
        "    load out\n    load i\n    i64.to_i32\n    load acc\n    i64.astore\n    ret\n}\n",
    );
    s
}

/// A kernel with `n` locals, each stored and loaded.
fn many_locals(n: usize) -> String {
    let mut s = String::from("kernel wide(i: i64, out: i64[]) {\n");
    for k in 0..n {
        s.push_str(&format!("    local x{k}: i64\n"));
    }
    for k in 0..n {
        s.push_str(&format!("    load i\n    store x{k}\n"));
    }
    s.push_str("    ret\n}\n");
    s
}

#[test]
fn a_multi_megabyte_program_is_read_in_linear_time() {
    // Quadratic reading took 70 s for a 1 MB definition and 38 s for
    // 200k locals; linear takes well under a second for each. The limit
    // leaves room for a slow, loaded machine and a debug build.
    let limit = Duration::from_secs(60);
    let long = long_kernel(2 << 20);
    let path = temp("long.obc", long.as_bytes());
    let p = path.to_str().unwrap();
    let (code, _, err, _) = run(&["check", p], b"", limit);
    assert_eq!(code, 0, "{err}");
    let (code, out, err, _) = run(&["fmt", p], b"", limit);
    assert_eq!(code, 0, "{err}");
    assert!(out.len() > 1 << 20);
    // Script mode and a piped REPL read the same definition as one entry.
    let script = format!("{long}let out = i64[4]\nrun long 0..4 out\nprint out[0..1]\n");
    let spath = temp("long.ofs", script.as_bytes());
    let (code, out, err, _) = run(&["run", spath.to_str().unwrap()], b"", limit);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("4 of 4 completed"), "{out}");
    let (code, out, err, _) = run(&["repl", "--workers", "2"], script.as_bytes(), limit);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("4 of 4 completed"),
        "{}",
        &out[out.len().saturating_sub(2000)..]
    );
    // Many source kernels: the front end looks each function up in a
    // table (a scan of the module per name made 31,587 kernels take 24 s).
    let many: String = (0..20_000)
        .map(|k| {
            format!("#[kernel]\nfn k{k}(i: i64, out: &mut [i64]) {{\n    out[i] = i + {k};\n}}\n")
        })
        .collect();
    let mpath = temp("many.ofk", many.as_bytes());
    let (code, out, err, _) = run(&["check", mpath.to_str().unwrap()], b"", limit);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("20000 kernels"), "{out}");
    // Many locals: the parser looks each name up in a table.
    let wide = temp("wide.obc", many_locals(100_000).as_bytes());
    let (code, out, err, _) = run(&["fmt", wide.to_str().unwrap()], b"", limit);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("local x99999: i64"));
    // The verifier keeps every local's type at every instruction: a
    // function past its limit is refused at once, by name, instead of
    // exhausting the machine's memory (this one needed 24 GiB and more).
    let t = Instant::now();
    let (code, _, err, _) = run(&["check", wide.to_str().unwrap()], b"", limit);
    assert_ne!(code, 0);
    assert!(
        err.contains("`wide` is too large to verify: 200001 instructions × 100002 locals"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(30));
}

#[test]
fn many_definitions_one_after_another_are_read_in_linear_time() {
    // Each definition reloads the session's module; one at a time, 1000
    // took 3.7 s and 5000 would take about 90. Consecutive ones are defined
    // together, and each is still reported as defined.
    let limit = Duration::from_secs(60);
    let mut text = String::new();
    for k in 0..5000 {
        text.push_str(&format!(
            "func f{k}() -> i32 {{\n    i32.const {k}\n    ret\n}}\n"
        ));
    }
    text.push_str("kernel k(i: i64, out: i32[]) {\n    load out\n    load i\n    i64.to_i32\n    call f4999\n    i32.astore\n    ret\n}\nlet out = i32[2]\nrun k 2 out\nprint out\n");
    let (code, out, err, _) = run(&["repl", "--workers", "2"], text.as_bytes(), limit);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.matches("defined func f").count(), 5000);
    assert!(
        out.contains("out[0..2] of i32[2] = [4999, 4999]"),
        "{}",
        &out[out.len().saturating_sub(500)..]
    );
    let path = temp("many.ofs", text.as_bytes());
    let (code, out, err, _) = run(&["run", path.to_str().unwrap()], b"", limit);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("[4999, 4999]"),
        "{}",
        &out[out.len().saturating_sub(500)..]
    );
}

#[test]
fn bad_utf8_is_located_in_every_mode_and_a_piped_session_goes_on() {
    let limit = Duration::from_secs(60);
    let bad = temp("bad.obc", b"kernel k(i: i64) {\n    ret \xfe\n}\n");
    let p = bad.to_str().unwrap();
    let (code, _, err, _) = run(&["check", p], b"", limit);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!("{p}:2:9: not UTF-8 text (byte 0xfe)")),
        "{err}"
    );
    let (code, _, err, _) = run(&["run", p], b"", limit);
    assert_ne!(code, 0);
    assert!(err.contains(&format!("{p}:2:9: not UTF-8")), "{err}");
    let (code, out, _, _) = run(
        &["repl", "--workers", "2"],
        b"let a = i32[2]\nprint \xff a\nprint a\n",
        limit,
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("<stdin>:2:7: not UTF-8 text (byte 0xff); the line was skipped"),
        "{out}"
    );
    assert!(
        out.contains("a[0..2] of i32[2] = [0, 0]"),
        "the session went on: {out}"
    );
    let (_, out, _, _) = run(
        &["repl"],
        format!(":load {p}\nlet b = i32[1]\n").as_bytes(),
        limit,
    );
    assert!(out.contains(&format!("{p}:2:9: not UTF-8")), "{out}");
    assert!(out.contains("b: i32[1]"), "{out}");
}

#[test]
fn an_unclosed_brace_is_located_in_every_mode() {
    let limit = Duration::from_secs(60);
    let text = "let a = i32[2]\nkernel k(i: i64) {\n    ret\n\n; a comment {\n";
    let f = temp("open.obc", b"kernel k(i: i64) {\n    ret\n");
    let (code, _, err, _) = run(&["check", f.to_str().unwrap()], b"", limit);
    assert_ne!(code, 0);
    assert!(err.contains("open.obc:"), "{err}");
    // Source: the brace is named, not "cannot parse string into token
    // stream"; so are a bracket that closes the wrong one and a stray one.
    for (name, src, want) in [
        (
            "open.ofk",
            "#[kernel]\nfn k(i: i64, o: &mut [i64]) {\n    if i > 0 {\n        o[i] = 1;\n}\n",
            "open.ofk:2:29",
        ),
        (
            "cross.ofk",
            "fn f(a: &[i64]) -> i64 {\n    a[(0]\n}\n",
            "cross.ofk:2:9",
        ),
        ("stray.ofk", "fn f() {\n}\n}\n", "stray.ofk:3:1"),
    ] {
        let f = temp(name, src.as_bytes());
        let (code, _, err, _) = run(&["check", f.to_str().unwrap()], b"", limit);
        assert_ne!(code, 0);
        assert!(
            err.contains(want) && !err.contains("token stream"),
            "{name}: {err}"
        );
    }
    let s = temp("open.ofs", text.as_bytes());
    let sp = s.to_str().unwrap();
    let (code, _, err, _) = run(&["run", sp], b"", limit);
    assert_ne!(code, 0);
    assert!(
        err.contains(&format!(
            "{sp}:2:18: the file ended inside a definition: this `{{` is never closed"
        )),
        "{err}"
    );
    let (code, out, _, _) = run(&["repl"], text.as_bytes(), limit);
    assert_eq!(code, 0);
    assert!(
        out.contains("<stdin>:2:18: the input ended inside a definition: this `{` is never closed"),
        "{out}"
    );
}
