//! File tests, in the style of cranelift's: every `tests/files/*.obc`
//! starts with a header line naming its subtests and their options,
//!
//! ```text
//! ; test verify                          (or print, analyze)
//! ; test ptx lower-clif kernel=make
//! ; test run
//! ```
//!
//! then the module. The subtests:
//!
//! - `verify`: parse and verify; the output is `ok` or every diagnostic as
//!   `line:col: <phase> error: <detail>`.
//! - `print`: the canonical text of the module (which must parse back to an
//!   equal module).
//! - `analyze`: the shared analyses of every function with a body.
//! - `ptx`: the PTX of `kernel` (default options, version 1), assembled by
//!   `ptxas` for sm_70/80/90, parsed by the virtual GPU, free of what the
//!   protocol forbids (`trap`, `.approx`, `.ftz`).
//! - `lower-clif`: the Cranelift IR of `kernel`'s slot loop after
//!   Cranelift's optimizations (default options, version 1).
//! - `run`: the file's `; run: f(args) == result` and `; run: f(args)
//!   throws Kind` lines, each on the interpreter, on the CPU device and —
//!   with the virtual GPU (`scripts/gpu-tests`) — on the CUDA device
//!   (`run.rs`).
//!
//! The expected output of `verify`, `print` and `analyze` follows the
//! module after a line `; ----- expected -----`, one `; ` line per output
//! line; that of `ptx` and `lower-clif` is the file beside it,
//! `<stem>.ptx` and `<stem>.clif`. `OFFLOAD_BLESS=1` rewrites every
//! expectation from the actual output.

mod kinds;
mod run;
mod source;

use std::path::{Path, PathBuf};

/// One file test: its path, name, header and text.
#[derive(Debug)]
pub struct FileTest {
    pub path: PathBuf,
    pub name: String,
    /// The subtests the header names.
    pub kinds: Vec<String>,
    /// The header's `key=value` options.
    pub options: Vec<(String, String)>,
    pub text: String,
}

impl FileTest {
    /// The value of option `key`.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every file test, in name order.
pub fn files() -> Vec<FileTest> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/files");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("the tests/files directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "obc"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).expect("a readable file test");
            let header = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("; test "))
                .unwrap_or_else(|| panic!("{name}: the first line must be `; test <kind>..`"));
            let (mut kinds, mut options) = (Vec::new(), Vec::new());
            for word in header.split_whitespace() {
                match word.split_once('=') {
                    Some((k, v)) => options.push((k.to_string(), v.to_string())),
                    None => kinds.push(word.to_string()),
                }
            }
            FileTest {
                path,
                name,
                kinds,
                options,
                text,
            }
        })
        .collect()
}

/// Whether expectations are rewritten rather than checked.
pub fn bless() -> bool {
    std::env::var_os("OFFLOAD_BLESS").is_some()
}

/// Every subtest of every file but `run`'s CUDA leg.
#[test]
fn file_tests() {
    let files = files();
    let mut failures = Vec::new();
    let (mut invalid, mut runs) = (0, 0);
    let ptxas = offload::jit::ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    let mut cpu = run::CpuLeg::new();
    for t in &files {
        for kind in &t.kinds {
            let r = match kind.as_str() {
                "verify" | "print" | "analyze" => kinds::embedded(t, kind).map(|out| {
                    if kind == "verify" && out != "ok\n" {
                        invalid += 1;
                    }
                }),
                "ptx" => kinds::ptx(t, &ptxas),
                "lower-clif" => kinds::clif(t),
                "run" => run::interp(t).and_then(|n| {
                    runs += n;
                    cpu.run(t)
                }),
                other => Err(format!("unknown subtest `{other}`")),
            };
            if let Err(e) = r {
                failures.push(format!("{} ({kind}): {e}", t.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} file test(s) failed (OFFLOAD_BLESS=1 rewrites expectations):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(files.len() >= 100, "only {} file tests", files.len());
    assert!(
        invalid >= 40,
        "only {invalid} invalid programs pinned; keep at least 40"
    );
    assert!(runs > 500, "only {runs} run lines");
    assert!(
        cpu.lines() == runs,
        "the CPU device ran {} of {runs} run lines",
        cpu.lines()
    );
}

/// `run`'s lines on the CPU device and the interpreter device under GC
/// stress: every second TLAB refill finds eden exhausted and collects, a
/// collection runs before every batch of replays, and the heap is verified
/// after each; every line still gives its expected result.
#[test]
fn file_tests_run_under_gc_stress() {
    let stress = offload::GcPolicy {
        stress: 2,
        collect_before_replays: true,
        verify: true,
        ..offload::GcPolicy::default()
    };
    for device in [offload::Device::Cpu, offload::Device::Interpreter] {
        let mut leg = run::CpuLeg::on(device, stress);
        let mut failures = Vec::new();
        for t in files()
            .iter()
            .filter(|t| t.kinds.iter().any(|k| k == "run"))
        {
            if let Err(e) = leg.run(t) {
                failures.push(format!("{}: {e}", t.name));
            }
        }
        assert!(
            failures.is_empty(),
            "{device:?}:\n{}",
            failures.join("\n\n")
        );
        assert!(leg.lines() > 500, "only {} run lines", leg.lines());
    }
}

/// `run`'s CUDA leg: every run line on the CUDA device (the virtual GPU in
/// CI: `scripts/gpu-tests`).
#[test]
#[ignore = "needs a CUDA driver: scripts/gpu-tests"]
fn file_tests_run_on_the_cuda_device() {
    let mut gpu = run::CudaLeg::new();
    let mut failures = Vec::new();
    let mut runs = 0;
    for t in files()
        .iter()
        .filter(|t| t.kinds.iter().any(|k| k == "run"))
    {
        match gpu.run(t) {
            Ok(n) => runs += n,
            Err(e) => failures.push(format!("{}: {e}", t.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(runs > 500, "only {runs} run lines on the GPU");
}

/// Together the run files execute every opcode of the instruction set.
#[test]
fn run_files_cover_every_opcode() {
    let mut seen = std::collections::HashSet::new();
    for t in files()
        .iter()
        .filter(|t| t.kinds.iter().any(|k| k == "run"))
    {
        let m = offload::ir::parse_module(&t.name, &t.text).unwrap();
        for f in &m.funcs {
            seen.extend(f.body.iter().map(|i| i.opcode()));
        }
    }
    let missing: Vec<&str> = offload::ir::Opcode::ALL
        .iter()
        .filter(|op| !seen.contains(op))
        .map(|op| op.mnemonic())
        .collect();
    assert!(
        missing.is_empty(),
        "opcodes no run test executes: {missing:?}"
    );
}

/// The protocol's landmarks are where the golden PTX says they are.
#[test]
fn golden_ptx_shows_the_protocol() {
    kinds::ptx_landmarks();
}
