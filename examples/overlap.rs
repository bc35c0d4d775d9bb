//! Work on the host while a launch runs: `Runtime::launch` returns at once
//! with a handle, the host does its own work, and `wait` gives the launch's
//! report.
//!
//! `cargo run --release --example overlap` (the CPU device), or
//! `cargo run --release --example overlap -- cuda` (the GPU: there the
//! host's work and the kernel use different processors, and the wall time
//! of both together is close to the longer of the two; on the CPU device
//! they share the cores, and it is close to their sum).

use offload::{Device, Runtime, kernel};
use std::time::{Duration, Instant};

/// The host's share: a checksum over a buffer of its own, in plain Rust.
fn host_work(data: &[u64]) -> u64 {
    data.iter().fold(0u64, |h, &x| {
        h.rotate_left(5) ^ x.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => Device::Cuda,
        Some("cpu") | None => Device::Cpu,
        Some(other) => return Err(format!("unknown device `{other}` (cpu or cuda)").into()),
    };
    let rt = Runtime::builder().device(device).build()?;
    let n = 1usize << 22;
    let x = rt.array(&vec![1.5f32; n])?;
    let y = rt.new_array::<f32>(n)?;
    // A kernel with some arithmetic per element.
    let k = kernel!(move |i| {
        let mut v = x[i];
        let mut s = 0.0f32;
        for _ in 0..32 {
            v = v * 0.999 + 0.001;
            s = s + v;
        }
        y[i] = s;
    })?;
    let data: Vec<u64> = (0..(n as u64) * 4).collect();

    // Each alone, after a warm-up of each (the first launch compiles the
    // kernel).
    rt.par_offload(0..n as i64, &k)?;
    host_work(&data);
    let t = Instant::now();
    rt.par_offload(0..n as i64, &k)?;
    let launch_alone = t.elapsed();
    let t = Instant::now();
    let sum = host_work(&data);
    let host_alone = t.elapsed();

    // Both: the launch in flight while the host works.
    let t = Instant::now();
    let handle = rt.launch(0..n as i64, &k)?;
    let sum_meanwhile = host_work(&data);
    let report = handle.wait()?;
    let both = t.elapsed();
    assert_eq!(sum, sum_meanwhile);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("device: {}", report.device.name());
    println!("launch alone:     {:8.2} ms", ms(launch_alone));
    println!("host work alone:  {:8.2} ms", ms(host_alone));
    println!(
        "both, overlapped: {:8.2} ms (the sum of the two: {:.2} ms, the longer: {:.2} ms)",
        ms(both),
        ms(launch_alone + host_alone),
        ms(launch_alone.max(host_alone))
    );
    let y = rt.read(&y)?;
    println!("y[0] = {}", y[0]);
    Ok(())
}
