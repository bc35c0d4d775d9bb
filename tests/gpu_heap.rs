//! The heap that stays on the GPU (`offload_heap::resident`, the CUDA
//! device's `resident.rs`): repeated launches move only what changed and
//! leave the heap's top where it was, host and device see each other's
//! writes, and replays and relaunches under injected deopts and safepoints
//! run every workitem exactly once. Ignored in the ordinary run (no GPU);
//! `scripts/gpu-tests --virtual` runs them on the virtual GPU, where byte
//! counts are exact.

use offload::{Device, LaunchReport, Runtime, RuntimeBuilder, par_offload};
use offload_heap::resident::CHUNK_BYTES;
use offload_jit::Injection;

const NEEDS_GPU: &str = "needs a GPU, real or virtual: run scripts/gpu-tests";

fn gpu() -> RuntimeBuilder {
    Runtime::builder().device(Device::Cuda).strict(true)
}

fn build(b: RuntimeBuilder) -> Runtime {
    b.build().unwrap_or_else(|e| panic!("{NEEDS_GPU}: {e}"))
}

fn moved(r: &LaunchReport) -> u64 {
    r.to_device_bytes + r.to_host_bytes
}

/// `out[i] += 1` twice per workitem, with a site between the two (the
/// second `i32.aload`, bci 15) where a deopt leaves the first increment
/// done on the device for the replay to read.
const INC2: &str = "kernel inc2(i: i64, out: i32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load out
    load j
    load out
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    load out
    load j
    load out
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}
";

/// 100 launches of `inc` over 0..1000 beside `pad` MiB of other data:
/// (bytes the first launch moved, bytes each later launch moved, the heap
/// bytes in use).
fn hundred_launches(pad_mib: usize) -> (u64, Vec<u64>, u64) {
    let rt = build(gpu());
    let m = rt
        .load("inc.obc", offload_testkit::kernels::INC_KERNEL)
        .unwrap();
    let pad = rt.new_array::<i64>(pad_mib << 17).unwrap();
    rt.write(&pad, 0, &[7; 1000]).unwrap();
    let out = rt.new_array::<i32>(1000).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    let first = par_offload(0..1000, &c).unwrap();
    assert_eq!(first.device, Device::Cuda, "{first}");
    let top = rt.heap().used();
    let mut later = Vec::new();
    for _ in 1..100 {
        let r = par_offload(0..1000, &c).unwrap();
        assert_eq!(rt.heap().used(), top, "the heap's top moved: {r}");
        later.push(moved(&r));
    }
    assert_eq!(rt.read(&out).unwrap(), vec![100; 1000]);
    assert_eq!(rt.read(&pad).unwrap()[..1000], [7; 1000]);
    (moved(&first), later, top)
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_hundred_launches_that_allocate_nothing_move_no_heap_and_leave_its_top() {
    let (first_s, later_s, top_s) = hundred_launches(1);
    let (first_l, later_l, top_l) = hundred_launches(16);
    // The first launch sends the heap (the image starts empty).
    assert!(first_s >= top_s && first_l >= top_l, "{first_s} {first_l}");
    // Later ones move the same bytes every time: captures, the launch
    // context, the save area and per-slot bookkeeping, and a dirty-map
    // byte per 64 KiB chunk of the heap — nothing of the heap itself.
    for later in [&later_s, &later_l] {
        assert!(later.iter().all(|&b| b == later[0]), "{later:?}");
    }
    let grew = (top_l - top_s).div_ceil(CHUNK_BYTES as u64);
    assert!(
        later_l[0] - later_s[0] <= grew,
        "15 MiB more heap cost {} more bytes per launch (dirty map: {grew})",
        later_l[0] - later_s[0]
    );
    assert!(
        later_l[0] <= 1024 + grew + top_s.div_ceil(CHUNK_BYTES as u64),
        "{} bytes per launch",
        later_l[0]
    );
    assert!(
        later_l[0] * 64 < top_l,
        "{} bytes per launch with {top_l} bytes of heap",
        later_l[0]
    );
    eprintln!(
        "per launch after the first: {} B (1 MiB pad), {} B (16 MiB pad); first: {first_s} B, {first_l} B",
        later_s[0], later_l[0]
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn host_writes_reach_the_next_launch_and_device_writes_the_next_read() {
    let rt = build(gpu());
    let m = rt
        .load("inc.obc", offload_testkit::kernels::INC_KERNEL)
        .unwrap();
    // Five chunks of ints.
    let n = 5 * CHUNK_BYTES / 4;
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    let mut want = vec![0i32; n];
    let mut rng = offload_testkit::reference::Rng::new(30);
    let launch = |want: &mut Vec<i32>| {
        // Over a part of the array only: the rest keeps what the host wrote.
        let r = par_offload(0..(n / 2) as i64, &c).unwrap();
        assert_eq!(r.device, Device::Cuda, "{r}");
        for w in &mut want[..n / 2] {
            *w += 1;
        }
        r
    };
    launch(&mut want);
    let quiet = moved(&launch(&mut want));
    for round in 0..6 {
        // A host write of one element among those the launch reaches: one
        // chunk goes up with the next launch, and it lands. One past them
        // (a chunk of ints further) stays on the host: the kernel reaches
        // only its workitems' own elements (`offload_ir::own`), and the
        // launch is over the first half.
        let inside = round % 2 == 0;
        let at = if inside {
            rng.below((n / 2) as u64) as usize
        } else {
            let from = n / 2 + CHUNK_BYTES / 4;
            from + rng.below((n - from) as u64) as usize
        };
        let v = round * 1000 + 17;
        rt.write(&out, at, &[v]).unwrap();
        want[at] = v;
        let r = launch(&mut want);
        let extra = moved(&r) - quiet;
        if inside {
            assert!(
                extra >= CHUNK_BYTES as u64 && extra <= 2 * CHUNK_BYTES as u64,
                "a one-element write moved {extra} more bytes: {r}"
            );
        } else {
            assert_eq!(
                extra, 0,
                "a write past the launch's elements moved bytes: {r}"
            );
        }
        // A host read of one element fetches its chunk, and sees the
        // device's writes.
        let before = rt.heap().residency().fetched_bytes;
        let mut one = [0i32];
        rt.read_into(&out, 3, &mut one).unwrap();
        assert_eq!(one[0], want[3]);
        let fetched = rt.heap().residency().fetched_bytes - before;
        assert!(fetched <= CHUNK_BYTES as u64, "{fetched} bytes for one int");
    }
    let got = rt.read(&out).unwrap();
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != want[i]).take(5).collect();
    assert!(wrong.is_empty(), "cells {wrong:?} differ");
}

/// Five launches of `inc2` (+2 per cell each) with deopts injected at
/// the second load for workitems ≡ 3 (mod 7), and host safepoints if
/// asked: every cell ends at exactly 10.
fn replays_across_launches(b: RuntimeBuilder) {
    let rt = build(b.inject(Injection {
        site_bci: 15,
        modulus: 7,
        remainder: 3,
        reason: None,
    }));
    let m = rt.load("inc2.obc", INC2).unwrap();
    let n = 3000;
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m.closure("inc2", [(&out).into()]).unwrap();
    let mut replayed = 0;
    for launch in 1..=5 {
        let r = par_offload(0..n as i64, &c).unwrap();
        assert_eq!(r.device, Device::Cuda, "{r}");
        replayed += r.replayed;
        // Between launches the host reads part of it, as a user would.
        let got = rt.read(&out).unwrap();
        let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != 2 * launch).take(5).collect();
        assert!(wrong.is_empty(), "launch {launch}: cells {wrong:?}\n{r}");
    }
    assert!(replayed >= 5 * (n as u64 / 7), "{replayed} replays");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn replays_read_device_writes_and_relaunches_send_replay_writes() {
    replays_across_launches(gpu());
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn the_same_under_injected_safepoints() {
    replays_across_launches(gpu().inject_safepoints(50, Some(7)));
}

/// A policy that moves the kernel between the GPU and the CPU device after
/// every launch.
struct Alternate;

impl offload::policy::Policy for Alternate {
    fn name(&self) -> &'static str {
        "alternate"
    }

    fn decide(
        &mut self,
        _: &offload::policy::LaunchOutcome,
        cx: &offload::policy::Context<'_>,
    ) -> offload::policy::Decided {
        let decision = if cx.device == Device::Cuda {
            offload::policy::Decision::StopOffloading { to: Device::Cpu }
        } else {
            offload::policy::Decision::RetryLater { after: 0 }
        };
        offload::policy::Decided {
            decision,
            why: "the test alternates devices".into(),
        }
    }
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn launches_alternating_between_the_gpu_and_the_cpu_see_each_others_writes() {
    // The CPU device's compiled code reads and writes the heap directly:
    // it brings back what the GPU wrote first, and the GPU's next launch
    // sends what it wrote.
    let rt = build(gpu().policy_with(|| Box::new(Alternate)));
    let m = rt
        .load("inc.obc", offload_testkit::kernels::INC_KERNEL)
        .unwrap();
    let n = 3 * CHUNK_BYTES / 4;
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    let mut devices = Vec::new();
    for launch in 1..=6 {
        let r = par_offload(0..n as i64, &c).unwrap();
        devices.push(r.device);
        if launch == 3 {
            rt.write(&out, 7, &[100]).unwrap();
        }
    }
    assert!(
        devices.contains(&Device::Cuda) && devices.contains(&Device::Cpu),
        "{devices:?}"
    );
    let got = rt.read(&out).unwrap();
    let mut want = vec![6; n];
    want[7] = 103;
    let wrong: Vec<(usize, i32)> = (0..n)
        .filter(|&i| got[i] != want[i])
        .take(5)
        .map(|i| (i, got[i]))
        .collect();
    assert!(
        wrong.is_empty(),
        "cells (index, value) {wrong:?}: {devices:?}"
    );
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn saxpy_launched_twenty_times_moves_its_data_once() {
    // `offload bench --device cuda` prints the same table at full size
    // (128 MiB); OFFLOAD_SAXPY_SHRINK divides it (64 here by default).
    let rt = build(gpu());
    let shrink = std::env::var("OFFLOAD_SAXPY_SHRINK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let t = offload_testkit::bytes::saxpy(&rt, shrink).unwrap();
    eprint!("{}", t.table());
    eprintln!("{}", t.json());
    assert!(t.first.0 >= t.data_bytes, "{t:?}");
    assert!(t.later.0 + t.later.1 < 4096, "{t:?}");
    // Reading y fetches y (half the data, in whole chunks), not x.
    assert!(
        t.read_back >= t.data_bytes / 2 && t.read_back < t.data_bytes / 2 + 2 * CHUNK_BYTES as u64,
        "{t:?}"
    );
}

/// Workitem `i` spins `iters` times, then stores `flag[0] + 1` in `out[i]`.
const FLAGGED: &str = "kernel flagged(i: i64, iters: i32, flag: i32[], out: i32[]) {
    local k: i32
    i32.const 0
    store k
  top:
    load k
    load iters
    i32.ge
    br_if done
    load k
    i32.const 1
    i32.add
    store k
    br top
  done:
    load out
    load i
    i64.to_i32
    load flag
    i32.const 0
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}
";

/// While `flagged` runs, a host thread raises safepoints whose operation
/// counts the workitems finished so far (reading what the kernel wrote) and
/// sets the flag at the first one that finds some (a write the kernel must
/// see). Returns the report.
fn operations_at_safepoints_share_the_heap(b: RuntimeBuilder) -> LaunchReport {
    // 256 slots run the 6,000 workitems in waves, so that they finish one
    // wave after another; on hardware each spins longer (an H100 ran the
    // virtual GPU's 300 spins in 1 ms, between two safepoints).
    let rt = build(b.device_slots(256));
    let m = rt.load("flagged.obc", FLAGGED).unwrap();
    let n = 6000;
    let iters: i32 = if rt.gpu_is_virtual() { 300 } else { 20_000 };
    let flag = rt.new_array::<i32>(1).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m
        .closure("flagged", [iters.into(), (&flag).into(), (&out).into()])
        .unwrap();
    let out_at = out.as_ref().byte_offset() + 8;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (rep, seen) = std::thread::scope(|s| {
        let raiser = s.spawn(|| {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(std::time::Duration::from_millis(2));
                let (done, _) = rt.safepoint(|heap| {
                    let done = (0..n)
                        .filter(|i| heap.load32(out_at + 4 * i).unwrap() != 0)
                        .count();
                    if done > 0 && done < n {
                        rt.write(&flag, 0, &[1]).unwrap();
                    }
                    done
                });
                seen.push(done);
            }
            seen
        });
        let rep = par_offload(0..n as i64, &c).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Release);
        (rep, raiser.join().unwrap())
    });
    assert_eq!(rep.device, Device::Cuda, "{rep}");
    let got = rt.read(&out).unwrap();
    assert!(got.iter().all(|&x| x == 1 || x == 2), "{rep}");
    // An operation saw part of the launch done, and set the flag: the
    // workitems that finished after it saw the flag.
    assert!(
        seen.iter().any(|&d| d > 0 && d < n),
        "no safepoint fell inside the launch: {seen:?}\n{rep}"
    );
    assert!(
        got.contains(&2),
        "no workitem saw the operation's write\n{rep}"
    );
    rep
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn operations_at_waiting_safepoints_read_and_write_the_resident_heap() {
    let rep = operations_at_safepoints_share_the_heap(gpu());
    assert!(rep.waits > 0, "{rep}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn operations_at_stopping_safepoints_read_and_write_the_resident_heap() {
    let rep = operations_at_safepoints_share_the_heap(gpu().gpu_wait_in_place(false));
    assert_eq!(rep.waits, 0, "{rep}");
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn waiting_in_place_against_leaving_the_grid() {
    // `offload bench --device cuda` prints the same table.
    let rt = build(gpu());
    let rows = offload_testkit::waits::run(&rt, 1).unwrap();
    eprint!("{}", offload_testkit::waits::table(&rows));
    for r in &rows {
        eprintln!("{}", r.json());
        if r.report.safepoints == 0 {
            continue;
        }
        if r.slots == "leave" {
            assert!(r.report.launches > 1 && r.report.waits == 0, "{}", r.report);
        } else {
            assert!(r.report.waits > 0 && r.report.launches == 1, "{}", r.report);
        }
    }
    assert!(
        rows.iter().any(|r| r.report.waits > 0),
        "no safepoint fell inside a launch"
    );
}
