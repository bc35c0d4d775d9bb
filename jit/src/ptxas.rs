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

/// Assemble `text` for `arch` (`sm_70`, ...). `Err` carries ptxas's
/// messages (with the offending lines, numbered).
pub fn assemble(ptxas: &Path, text: &str, arch: &str) -> Result<(), String> {
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
        .arg(format!("-arch={arch}"))
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .output();
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
    let res = res.map_err(|e| format!("running {}: {e}", ptxas.display()))?;
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
