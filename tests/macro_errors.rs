//! Mistakes in `kernel!` and `kernels!` as rustc reports them: a file with
//! deliberate errors at known lines is compiled against the `offload` this
//! test links (rustc with `--emit=metadata`: type checking only, a second
//! or two), and each error must point at the user's file, line and column
//! with the real line shown. (`kernels!` errors were reported at
//! 2 × the invocation's line − 1 with an empty snippet; a misspelled
//! capture made rustc offer to replace the whole `kernel!(…)`.)

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `offload` library this test was linked with, and the folder of its
/// dependencies.
fn offload_rlib() -> (PathBuf, PathBuf) {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("target/PROFILE/deps").to_path_buf();
    let newest = std::fs::read_dir(&deps)
        .expect("the deps folder")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("liboffload-") && n.ends_with(".rlib"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("liboffload-*.rlib beside the test");
    (newest, deps)
}

/// rustc's messages for `src`, written as `file` (human format, no
/// colours), and whether it compiled.
fn rustc(file: &str, src: &str) -> (String, bool) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("macro_errors");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    std::fs::write(&path, src).unwrap();
    let (rlib, deps) = offload_rlib();
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .current_dir(&dir)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "lib",
            "--emit=metadata",
        ])
        .args(["--color", "never", "--crate-name", "errs", "-o"])
        .arg(dir.join(format!("{file}.rmeta")))
        .arg("--extern")
        .arg(format!("offload={}", rlib.display()))
        .arg(format!("-Ldependency={}", deps.display()))
        .arg(file)
        .output()
        .expect("rustc runs");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// The 1-based line of `src` holding `marker`, and the 1-based column of
/// `at` on that line.
fn position(src: &str, marker: &str, at: &str) -> (usize, usize) {
    let (i, line) = src
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains(marker))
        .expect("marker");
    (i + 1, line.find(at).expect("on the line") + 1)
}

/// rustc's diagnostic whose first line contains `message`: it must point
/// at `file:line:col` and show that line.
fn assert_points_at(out: &str, src: &str, file: &str, message: &str, (line, col): (usize, usize)) {
    let at = out
        .split("\n\n")
        .find(|d| d.contains(message))
        .unwrap_or_else(|| panic!("no error with `{message}`:\n{out}"));
    assert!(
        at.contains(&format!("--> {file}:{line}:{col}")),
        "`{message}` should point at {file}:{line}:{col}:\n{at}\n--- all:\n{out}"
    );
    let text = src.lines().nth(line - 1).unwrap().trim();
    assert!(
        at.contains(text),
        "`{message}` should show line {line}, `{text}`:\n{at}"
    );
}

#[test]
fn kernels_errors_point_at_the_line_and_column_in_the_rust_file() {
    let src = r#"
use offload::kernels;

pub fn module() -> &'static offload::source::SourceModule {
    kernels! {
        struct Cell {
            alive: bool,
        }

        #[kernel]
        fn step(i: i32, cells: &mut [Option<Cell>]) {
            let c = cells[i].unwrap();
            let n = c.neighbours; // MISSING FIELD
            cells[i] = None;
        }

        #[kernel]
        fn scale(i: i32, xs: &mut [f32]) {
            xs[i] = xs[i] * undefined_factor; // UNKNOWN NAME
        }
    }
}
"#;
    let (out, ok) = rustc("kernels_errs.rs", src);
    assert!(!ok, "the mistakes must not compile:\n{out}");
    assert_points_at(
        &out,
        src,
        "kernels_errs.rs",
        "neighbours",
        position(src, "MISSING FIELD", "neighbours"),
    );
    assert_points_at(
        &out,
        src,
        "kernels_errs.rs",
        "undefined_factor",
        position(src, "UNKNOWN NAME", "undefined_factor"),
    );
    assert!(
        !out.contains("mismatched types"),
        "the invocation itself is not an error:\n{out}"
    );
    // Moved down the file, the errors move with it.
    let moved = format!("\n\n\n\n\n\n\n{src}");
    let (out, _) = rustc("kernels_moved.rs", &moved);
    assert_points_at(
        &out,
        &moved,
        "kernels_moved.rs",
        "neighbours",
        position(&moved, "MISSING FIELD", "neighbours"),
    );
}

#[test]
fn a_misspelled_capture_is_reported_where_the_body_uses_it() {
    let src = r#"
use offload::{kernel, par_offload, Runtime};

pub fn run(rt: &Runtime) {
    let x = rt.array(&[1.0f32; 8]).unwrap();
    let y = rt.new_array::<f32>(8).unwrap();
    let a = 2.0f32;
    let _ = par_offload(0..8, kernel!(move |i| y[i] = a * xx[i])); // MISSPELLED
    let _ = &x;
}
"#;
    let (out, ok) = rustc("capture_errs.rs", src);
    assert!(!ok, "the mistake must not compile:\n{out}");
    assert_points_at(
        &out,
        src,
        "capture_errs.rs",
        "cannot find value `xx`",
        position(src, "MISSPELLED", "xx["),
    );
    assert!(
        !out.contains("par_offload(0..8, x)"),
        "rustc must not offer to replace the whole invocation:\n{out}"
    );
}

#[test]
fn correct_kernels_compile() {
    // The harness itself: the same file without the mistakes compiles.
    let src = r#"
use offload::{kernel, kernels, par_offload, Runtime};

pub fn run(rt: &Runtime) {
    let y = rt.new_array::<f32>(8).unwrap();
    let a = 2.0f32;
    let _ = par_offload(0..8, kernel!(move |i| y[i] = a * y[i]));
}

pub fn module() -> &'static offload::source::SourceModule {
    kernels! {
        #[kernel]
        fn scale(i: i32, xs: &mut [f32]) {
            xs[i] = xs[i] * 2.0;
        }
    }
}
"#;
    let (out, ok) = rustc("fine.rs", src);
    assert!(ok, "{out}");
}
