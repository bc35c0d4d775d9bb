//! The virtual device's settings, read once from the environment:
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `OFFLOAD_VGPU_DEVICES` | devices the driver reports (at most [`MAX_DEVICES`]), each with the settings below, its own memory, primary context and streams | 1 |
//! | `OFFLOAD_VGPU_SMS` | SM count | 2 |
//! | `OFFLOAD_VGPU_THREADS_PER_SM` | resident threads per SM | 512 |
//! | `OFFLOAD_VGPU_CC` | compute capability, `major.minor` | 7.0 |
//! | `OFFLOAD_VGPU_MEMORY_MB` | each device's memory in MiB | 4096 |
//! | `OFFLOAD_VGPU_MEMORY_POOLS` | `1`: stream-ordered allocation (`cuMemAllocAsync`/`cuMemFreeAsync`), as on sm_70+ GPUs with current drivers; `0`: only synchronous `cuMemAlloc`/`cuMemFree` | 1 |
//! | `OFFLOAD_VGPU_SEED` | scheduler seed, or `random` | 1 |
//! | `OFFLOAD_VGPU_QUANTUM` | most instructions a thread runs per turn | 32 |
//! | `OFFLOAD_VGPU_MAX_STEPS` | instructions before a launch times out | 2^36 |
//! | `OFFLOAD_VGPU_TRACE` | `1`: each launch's instruction count and speed on stderr; `2`: also the PTX lines whose memory instructions touched the most sectors | off |
//!
//! Each launch's seed is the base seed plus the launch's number, so a
//! program that launches the same sequence replays exactly.

use std::sync::OnceLock;

/// The most devices the driver reports.
pub(crate) const MAX_DEVICES: usize = 16;

/// The settings.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) devices: usize,
    pub(crate) sms: u32,
    pub(crate) threads_per_sm: u32,
    pub(crate) cc: (u32, u32),
    pub(crate) memory: u64,
    pub(crate) memory_pools: bool,
    pub(crate) seed: u64,
    pub(crate) quantum: u32,
    pub(crate) max_steps: u64,
    /// 0: quiet; 1: a line per launch; 2: and its memory profile.
    pub(crate) trace: u8,
}

fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

impl Config {
    pub(crate) fn get() -> &'static Config {
        static C: OnceLock<Config> = OnceLock::new();
        C.get_or_init(|| {
            let cc = std::env::var("OFFLOAD_VGPU_CC")
                .ok()
                .and_then(|v| {
                    let (a, b) = v.trim().split_once('.')?;
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .unwrap_or((7, 0));
            let seed = match std::env::var("OFFLOAD_VGPU_SEED")
                .ok()
                .as_deref()
                .map(str::trim)
            {
                Some("random") => std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(7, |d| d.as_nanos() as u64),
                Some(s) => s.parse().unwrap_or(1),
                None => 1,
            };
            Config {
                devices: var("OFFLOAD_VGPU_DEVICES", 1usize).clamp(1, MAX_DEVICES),
                sms: var("OFFLOAD_VGPU_SMS", 2u32).clamp(1, 1024),
                threads_per_sm: var("OFFLOAD_VGPU_THREADS_PER_SM", 512u32).clamp(32, 4096),
                cc,
                memory: var("OFFLOAD_VGPU_MEMORY_MB", 4096u64).max(1) << 20,
                memory_pools: var("OFFLOAD_VGPU_MEMORY_POOLS", 1u32) != 0,
                seed,
                quantum: var("OFFLOAD_VGPU_QUANTUM", 32u32).max(1),
                max_steps: var("OFFLOAD_VGPU_MAX_STEPS", 1u64 << 36),
                trace: var("OFFLOAD_VGPU_TRACE", 0u8),
            }
        })
    }
}
