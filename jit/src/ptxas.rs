//! Running NVIDIA's `ptxas` on the PTX we emit: the check every test run
//! makes without a GPU (docs/DESIGN.md, "Testing").
//!
//! `ptxas` is found through `OFFLOAD_PTXAS` (a path), then the copy
//! `scripts/test-all` installs under `target/ptxas` (from PyPI's
//! `nvidia-cuda-nvcc-cu12`), then `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The architectures every PTX kernel is assembled for.
pub const ARCHES: [&str; 3] = ["sm_70", "sm_80", "sm_90"];

/// Where `ptxas` is, or why it is not.
pub fn find() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("OFFLOAD_PTXAS") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("OFFLOAD_PTXAS={} is not a file", p.display()))
        };
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let local = root.join("target/ptxas/nvidia/cuda_nvcc/bin/ptxas");
    if local.is_file() {
        return Ok(local);
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("ptxas");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(
        "ptxas not found: set OFFLOAD_PTXAS, put it on PATH, or run scripts/test-all \
         (which installs it from PyPI's nvidia-cuda-nvcc-cu12 into target/ptxas)"
            .into(),
    )
}

/// Runs `ptxas [flags] -arch=ARCH` on `text` (through a temporary file,
/// removed after, as is the cubin) and returns what it printed.
fn run(
    ptxas: &Path,
    text: &str,
    arch: &str,
    flags: &[&str],
) -> Result<std::process::Output, String> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    let stem = format!(
        "offload-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let src = dir.join(format!("{stem}.ptx"));
    let out = dir.join(format!("{stem}.cubin"));
    std::fs::write(&src, text).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let res = Command::new(ptxas)
        .args(flags)
        .arg(format!("-arch={arch}"))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
    res.map_err(|e| format!("running {}: {e}", ptxas.display()))
}

/// Assemble `text` for `arch` (`sm_70`, ...). `Err` carries ptxas's
/// messages (with the offending lines, numbered).
pub fn assemble(ptxas: &Path, text: &str, arch: &str) -> Result<(), String> {
    let res = run(ptxas, text, arch, &[])?;
    if res.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&res.stderr).into_owned();
    // Quote the lines ptxas complains about.
    let lines: Vec<&str> = text.lines().collect();
    let mut quoted = String::new();
    for l in msg.lines() {
        if let Some(n) = l
            .split(", line ")
            .nth(1)
            .and_then(|r| r.split(';').next())
            .and_then(|n| n.trim().parse::<usize>().ok())
            && let Some(src) = lines.get(n.wrapping_sub(1))
        {
            quoted.push_str(&format!("  {n:5} | {src}\n"));
        }
    }
    Err(format!(
        "ptxas -arch={arch} failed ({}):\n{msg}{quoted}",
        res.status
    ))
}

/// What `ptxas -v` says an entry function of a module needs on one
/// architecture: its registers per thread and the bytes it spills.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Registers per thread.
    pub registers: u32,
    /// Bytes of spill stores plus spill loads per thread.
    pub spill_bytes: u32,
}

/// Assembles `text` for `arch` with `-v` and returns each entry function's
/// [`Resources`], by name.
pub fn resources(
    ptxas: &Path,
    text: &str,
    arch: &str,
) -> Result<std::collections::BTreeMap<String, Resources>, String> {
    let res = run(ptxas, text, arch, &["-v"])?;
    let log = String::from_utf8_lossy(&res.stderr);
    if !res.status.success() {
        return Err(log.into_owned());
    }
    Ok(parse_resources(&log))
}

/// Reads `ptxas -v`'s report: "Compiling entry function 'NAME'", then
/// "N bytes spill stores, M bytes spill loads" and "Used R registers".
fn parse_resources(log: &str) -> std::collections::BTreeMap<String, Resources> {
    let mut out = std::collections::BTreeMap::new();
    let mut current: Option<String> = None;
    let number_before = |l: &str, what: &str| -> Option<u32> {
        let head = &l[..l.find(what)?];
        head.split_whitespace().last()?.parse().ok()
    };
    for l in log.lines() {
        if let Some(rest) = l.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_string);
            if let Some(name) = &current {
                out.insert(name.clone(), Resources::default());
            }
            continue;
        }
        let Some(r) = current.as_ref().and_then(|n| out.get_mut(n)) else {
            continue;
        };
        if let Some(n) = number_before(l, " registers") {
            r.registers = n;
        }
        if let (Some(s), Some(ld)) = (
            number_before(l, " bytes spill stores"),
            number_before(l, " bytes spill loads"),
        ) {
            r.spill_bytes = s + ld;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_registers_and_spills_per_entry() {
        let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 38 registers, used 0 barriers
ptxas info    : Compiling entry function 'b' for 'sm_90'
ptxas info    : Function properties for b
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 21 registers, used 1 barriers, 8 bytes smem
";
        let r = parse_resources(log);
        assert_eq!(
            r["a"],
            Resources {
                registers: 38,
                spill_bytes: 16
            }
        );
        assert_eq!(
            r["b"],
            Resources {
                registers: 21,
                spill_bytes: 0
            }
        );
    }
}
