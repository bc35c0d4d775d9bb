//! `Runtime::interrupt`: a launch stops at its next poll and returns
//! `OffloadError::Interrupted` with what completed; every workitem is counted
//! once (completed, stopped part-way, or never started), the heap stays
//! whole, and the next launch runs normally. On every device; the CUDA case
//! needs a GPU, real or virtual (`scripts/gpu-tests [--virtual]`).

use offload::{Device, OffloadError, Runtime, par_offload};
use std::time::Duration;

#[allow(dead_code)]
#[path = "common/stress.rs"]
mod stress;

const SPIN: &str = include_str!("../examples/kernels/spin.obc");

/// A runtime of two workers on `device` (strict on CUDA: no fallback), with
/// every launch's `deadline`, and the spin kernel loaded.
fn runtime(device: Device, deadline: Option<Duration>) -> (Runtime, offload::Module) {
    let rt = Runtime::builder()
        .device(device)
        .strict(device == Device::Cuda)
        .workers(2)
        .launch_deadline(deadline)
        // Fewer GPU slots than workitems (an H100 has 202,752): some
        // workitems have not started when the launch is stopped.
        .device_slots(1024)
        .build()
        .unwrap_or_else(|e| panic!("{device:?}: {e}"));
    let m = rt.load("spin.obc", SPIN).unwrap();
    (rt, m)
}

fn interrupted_launch(device: Device) {
    let (rt, m) = runtime(device, None);
    let n = 4096usize;
    // Each workitem spins long enough that the whole range would take many
    // seconds: the interrupt must cut it short.
    let iters = if device == Device::Interpreter {
        200_000
    } else {
        5_000_000
    };
    let out = rt.new_array::<i32>(n).unwrap();
    let k = m.closure("spin", [iters.into(), (&out).into()]).unwrap();
    let r = std::thread::scope(|s| {
        let h = s.spawn(|| par_offload(0..n as i64, &k));
        std::thread::sleep(Duration::from_millis(300));
        rt.interrupt();
        h.join().unwrap()
    });
    let rep = match r {
        Err(OffloadError::Interrupted(rep)) => rep,
        other => panic!("{device:?}: expected an interrupted launch, got {other:?}"),
    };
    assert!(rep.interrupted);
    assert_eq!(rep.threw, 0);
    assert!(rep.completed < n as u64, "{device:?}: {rep:?}");
    assert_eq!(
        rep.completed + rep.abandoned + rep.not_started(),
        n as u64,
        "{device:?}: every workitem is counted once"
    );
    stress::check_report(&rep, &format!("{device:?}, interrupted"));
    // Exactly the completed workitems stored their count (the store is their
    // last act, so an abandoned one stored nothing).
    let vals = rt.read(&out).unwrap();
    let stored = vals.iter().filter(|&&v| v == iters).count() as u64;
    assert_eq!(stored, rep.completed, "{device:?}");
    assert!(vals.iter().all(|&v| v == 0 || v == iters));
    // Interrupted rows of the deopt table are the abandoned workitems.
    let cut = rep
        .deopt_table
        .iter()
        .filter(|r| r.action == offload::DeoptAction::Interrupted)
        .count() as u64;
    assert_eq!(
        cut,
        rep.abandoned.min(offload::LaunchReport::TABLE_ROWS as u64)
    );
    rt.verify_heap(&[&m]).unwrap();
    let msg = OffloadError::Interrupted(rep).to_string();
    assert!(msg.contains("interrupted"), "{msg}");
    assert!(msg.contains("not started"), "{msg}");
    // The runtime goes on: a later launch is not affected.
    let small = m.closure("spin", [10.into(), (&out).into()]).unwrap();
    let rep = par_offload(0..64, &small).unwrap();
    assert_eq!(rep.completed, 64);
    assert!(!rep.interrupted);
}

#[test]
fn interrupting_a_cpu_launch() {
    interrupted_launch(Device::Cpu);
}

#[test]
fn interrupting_an_interpreter_launch() {
    interrupted_launch(Device::Interpreter);
}

/// The interrupt reaches a running GPU kernel through the mapped control
/// word.
#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn interrupting_a_cuda_launch() {
    interrupted_launch(Device::Cuda);
}

/// An interrupt with no launch running changes nothing for the next one.
#[test]
fn an_interrupt_between_launches_is_harmless() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let m = rt.load("spin.obc", SPIN).unwrap();
    let out = rt.new_array::<i32>(100).unwrap();
    rt.interrupt();
    let k = m.closure("spin", [3.into(), (&out).into()]).unwrap();
    let rep = par_offload(0..100, &k).unwrap();
    assert_eq!(rep.completed, 100);
    assert_eq!(rep.abandoned, 0);
}

/// A deadline interrupts a launch as `Runtime::interrupt` does, with the
/// same report, and says so; a launch that ends in time is not touched.
fn deadline(device: Device) {
    let (rt, m) = runtime(device, None);
    let n = 4096usize;
    let out = rt.new_array::<i32>(n).unwrap();
    let k = m
        .closure("spin", [2_000_000_000.into(), (&out).into()])
        .unwrap();
    let t = std::time::Instant::now();
    let r = rt.par_offload_with_deadline(0..n as i64, &k, Duration::from_millis(200));
    // The target is 100 ms; a loaded test machine gets ten times that.
    let late = t.elapsed().saturating_sub(Duration::from_millis(200));
    eprintln!("{device:?}: returned {late:?} after the deadline");
    assert!(late < Duration::from_secs(1), "{device:?}: {late:?} late");
    let rep = match r {
        Err(OffloadError::Interrupted(rep)) => rep,
        other => panic!("{device:?}: expected a launch stopped at its deadline, got {other:?}"),
    };
    assert_eq!(rep.deadline, Some(Duration::from_millis(200)));
    assert!(rep.not_started() > 0, "{rep}");
    stress::check_report(&rep, &format!("{device:?}, deadline"));
    let msg = OffloadError::Interrupted(rep).to_string();
    assert!(msg.contains("stopped at its deadline (200 ms)"), "{msg}");
    // In time: untouched, and the runtime-wide setting works the same.
    let small = m.closure("spin", [10.into(), (&out).into()]).unwrap();
    let rep = rt
        .par_offload_with_deadline(0..64, &small, Duration::from_secs(60))
        .unwrap();
    assert_eq!((rep.completed, rep.deadline), (64, None));
    let (rt, m) = runtime(device, Some(Duration::from_millis(100)));
    let out = rt.new_array::<i32>(n).unwrap();
    let k = m
        .closure("spin", [2_000_000_000.into(), (&out).into()])
        .unwrap();
    assert!(matches!(
        par_offload(0..n as i64, &k),
        Err(OffloadError::Interrupted(r)) if r.deadline.is_some()
    ));
}

#[test]
fn a_deadline_stops_a_cpu_launch() {
    deadline(Device::Cpu);
}

#[test]
fn a_deadline_stops_an_interpreter_launch() {
    deadline(Device::Interpreter);
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_deadline_stops_a_cuda_launch() {
    deadline(Device::Cuda);
}

/// A deadline stops its own launch only: another launch running on the
/// same runtime at the same time passes the safepoint and completes.
#[test]
fn a_deadline_stops_only_its_own_launch() {
    for device in [Device::Cpu, Device::Interpreter] {
        let (rt, m) = runtime(device, None);
        let out = rt.new_array::<i32>(4096).unwrap();
        let forever = m
            .closure("spin", [2_000_000_000.into(), (&out).into()])
            .unwrap();
        let other_out = rt.new_array::<i32>(256).unwrap();
        let iters = if device == Device::Interpreter {
            20_000
        } else {
            10_000_000
        };
        let other = m
            .closure("spin", [iters.into(), (&other_out).into()])
            .unwrap();
        let (stopped, done) = std::thread::scope(|s| {
            let a = s.spawn(|| {
                rt.par_offload_with_deadline(0..4096, &forever, Duration::from_millis(150))
            });
            let b = s.spawn(|| par_offload(0..256, &other));
            (a.join().unwrap(), b.join().unwrap())
        });
        assert!(
            matches!(&stopped, Err(OffloadError::Interrupted(r)) if r.deadline.is_some()),
            "{device:?}: {stopped:?}"
        );
        let done = done.unwrap_or_else(|e| panic!("{device:?}: the other launch was stopped: {e}"));
        assert_eq!(done.completed, 256, "{device:?}: {done}");
        assert!(rt.read(&other_out).unwrap().iter().all(|&v| v == iters));
        // Later launches run normally.
        let small = m.closure("spin", [10.into(), (&out).into()]).unwrap();
        assert_eq!(par_offload(0..64, &small).unwrap().completed, 64);
    }
}

/// A deadline stops a launch over the largest range there is: the
/// interpreter (which such a range runs on, on every device) stops
/// claiming work at the interrupt instead of visiting each of its 2^51
/// chunks, and counts the rest as never started.
#[test]
fn a_deadline_stops_a_launch_over_the_whole_i64_range() {
    whole_range(Device::Cpu);
    whole_range(Device::Interpreter);
}

#[test]
#[ignore = "needs a GPU, real or virtual: run scripts/gpu-tests"]
fn a_deadline_stops_a_cuda_launch_over_the_whole_i64_range() {
    whole_range(Device::Cuda);
}

fn whole_range(device: Device) {
    // Not strict: on the compiled devices such a range falls back to the
    // interpreter (their cursors cannot count to it), and the report says so.
    let rt = Runtime::builder()
        .device(device)
        .workers(2)
        .build()
        .unwrap_or_else(|e| panic!("{device:?}: {e}"));
    // The spin kernel, storing to element 0 (its index stays an i64).
    let m = rt
        .load(
            "idle.obc",
            &SPIN.replace("    load i\n    i64.to_i32\n", "    i32.const 0\n"),
        )
        .unwrap();
    let out = rt.new_array::<i32>(16).unwrap();
    let k = m
        .closure("spin", [2_000_000_000.into(), (&out).into()])
        .unwrap();
    let t = std::time::Instant::now();
    let deadline = Duration::from_millis(200);
    let r = rt.par_offload_with_deadline(0..i64::MAX, &k, deadline);
    let late = t.elapsed().saturating_sub(deadline);
    eprintln!("{device:?}, 0..i64::MAX: returned {late:?} after the deadline");
    let rep = match r {
        Err(OffloadError::Interrupted(rep)) => rep,
        other => panic!("{device:?}: expected a launch stopped at its deadline, got {other:?}"),
    };
    assert!(
        late < Duration::from_secs(2),
        "{device:?}: {late:?} late: {rep}"
    );
    assert_eq!(rep.completed, 0, "{rep}");
    assert_eq!(
        rep.abandoned + rep.not_started(),
        i64::MAX as u64,
        "{device:?}: {rep}"
    );
    assert_eq!(
        rep.fallback.is_some(),
        device != Device::Interpreter,
        "{rep}"
    );
}
