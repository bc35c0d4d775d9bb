//! The environment's knobs of the long GPU suites (`tests/gpu.rs`,
//! `tests/gpu_split.rs`): how many cases, from which seed.

/// A number from the environment, or `default` (the knobs that make a run
/// longer or reproduce one).
pub fn knob(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
