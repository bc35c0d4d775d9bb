//! The smallest honest use of offload: saxpy over a million elements,
//! written as a Rust closure.
//!
//! `cargo run --release -p offload-quickstart` (a package of its own, so
//! that it builds offload and none of offload's test dependencies)

use offload::{Runtime, kernel, par_offload};

fn main() -> Result<(), offload::OffloadError> {
    let rt = Runtime::new()?;

    let n = 1_000_000;
    let x = rt.array(&vec![1.0f32; n])?;
    let y = rt.array(&(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
    let a = 2.0f32;

    // y[i] = a * x[i] + y[i], for every i, on every core (or the GPU).
    let report = par_offload(0..n as i64, kernel!(move |i| y[i] = a * x[i] + y[i]))?;

    let y = rt.read(&y)?;
    assert_eq!(y[10], 12.0);
    println!("{report}");
    println!("y[0..4] = {:?}", &y[..4]);

    // The same kernel from a source file (`examples/kernels/saxpy.ofk`),
    // or as bytecode (`saxpy.obc`): `rt.load_file` takes either.
    let module = rt.load_file("examples/kernels/saxpy.ofk")?;
    let z = rt.array(&vec![0.0f32; n])?;
    let ones = rt.array(&vec![1.0f32; n])?;
    par_offload(
        0..n as i64,
        module.closure("saxpy", [3.0f32.into(), (&ones).into(), (&z).into()])?,
    )?;
    assert_eq!(rt.read(&z)?[7], 3.0);
    Ok(())
}
