//! A runtime over several GPUs (issue 52, first part): each GPU has its own
//! context, streams, compiled kernels and image of the heap, coherent per
//! chunk with the host's and the other GPUs' (`offload_heap::resident`). A
//! launch on one GPU reads what a launch on another wrote; two GPUs take
//! turns on arrays of one chunk and run at once on different chunks;
//! collections, injected safepoints and deopts between and during them
//! keep every value exact. Ignored in the ordinary run (no GPU);
//! `scripts/gpu-tests --virtual` runs them on two virtual GPUs
//! (`OFFLOAD_VGPU_DEVICES=2`). On hardware with one GPU they say so and
//! check nothing more.

use offload::{Device, LaunchReport, Runtime, RuntimeBuilder};
use offload_heap::resident::CHUNK_BYTES;
use offload_jit::Injection;
#[path = "common/spin.rs"]
mod spin;
use spin::{SRC, apart, loop_site, want};

const NEEDS_GPUS: &str = "needs two GPUs, real or virtual: run scripts/gpu-tests";

fn gpus() -> RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

/// The runtime, or `None` on hardware with fewer than two GPUs (the
/// virtual GPU always has two here: `scripts/gpu-tests` asks for them).
fn build(b: RuntimeBuilder) -> Option<Runtime> {
    let rt = b.build().unwrap_or_else(|e| panic!("{NEEDS_GPUS}: {e}"));
    if rt.gpu_ordinals().len() >= 2 {
        return Some(rt);
    }
    assert!(
        !rt.gpu_is_virtual(),
        "the virtual GPU reports one device: run with OFFLOAD_VGPU_DEVICES=2 ({NEEDS_GPUS})"
    );
    eprintln!("one GPU here: the tests of several GPUs check nothing");
    None
}

/// The GPU a launch's report names (`GPU k: …`).
fn ran_on(r: &LaunchReport) -> usize {
    let g = r.gpu.as_deref().expect("a GPU launch");
    let k = g
        .strip_prefix("GPU ")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no GPU number in {g:?}"));
    k.parse().unwrap()
}

#[test]
#[ignore = "needs two GPUs, real or virtual: run scripts/gpu-tests"]
fn every_gpu_is_used_and_named() {
    let Some(rt) = build(gpus()) else { return };
    let ks = rt.gpu_ordinals();
    let text = rt.gpu().unwrap();
    for k in &ks {
        assert!(text.contains(&format!("GPU {k}: ")), "{text}");
    }
    // A GPU the runtime does not have is an error naming the ones it has.
    let e = rt.on_gpu(99).unwrap_err().to_string();
    assert!(e.contains("GPU 99") && e.contains("0, 1"), "{e}");
    // Only the GPUs asked for.
    let Some(one) = Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .gpus([1])
        .build()
        .ok()
    else {
        panic!("GPU 1 alone: {NEEDS_GPUS}");
    };
    assert_eq!(one.gpu_ordinals(), [1]);
    assert!(
        !one.gpu().unwrap().contains("GPU 1:"),
        "one GPU is not numbered"
    );
    let e = Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .gpus([7])
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("GPU 7 asked for"), "{e}");
}

/// Each GPU in turn reads what the other wrote, with a collection (which
/// moves the arrays) between, under injected safepoints.
#[test]
#[ignore = "needs two GPUs, real or virtual: run scripts/gpu-tests"]
fn a_launch_on_one_gpu_reads_what_another_wrote() {
    for wait_in_place in [true, false] {
        let Some(rt) = build(
            gpus()
                .gpu_wait_in_place(wait_in_place)
                .inject_safepoints(7, Some(3)),
        ) else {
            return;
        };
        let (g0, g1) = (rt.on_gpu(0).unwrap(), rt.on_gpu(1).unwrap());
        let m = rt.load_source("devices.ofk", SRC).unwrap();
        let n = 5000;
        let (x, y) = (
            rt.new_array::<i64>(n).unwrap(),
            rt.new_array::<i64>(n).unwrap(),
        );
        let fill = m
            .closure("fill", [(&x).into(), 20.into(), 3i64.into()])
            .unwrap();
        let r = g0.par_offload(0..n as i64, &fill).unwrap();
        assert_eq!((ran_on(&r), r.completed), (0, n as u64), "{r}");
        // Garbage, then a collection: x and y move on the host, and both
        // images are sent the heap again.
        for _ in 0..50 {
            drop(rt.new_array::<i64>(1000).unwrap());
        }
        rt.collect().unwrap();
        let double = m.closure("double", [(&x).into(), (&y).into()]).unwrap();
        let r = g1.par_offload(0..n as i64, &double).unwrap();
        assert_eq!((ran_on(&r), r.completed), (1, n as u64), "{r}");
        let doubled: Vec<i64> = want(n, 20, 3).iter().map(|v| v * 2).collect();
        assert_eq!(
            rt.read(&y).unwrap(),
            doubled,
            "wait in place {wait_in_place}"
        );
        // And back: GPU 0 reads what GPU 1 wrote.
        let back = m.closure("double", [(&y).into(), (&x).into()]).unwrap();
        let r = g0.par_offload(0..n as i64, &back).unwrap();
        assert_eq!(ran_on(&r), 0);
        let quad: Vec<i64> = doubled.iter().map(|v| v * 2).collect();
        assert_eq!(rt.read(&x).unwrap(), quad);
    }
}

/// Two launches in flight, one on each GPU: over two arrays of one heap
/// chunk they take turns (one set of holds for both GPUs: `share.rs`), and
/// a read of the first array while the second launch may run, then of
/// both, finds every element; over arrays of different chunks they run at
/// once. Under injected deopts too; and an allocating kernel on one GPU
/// after.
#[test]
#[ignore = "needs two GPUs, real or virtual: run scripts/gpu-tests"]
fn two_gpus_take_turns_on_one_chunk_and_share_different_ones() {
    let site = loop_site();
    let mut beside = 0;
    for inject in [false, true] {
        let mut b = gpus();
        if inject {
            b = b.inject(Injection {
                site_bci: site,
                modulus: 5,
                remainder: 2,
                reason: None,
            });
        }
        let Some(rt) = build(b) else { return };
        let (g0, g1) = (rt.on_gpu(0).unwrap(), rt.on_gpu(1).unwrap());
        let m = rt.load_source("devices.ofk", SRC).unwrap();
        let what = format!("deopts {inject}");
        // Two arrays of 2,000 i64s back to back (32 KB together: a chunk
        // holds both, or its end the first's tail and the second's head).
        let n = 2000;
        // And two more a chunk apart from each other and from those.
        let (a, bb) = (rt.new_array::<i64>(n).unwrap(), apart(&rt, n));
        assert!(2 * n * 8 < CHUNK_BYTES);
        let (c, d) = (apart(&rt, n), rt.new_array::<i64>(n).unwrap());
        let fill = |x: &offload::Array<i64>, k: i64| {
            m.closure("fill", [x.into(), 300.into(), k.into()]).unwrap()
        };
        // One GPU's kernels first: both images then hold every array.
        rt.par_offload(0..n as i64, &fill(&c, 1)).unwrap();
        g1.par_offload(0..n as i64, &fill(&d, 1)).unwrap();
        let (fa, fb) = (fill(&a, 5), fill(&bb, 9));
        let (ha, hb) = (
            g0.launch(0..n as i64, &fa).unwrap(),
            g1.launch(0..n as i64, &fb).unwrap(),
        );
        let ra = ha.wait().unwrap();
        // Read while the other GPU's launch may still run.
        assert_eq!(rt.read(&a).unwrap(), want(n, 300, 5), "{what}");
        let rb = hb.wait().unwrap();
        assert_eq!((ran_on(&ra), ran_on(&rb)), (0, 1));
        assert_eq!((ra.completed, rb.completed), (n as u64, n as u64));
        assert_eq!(
            (ra.runs_beside, rb.runs_beside),
            (0, 0),
            "one chunk: in turn\n{ra}\n{rb}"
        );
        if inject {
            assert!(ra.replayed + ra.resumed > 0, "no deopt\n{ra}");
        }
        assert_eq!(rt.read(&a).unwrap(), want(n, 300, 5), "{what}");
        assert_eq!(rt.read(&bb).unwrap(), want(n, 300, 9), "{what}");
        // Different chunks: at once.
        let (fc, fd) = (fill(&c, 3), fill(&d, 4));
        let (hc, hd) = (
            g0.launch(0..n as i64, &fc).unwrap(),
            g1.launch(0..n as i64, &fd).unwrap(),
        );
        let (rc, rd) = (hc.wait().unwrap(), hd.wait().unwrap());
        beside += rc.runs_beside + rd.runs_beside;
        assert_eq!(rt.read(&c).unwrap(), want(n, 300, 3), "{what}");
        assert_eq!(rt.read(&d).unwrap(), want(n, 300, 4), "{what}");
        if !inject {
            // A kernel that allocates (the injection's site is `fill`'s),
            // on GPU 1, over a: b keeps its values.
            let grow = m.closure("grow", [(&a).into()]).unwrap();
            g1.par_offload(0..n as i64, &grow).unwrap();
            let grown: Vec<i64> = (0..n as i64).map(|i| i * 7 + 3).collect();
            assert_eq!(rt.read(&a).unwrap(), grown, "{what}");
            assert_eq!(rt.read(&bb).unwrap(), want(n, 300, 9), "{what}");
        }
        // The default placement: one launch at a time runs on GPU 0.
        let r = rt.par_offload(0..n as i64, &fb).unwrap();
        assert_eq!(ran_on(&r), 0);
    }
    assert!(
        beside > 0,
        "launches over different chunks never ran at once"
    );
}

/// One heap keeps at most eight images coherent: a machine of more GPUs
/// gives a runtime its first eight, and naming more is an error. Checked
/// on nine virtual GPUs (`scripts/gpu-tests` runs it with
/// `OFFLOAD_VGPU_DEVICES=9`); elsewhere it says so and checks nothing.
#[test]
#[ignore = "needs nine virtual GPUs: run scripts/gpu-tests"]
fn a_runtime_takes_at_most_eight_gpus() {
    let nine = std::env::var("OFFLOAD_VGPU_DEVICES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|n| n >= 9);
    if !nine {
        eprintln!("fewer than nine GPUs here: the limit is not checked");
        return;
    }
    let rt = gpus()
        .build()
        .unwrap_or_else(|e| panic!("{NEEDS_GPUS}: {e}"));
    assert_eq!(rt.gpu_ordinals(), (0..8).collect::<Vec<_>>());
    let e = gpus().gpus(0..9).build().unwrap_err().to_string();
    assert!(e.contains("at most 8"), "{e}");
    // Eight named ones, the ninth among them, are fine.
    let rt = gpus().gpus(1..9).build().unwrap();
    assert_eq!(rt.gpu_ordinals(), (1..9).collect::<Vec<_>>());
}
