//! The smallest honest use of offload: saxpy over a million elements.
//!
//! `cargo run --release -p offload --example quickstart`

use offload::{Runtime, par_offload};

fn main() -> Result<(), offload::OffloadError> {
    let rt = Runtime::new()?;
    let module = rt.load_file("examples/kernels/saxpy.obc")?;

    let n = 1_000_000;
    let x = rt.array(&vec![1.0f32; n])?;
    let y = rt.array(&(0..n).map(|i| i as f32).collect::<Vec<_>>())?;

    // y[i] = 2 * x[i] + y[i], for every i, on every core.
    let saxpy = module.closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])?;
    let report = par_offload(0..n as i64, &saxpy)?;

    let y = rt.read(&y)?;
    assert_eq!(y[10], 12.0);
    println!("{report}");
    println!("y[0..4] = {:?}", &y[..4]);
    Ok(())
}
