//! The REPL, through the real binary.
//!
//! - Golden transcripts: each `cli/tests/repl/NAME.ofs` goes into `offload
//!   repl` on a pipe (entries echoed after the prompt, errors shown and the
//!   session going on), and the output must equal `cli/tests/repl/NAME.out`,
//!   with times masked. `OFFLOAD_BLESS=1 cargo test --test repl` rewrites
//!   the expected files.
//! - Script mode: every example script runs cleanly; a script stops at its
//!   first error and names the file and line.
//! - An interactive session in a pseudo-terminal (see `interactive`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_offload")
}

/// The repository root: the REPL runs there, so `:load examples/...`
/// finds the examples.
fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Mask what changes from run to run: times (a number before a unit of
/// time).
fn normalize(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let mut l = String::new();
        let words: Vec<&str> = line.split(' ').collect();
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                l.push(' ');
            }
            let next_is_ms = words.get(i + 1).is_some_and(|n| {
                let unit = n.trim_end_matches([',', ')', ';', ':']);
                ["ms", "µs", "ns", "s"].contains(&unit)
            });
            if next_is_ms && w.parse::<f64>().is_ok() {
                l.push_str("<t>");
            } else {
                l.push_str(w);
            }
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}

fn transcript(name: &str) {
    let input = root().join(format!("cli/tests/repl/{name}.ofs"));
    let expected_path = root().join(format!("cli/tests/repl/{name}.out"));
    let out = Command::new(bin())
        .args(["repl", "--workers", "2", "--device", "cpu"])
        // The Cranelift IR `:clif` shows, the same on every host (256-bit
        // groups call a loop of their own where the CPU has AVX2).
        .env("OFFLOAD_SIMD_BITS", "128")
        .current_dir(root())
        .stdin(std::fs::File::open(&input).unwrap())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "offload repl failed on {name}");
    let got = normalize(&String::from_utf8(out.stdout).unwrap());
    if std::env::var_os("OFFLOAD_BLESS").is_some() {
        std::fs::write(&expected_path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&expected_path).unwrap_or_else(|_| {
        panic!(
            "no {}: run with OFFLOAD_BLESS=1 to create it",
            expected_path.display()
        )
    });
    if got != want {
        let diff: Vec<String> = got
            .lines()
            .zip(want.lines())
            .enumerate()
            .filter(|(_, (g, w))| g != w)
            .take(5)
            .map(|(i, (g, w))| format!("line {}:\n  got:  {g}\n  want: {w}", i + 1))
            .collect();
        panic!(
            "transcript {name} differs ({} vs {} lines; OFFLOAD_BLESS=1 rewrites it):\n{}",
            got.lines().count(),
            want.lines().count(),
            diff.join("\n")
        );
    }
}

#[test]
fn transcript_define() {
    transcript("define");
}

#[test]
fn transcript_run() {
    transcript("run");
}

#[test]
fn transcript_deopts() {
    transcript("deopts");
}

#[test]
fn transcript_inspect() {
    transcript("inspect");
}

#[test]
fn transcript_reduce() {
    transcript("reduce");
}

#[test]
fn transcript_errors() {
    transcript("errors");
}

/// The settings that shape the runtime take effect (policy, TLAB size,
/// refill faults), `:time` repeats a launch, and `:safepoint` stops a
/// running launch's workers and lets it finish. What these print depends
/// on timing, so they are checked here rather than pinned in a transcript.
#[test]
fn settings_time_and_safepoint() {
    let script = "\
:load examples/kernels/alloc.obc
:load examples/kernels/spin.obc
let out = f64[64]
let c = i32[4]
:set policy trap-limit
:set tlab 4096
:set fail-refills 1 2
:settings
run alloc_vectors 64 50 out
:time 3 run spin 4 100 c
:safepoint 0ms
run spin 4 30000000 c
print c
";
    let (_, text) = piped_repl(script.as_bytes());
    for want in [
        "policy      trap-limit",
        "tlab        4096 bytes",
        "fail-refills refill 1 fails, then one refill in every 2",
        "alloc_vectors over 0..64 on cpu v0 (2 workers): 64 of 64 completed",
        "trap-limit decided resize",
        "spin over 0..4 on cpu, 3 launches: min ",
        "safepoint requested after 0.000 ms: every worker stopped within ",
        "then the launch went on",
        "spin over 0..4 on cpu v0 (2 workers): 4 of 4 completed",
        "c[0..4] of i32[4] = [30000000, 30000000, 30000000, 30000000]",
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    // The refill faults made allocation deopts, replayed to completion.
    assert!(text.contains("(alloc "), "{text}");
    assert!(!text.contains("error:"), "{text}");
}

/// Every example script runs cleanly.
#[test]
fn example_scripts_run() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("examples")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "ofs") {
            let out = Command::new(bin())
                .args(["run", "--workers", "2"])
                .arg(&p)
                .current_dir(root())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{} failed:\n{}",
                p.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 1, "no example scripts found");
}

/// A script stops at its first error, naming the file and line.
#[test]
fn a_script_stops_at_its_first_error() {
    let dir = std::env::temp_dir().join(format!("offload-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("bad.ofs");
    std::fs::write(
        &script,
        "let a = i32[4]\nprint a\nprint b\nlet c = i32[2]\nprint c\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["run", "--workers", "2"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("a[0..4]"), "{stdout}");
    assert!(!stdout.contains("c[0..2]"), "ran past the error: {stdout}");
    assert!(
        stderr.contains(&format!("{}:3: no variable `b`", script.display())),
        "{stderr}"
    );
    // A definition error names the file, line and column.
    std::fs::write(
        &script,
        "let a = i32[4]\nkernel k(i: i64) {\n    i32.add\n    ret\n}\nprint a\n",
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["run"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("{}:3:5", script.display())),
        "{stderr}"
    );
    assert!(stderr.contains('^'), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Type `keys` and flush them to the terminal.
#[cfg(unix)]
fn type_(p: &mut rexpect::session::PtySession, keys: &str) {
    // Like a person: a line editor may drop input typed ahead of it.
    std::thread::sleep(std::time::Duration::from_millis(150));
    p.send(keys).unwrap();
    p.flush().unwrap();
}

/// An interactive session in a pseudo-terminal: a multi-line definition,
/// tab completion, history (within a session and across sessions),
/// Ctrl-C interrupting a long launch without ending the REPL, Ctrl-D.
#[cfg(unix)]
#[test]
fn interactive() {
    use rexpect::session::spawn_command;
    let dir = std::env::temp_dir().join(format!("offload-pty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history");
    let start = |history: &Path| {
        let mut cmd = Command::new(bin());
        cmd.args(["repl", "--workers", "2", "--history"])
            .arg(history)
            .current_dir(root())
            .env("TERM", "xterm");
        spawn_command(cmd, Some(60_000)).unwrap()
    };
    let mut p = start(&history);
    p.exp_string("offload> ").unwrap();
    // A multi-line definition, typed line by line.
    for l in [
        "kernel twice(i: i64, a: i32[]) {",
        "    load a",
        "    load i",
        "    i64.to_i32",
        "    i64.const 2",
        "    load i",
        "    i64.mul",
        "    i64.to_i32",
        "    i32.astore",
        "    ret",
        "}",
    ] {
        type_(&mut p, l);
        type_(&mut p, "\r");
    }
    p.exp_string("defined kernel twice").unwrap();
    // Completion of a command (`:lo` -> `:load`) and of a kernel name.
    type_(&mut p, ":lo\t");
    type_(&mut p, " examples/kernels/spin.obc\r");
    p.exp_string("defined kernel spin").unwrap();
    type_(&mut p, "let a = i32[8]\r");
    p.exp_string("a: i32[8]").unwrap();
    type_(&mut p, "run tw\t 8 a\r");
    p.exp_string("twice over 0..8").unwrap();
    type_(&mut p, "print a\r");
    p.exp_string("[0, 2, 4, 6, 8, 10, 12, 14]").unwrap();
    // History: Up recalls the last entry.
    type_(&mut p, "\x1b[A\r");
    p.exp_string("[0, 2, 4, 6, 8, 10, 12, 14]").unwrap();
    // Ctrl-C interrupts a launch that would take minutes; the REPL goes on.
    type_(&mut p, "let c = i32[200000]\r");
    p.exp_string("c: i32[200000]").unwrap();
    type_(&mut p, "run spin 200000 20000000 c\r");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    p.send_control('c').unwrap();
    p.exp_string("interrupted:").unwrap();
    p.exp_string("offload> ").unwrap();
    type_(&mut p, ":heap\r");
    p.exp_string("verified: ").unwrap();
    type_(&mut p, "print a[1]\r");
    p.exp_string("[2]").unwrap();
    // Ctrl-D leaves.
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    // The history persists: a new session recalls the last entry.
    let saved = std::fs::read_to_string(&history).unwrap();
    assert!(saved.contains("print a[1]"), "{saved}");
    let mut p = start(&history);
    p.exp_string("offload> ").unwrap();
    type_(&mut p, "\x1b[A\r");
    p.exp_string("no variable `a`").unwrap();
    type_(&mut p, ":quit\r");
    p.exp_eof().unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `offload run [args] SCRIPT` on `text`; the exit status, stdout and
/// stderr.
/// A REPL session with `input` piped in, run from the repository's root on
/// two workers: whether it exited successfully, and its standard output.
fn piped_repl(input: &[u8]) -> (bool, String) {
    let out = Command::new(bin())
        .args(["repl", "--workers", "2"])
        .current_dir(root())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(input)?;
            c.wait_with_output()
        })
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("the REPL writes UTF-8"),
    )
}

fn script_run(name: &str, text: &str, args: &[&str]) -> (bool, String, String) {
    let dir = std::env::temp_dir().join(format!("offload-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join(name);
    std::fs::write(&script, text).unwrap();
    let out = Command::new(bin())
        .args(["run", "--workers", "2"])
        .args(args)
        .arg(&script)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_script_fails_on_exceptions_it_did_not_expect() {
    let setup = ":load examples/kernels/throws.obc\nlet num = i32[8] range -20 10\nlet den = i32[8] fill 3\nlet q = i32[8]\n";
    let (ok, out, err) = script_run(
        "throws.ofs",
        &format!("{setup}run checked_div 8 num den q\nprint q\n"),
        &[],
    );
    assert!(!ok, "exit status 0 after a launch that threw:\n{out}");
    assert!(err.contains(":5: 2 workitem(s) threw"), "{err}");
    assert!(!out.contains("q[0..8]"), "ran past the error: {out}");
    let (ok, out, err) = script_run(
        "expected.ofs",
        &format!("{setup}:expect throws\nrun checked_div 8 num den q\nprint q\n"),
        &[],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("q[0..8]"), "{out}");
    let (ok, _, err) = script_run(
        "unmet.ofs",
        &format!("{setup}:expect throws\nrun checked_div 2..8 num den q\n"),
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("`:expect throws`: no workitem of this run threw"),
        "{err}"
    );
}

#[test]
fn a_deadline_stops_a_kernel_that_would_not_end() {
    let text = ":load examples/kernels/spin.obc\nlet out = i32[4096]\nrun spin 4096 2000000000 out\nprint out[0..2]\n";
    let t = std::time::Instant::now();
    let (ok, out, err) = script_run("forever.ofs", text, &["--deadline", "300ms"]);
    assert!(t.elapsed() < std::time::Duration::from_secs(60));
    assert!(!ok);
    assert!(
        err.contains(":3: stopped at the deadline (300 ms)"),
        "{err}"
    );
    assert!(err.contains("not started"), "{err}");
    assert!(!out.contains("out[0..2]"), "{out}");
    // The REPL setting: the session goes on after the deadline.
    let (_, out) = piped_repl(
        b":load examples/kernels/spin.obc\nlet out = i32[4096]\n:set deadline 200ms\nrun spin 4096 2000000000 out\n:set deadline off\nrun spin 4 10 out\n",
    );
    assert!(
        out.contains("error: stopped at the deadline (200 ms)"),
        "{out}"
    );
    assert!(out.contains("4 of 4 completed"), "{out}");
}

#[test]
fn a_script_fails_when_a_definition_waits_for_a_name_never_defined() {
    let (ok, out, err) = script_run(
        "waits.ofs",
        "kernel k(i: i64) {\n    call nope\n    ret\n}\n",
        &[],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("waiting for what it names: unknown function `nope`"),
        "{out}"
    );
    assert!(
        err.contains("never defined:\n  kernel k: unknown function `nope` at ")
            && err.contains("waits.ofs:2:10"),
        "{err}"
    );
    // A piped session says so at the end of its input.
    let (ok, out) = piped_repl(b"kernel k(i: i64) {\n    call nope\n    ret\n}\n");
    assert!(ok);
    assert!(
        out.contains("error: <stdin>: the input ended with definitions that name what was never defined:\n  kernel k: unknown function `nope` at <stdin>:2:10"),
        "{out}"
    );
    // Defined later in the script, it loads and runs.
    let (ok, out, err) = script_run(
        "later.ofs",
        "kernel k(i: i64) {\n    call f\n    ret\n}\nfunc f() {\n    ret\n}\nrun k 4\n",
        &[],
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("4 of 4 completed"), "{out}");
}

#[test]
fn a_bad_definition_among_good_ones_is_the_one_reported() {
    let defs = "func a() -> i32 {\n    i32.const 1\n    ret\n}\nfunc b() -> i32 {\n    f32.const 1.0\n    ret\n}\nfunc c() -> i32 {\n    i32.const 3\n    ret\n}\n";
    // Script mode stops at `b`, naming its line and column.
    let (ok, out, err) = script_run("bad_among.ofs", defs, &[]);
    assert!(!ok);
    assert!(out.contains("defined func a"), "{out}");
    assert!(!out.contains("defined func c"), "ran past the error: {out}");
    assert!(err.contains("bad_among.ofs:7:5"), "{err}");
    // A piped session reports `b` and defines the others.
    let (_, out) = piped_repl(defs.as_bytes());
    assert!(
        out.contains("defined func a") && out.contains("defined func c"),
        "{out}"
    );
    assert_eq!(
        out.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{out}"
    );
    assert!(out.contains("<stdin>:7:5"), "{out}");
}

#[test]
fn transcript_source() {
    transcript("source");
}
