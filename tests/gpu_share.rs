//! Launches in flight on one GPU (`Runtime::launch`; the CUDA device's
//! `share.rs` and `lane.rs`): launches whose arrays of numbers lie in
//! different heap chunks run at once, each on a stream of its own, and
//! give what they give one after the other — under injected safepoints
//! and deopts and a collection while they run; launches whose arrays share
//! a chunk, or that allocate, take turns. Ignored in the ordinary run (no
//! GPU); `scripts/gpu-tests --virtual` runs them on the virtual GPU.

use offload::{Array, Device, LaunchReport, Runtime, RuntimeBuilder, par_offload};
use offload_heap::resident::CHUNK_BYTES;
use offload_jit::Injection;
#[path = "common/spin.rs"]
mod spin;
use spin::{SRC, apart, loop_site, want};

const NEEDS_GPU: &str = "needs a GPU, real or virtual: run scripts/gpu-tests";

/// One GPU (the first), however many the machine has: these launches
/// share one device's image (on several, launches in flight would go to
/// different GPUs: `tests/gpu_devices.rs`).
fn gpu() -> RuntimeBuilder {
    Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .gpus([0])
}

fn build(b: RuntimeBuilder) -> Runtime {
    b.build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"))
}

/// One launch that writes `a`: the heap's image on the GPU holds every
/// array made so far.
fn warm(rt: &Runtime, a: &Array<i64>) {
    let m = rt.load_source("share.ofk", SRC).unwrap();
    let c = m
        .closure("fill", [a.into(), 1.into(), 1i64.into()])
        .unwrap();
    par_offload(0..a.len() as i64, &c).unwrap();
}

/// Two `fill` launches in flight over `0..n` of `a` and `b`; a collection
/// while they run when `collect`. Their reports.
fn two_in_flight(
    rt: &Runtime,
    (a, b): (&Array<i64>, &Array<i64>),
    n: usize,
    iters: (i32, i32),
    collect: bool,
) -> (LaunchReport, LaunchReport) {
    let m = rt.load_source("share.ofk", SRC).unwrap();
    let fa = m
        .closure("fill", [a.into(), iters.0.into(), 3i64.into()])
        .unwrap();
    let fb = m
        .closure("fill", [b.into(), iters.1.into(), 5i64.into()])
        .unwrap();
    let ha = rt.launch(0..n as i64, &fa).unwrap();
    let hb = rt.launch(0..n as i64, &fb).unwrap();
    if collect {
        std::mem::forget(rt.new_array::<f64>(1 << 14).unwrap());
        rt.collect().unwrap();
    }
    let got = (ha.wait().unwrap(), hb.wait().unwrap());
    assert_eq!(rt.read(a).unwrap()[..n], want(n, iters.0.into(), 3));
    assert_eq!(rt.read(b).unwrap()[..n], want(n, iters.1.into(), 5));
    got
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn launches_whose_arrays_lie_in_different_chunks_share_the_gpu() {
    let rt = build(gpu());
    // Arrays of 1 MiB made back to back: each starts in a chunk of its
    // own (`offload_heap::alloc::COLOUR_GAP_BYTES`). The launches write
    // their first `n` elements.
    let len = 1 << 17;
    let (a, b) = (
        rt.new_array::<i64>(len).unwrap(),
        rt.new_array::<i64>(len).unwrap(),
    );
    let n = 4096;
    // The runtime's first launch sends the heap (its image on the GPU
    // grows to hold it, which takes the GPU alone).
    warm(&rt, &a);
    // Long enough that each is still running when the other starts.
    let (ra, rb) = two_in_flight(&rt, (&a, &b), n, (400, 400), false);
    assert_eq!((ra.completed, rb.completed), (n as u64, n as u64));
    assert!(
        ra.runs_beside + rb.runs_beside >= 1,
        "neither launch ran beside the other:\n{ra}\n{rb}"
    );
    // What the report says of it.
    let beside = if ra.runs_beside > 0 { &ra } else { &rb };
    assert!(beside.to_string().contains("beside"), "{beside}");
    // The host writes both arrays; each launch sends only the chunks of
    // its own array's elements it reaches (`fill` reaches only element
    // `i`: `offload_ir::own`), not the rest of its 1 MiB.
    rt.write(&a, 0, &vec![0; len]).unwrap();
    rt.write(&b, 0, &vec![0; len]).unwrap();
    let (ra, rb) = two_in_flight(&rt, (&a, &b), n, (200, 200), false);
    let own = (n * 8) as u64;
    for r in [&ra, &rb] {
        assert!(
            r.to_device_bytes >= own && r.to_device_bytes < own + 2 * CHUNK_BYTES as u64,
            "{} bytes sent for {own} bytes of elements\n{r}",
            r.to_device_bytes
        );
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn launches_that_share_a_chunk_or_allocate_take_turns() {
    let rt = build(gpu());
    // Two small arrays back to back: one chunk holds both.
    let n = 512;
    let (a, b) = (
        rt.new_array::<i64>(n).unwrap(),
        rt.new_array::<i64>(n).unwrap(),
    );
    warm(&rt, &a);
    let (ra, rb) = two_in_flight(&rt, (&a, &b), n, (400, 400), false);
    assert_eq!((ra.runs_beside, rb.runs_beside), (0, 0), "{ra}\n{rb}");
    // A kernel that allocates holds the GPU alone, whatever its arrays.
    let m = rt.load_source("share.ofk", SRC).unwrap();
    let (c, d) = (apart(&rt, 4096), apart(&rt, 4096));
    warm(&rt, &d);
    let fill = m
        .closure("fill", [(&c).into(), 400.into(), 3i64.into()])
        .unwrap();
    let grow = m.closure("grow", [(&d).into()]).unwrap();
    let h1 = rt.launch(0..4096, &fill).unwrap();
    let h2 = rt.launch(0..4096, &grow).unwrap();
    let (r1, r2) = (h1.wait().unwrap(), h2.wait().unwrap());
    assert_eq!((r1.runs_beside, r2.runs_beside), (0, 0), "{r1}\n{r2}");
    assert_eq!(rt.read(&c).unwrap(), want(4096, 400, 3));
    let grown: Vec<i64> = (0..4096).map(|i| i * 7 + 3).collect();
    assert_eq!(rt.read(&d).unwrap(), grown);
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn launches_sharing_the_gpu_are_exact_under_safepoints_deopts_and_a_collection() {
    let mut beside = 0;
    for (wait_in_place, inject) in [(true, false), (false, false), (true, true)] {
        let mut b = gpu()
            .gpu_wait_in_place(wait_in_place)
            .inject_safepoints(5, Some(11));
        if inject {
            // Deopts at a site of the loop's, workitems ≡ 3 (mod 7).
            b = b.inject(Injection {
                site_bci: loop_site(),
                modulus: 7,
                remainder: 3,
                reason: None,
            });
        }
        let rt = build(b);
        let n = 3000;
        let (a, bb) = (apart(&rt, n), apart(&rt, n));
        warm(&rt, &a);
        let (ra, rb) = two_in_flight(&rt, (&a, &bb), n, (150, 250), true);
        let what = format!("wait in place {wait_in_place}, deopts {inject}");
        assert_eq!((ra.completed, rb.completed), (n as u64, n as u64), "{what}");
        if inject {
            assert!(ra.replayed + ra.resumed > 0, "{what}: no deopt\n{ra}");
        }
        eprintln!("{what}:\n  {ra}\n  {rb}");
        beside += ra.runs_beside + rb.runs_beside;
        // The same, one after the other.
        let m = rt.load_source("share.ofk", SRC).unwrap();
        let c = apart(&rt, n);
        let f = m
            .closure("fill", [(&c).into(), 150.into(), 3i64.into()])
            .unwrap();
        par_offload(0..n as i64, &f).unwrap();
        assert_eq!(rt.read(&c).unwrap(), rt.read(&a).unwrap(), "{what}");
    }
    assert!(beside > 0, "no run shared the GPU");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_deadline_passes_while_a_launch_waits_for_the_gpu() {
    use offload::OffloadError;
    let rt = build(gpu());
    let m = rt.load_source("share.ofk", SRC).unwrap();
    let (a, b) = (apart(&rt, 4096), apart(&rt, 4096));
    warm(&rt, &b);
    // A long launch that allocates: it holds the GPU alone.
    let long = m.closure("grow_spin", [(&a).into(), 400.into()]).unwrap();
    let h = rt.launch(0..1024, &long).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let fill = m
        .closure("fill", [(&b).into(), 10.into(), 1i64.into()])
        .unwrap();
    let e = rt
        .par_offload_with_deadline(0..4096, &fill, std::time::Duration::from_millis(30))
        .unwrap_err();
    let OffloadError::Interrupted(r) = e else {
        panic!("not interrupted: {e}");
    };
    // It gave up waiting: the long launch had not finished, and nothing of
    // this one ran.
    assert!(!h.is_finished(), "the deadline waited for the other launch");
    assert_eq!((r.completed, r.launches), (0, 0), "{r}");
    assert!(r.deadline.is_some(), "{r}");
    let done = h.wait().unwrap();
    assert_eq!(done.completed, 1024);
    assert!(rt.read(&a).unwrap()[..1024].iter().all(|&v| v == 400));
}
