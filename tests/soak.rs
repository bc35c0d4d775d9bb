//! Soaks: runtimes created, used with `kernel!` and `kernels!`, and dropped,
//! and modules loaded, launched and dropped, keep the process's resident
//! memory flat (within 50 MB of where it settles after the first rounds).
//! Each round that leaked kept ~10 MB (a runtime) or ~42 KB (a module)
//! before.
//!
//! They run optimized (`scripts/test-all` runs `cargo test --release
//! --test soak`): a debug build's compiler takes ~0.15 s a kernel, so there
//! they are ignored. `OFFLOAD_SOAK_RUNTIMES` and `OFFLOAD_SOAK_MODULES` set
//! other counts than 10,000 and 20,000.

use offload::{Device, Runtime, kernel, par_offload};

/// Resident memory of this process, in bytes (`VmRSS`).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Rounds of a soak: `var` if set, else `full` in a release build and a
/// hundredth of it in a debug build.
fn rounds(var: &str, full: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if cfg!(debug_assertions) {
            full / 10
        } else {
            full
        })
}

/// Runs `round` `n` times; RSS after the first tenth is the baseline, and
/// every later reading stays within `slack` of it.
fn flat(what: &str, n: usize, slack: u64, mut round: impl FnMut(usize)) {
    let warm = n / 10;
    let mut base = 0;
    let mut peak = 0;
    for i in 0..n {
        round(i);
        if i + 1 == warm {
            base = rss();
        }
        if i >= warm && i % 100 == 0 {
            peak = peak.max(rss());
        }
    }
    peak = peak.max(rss());
    eprintln!(
        "{what}: {n} rounds, RSS {} MB after {warm}, peak {} MB",
        base >> 20,
        peak >> 20
    );
    assert!(
        peak <= base + slack,
        "{what}: RSS grew from {} MB to {} MB over {n} rounds",
        base >> 20,
        peak >> 20
    );
}

#[test]
#[cfg_attr(debug_assertions, ignore = "a soak: runs optimized (scripts/test-all)")]
fn runtimes_used_with_kernel_and_dropped_keep_memory_flat() {
    let n = rounds("OFFLOAD_SOAK_RUNTIMES", 10_000);
    flat("runtimes", n, 50 << 20, |i| {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .workers(1)
            .initial_heap(1 << 20)
            .build()
            .unwrap();
        let v = rt.array(&[1i32, 2, 3, 4]).unwrap();
        par_offload(0..4, kernel!(move |i| v[i] += 1)).unwrap();
        assert_eq!(rt.read(&v).unwrap(), [2, 3, 4, 5], "round {i}");
    });
}

#[test]
#[cfg_attr(debug_assertions, ignore = "a soak: runs optimized (scripts/test-all)")]
fn modules_launched_and_dropped_keep_memory_flat() {
    let n = rounds("OFFLOAD_SOAK_MODULES", 20_000);
    // One tier: each module is compiled once (the leak was the compiled
    // code's and the kernel states', whatever the tiers).
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(1)
        .tiered(false)
        .build()
        .unwrap();
    let v = rt.array(&[0i64; 4]).unwrap();
    flat("modules", n, 50 << 20, |k| {
        let m = rt
            .load_source(
                "add.ofk",
                &format!("#[kernel]\nfn add(i: i32, v: &mut [i64]) {{ v[i] = v[i] + {k}; }}\n"),
            )
            .unwrap();
        par_offload(0..4, m.closure("add", [(&v).into()]).unwrap()).unwrap();
    });
    let n = n as i64;
    assert_eq!(rt.read(&v).unwrap(), [n * (n - 1) / 2; 4]);
}
