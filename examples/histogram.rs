//! A histogram as a reduction of small arrays: the kernel of
//! `examples/kernels/histogram.ofk` adds one to a bin with `atomic_add`;
//! launched as it is, every workitem updates the array's 256 words, and
//! launched with the bins *summed into* (`Closure::summed`) each CPU slot
//! or GPU block adds to a zeroed copy of its own, the copies added into
//! the bins when the launch ends. Both are checked against a native Rust
//! histogram (rayon, a private histogram per task:
//! `offload_testkit::reference::histogram_per_task`), and timed.
//!
//! `cargo run --release --example histogram` (the CPU device), or
//! `cargo run --release --example histogram -- cuda` (the GPU).

use offload::{Device, Runtime, par_offload};
use offload_testkit::reference::histogram_per_task;
use std::time::{Duration, Instant};

const BINS: usize = 256;

/// The median of `reps` runs of `f` (after one run that warms it up).
fn median(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut t: Vec<Duration> = (0..reps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[reps / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let device = match std::env::args().nth(1).as_deref() {
        Some("cuda") => Device::Cuda,
        Some("cpu") | None => Device::Cpu,
        Some(other) => return Err(format!("unknown device `{other}` (cpu or cuda)").into()),
    };
    let rt = Runtime::builder().device(device).build()?;
    let n = 1usize << 24;
    // Pixels of a dark image: most values in a few low bins.
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<i32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as i32 % 1024).min((s >> 20) as i32 % 16)
        })
        .collect();
    let m = rt.load_source("histogram.ofk", include_str!("kernels/histogram.ofk"))?;
    let d = rt.array(&data)?;
    let bins = rt.new_array::<i32>(BINS)?;
    let atomics = m.closure("histogram", [(&d).into(), (&bins).into()])?;
    let summed = atomics.clone().summed("bins")?;
    let want = histogram_per_task(&data, BINS);

    let mut times = Vec::new();
    for (name, c) in [
        ("atomics on the bins", &atomics),
        ("bins summed into", &summed),
    ] {
        let t = median(5, || {
            rt.write(&bins, 0, &[0; BINS]).expect("zero the bins");
            par_offload(0..n as i64, c).expect("launch");
        });
        assert_eq!(rt.read(&bins)?, want, "{name}: counts differ from Rust's");
        times.push((name, t));
    }
    let t_native = median(5, || {
        std::hint::black_box(histogram_per_task(&data, BINS));
    });
    println!(
        "histogram of {n} values into {BINS} bins on {} (median of 5, the bins' reset included):",
        rt.device().name()
    );
    for (name, t) in &times {
        println!(
            "  {name:<20} {:>8.2} ms  ({:.2}x native)",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / t_native.as_secs_f64()
        );
    }
    println!(
        "  {:<20} {:>8.2} ms  (rayon, a histogram per task)",
        "native",
        t_native.as_secs_f64() * 1e3
    );
    Ok(())
}
