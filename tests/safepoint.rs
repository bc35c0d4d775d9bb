//! Safepoints from outside while a launch runs on the interpreter device:
//! every worker stops at its next poll, the operation sees a still heap, and
//! the launch then finishes with exact results.

use offload::{Device, Runtime, par_offload};
use std::time::Duration;

/// The same loop, two calls deep (inlined by the CPU JIT: its polls deopt
/// with three frames).
const SPIN_CALL: &str = "
func inner(counts: i64[], j: i32, iters: i32) {
    local k: i32
    i32.const 0
    store k
  loop:
    load k
    load iters
    i32.ge
    br_if done
    load counts
    load j
    i64.const 1
    i64.array_atomic_add
    pop
    inc k 1
    br loop
  done:
    ret
}

func middle(counts: i64[], j: i32, iters: i32) {
    load counts
    load j
    load iters
    call inner
    ret
}

kernel spin(i: i64, iters: i32, counts: i64[]) {
    load counts
    load i
    i64.to_i32
    load iters
    call middle
    ret
}
";

/// The loop with a plain load and store of `counts[j]`, which the optimized
/// tier checks once where the loop is entered and unrolls, polling on every
/// fourth back-edge.
const SPIN_PLAIN: &str = "
kernel spin(i: i64, iters: i32, counts: i64[]) {
    local k: i32
    local j: i32
    load i
    i64.to_i32
    store j
    i32.const 0
    store k
  loop:
    load k
    load iters
    i32.ge
    br_if done
    load counts
    load j
    load counts
    load j
    i64.aload
    i64.const 1
    i64.add
    i64.astore
    inc k 1
    br loop
  done:
    ret
}
";

fn safepoints_on(device: Device, n: usize, iters: i32) {
    safepoints_in(
        offload_testkit::kernels::SPIN_KERNEL,
        device,
        n,
        iters,
        true,
    );
}

/// Safepoints while `src`'s `spin` runs; `tiered: false` compiles the
/// optimized tier before the launch (else the launch runs the quick tier).
fn safepoints_in(src: &str, device: Device, n: usize, iters: i32, tiered: bool) {
    let rt = Runtime::builder()
        .workers(2)
        .device(device)
        .tiered(tiered)
        .build()
        .unwrap();
    let m = rt.load("spin.obc", src).unwrap();
    let counts = rt.new_array::<i64>(n).unwrap();
    let c = m.closure("spin", [iters.into(), (&counts).into()]).unwrap();
    let (report, stops) = std::thread::scope(|s| {
        let launch = s.spawn(|| par_offload(0..n as i64, &c).unwrap());
        // Wait until the launch is under way.
        while rt.read(&counts).unwrap().iter().sum::<i64>() == 0 {
            std::thread::yield_now();
        }
        let mut stops = Vec::new();
        for _ in 0..5 {
            let ((before, after), tts) = rt.safepoint(|_heap| {
                let before = rt.read(&counts).unwrap();
                std::thread::sleep(Duration::from_millis(5));
                (before, rt.read(&counts).unwrap())
            });
            assert_eq!(before, after, "a worker ran during the safepoint");
            stops.push(tts);
            std::thread::sleep(Duration::from_millis(2));
        }
        (launch.join().unwrap(), stops)
    });
    assert_eq!(
        rt.read(&counts).unwrap(),
        vec![i64::from(iters); n],
        "every increment exactly once"
    );
    assert!(report.safepoints >= 1, "{report}");
    assert_eq!(rt.safepoint_count(), 5);
    assert!(report.fallback.is_none());
    if device == Device::Cpu {
        assert!(
            report
                .deopts
                .keys()
                .any(|&(_, r)| r == offload::deopt::Reason::Safepoint),
            "{report:?}"
        );
    }
    eprintln!("{device:?}: time to safepoint {stops:?}; {report}");
}

#[test]
fn safepoints_stop_every_interpreter_worker_and_lose_nothing() {
    safepoints_on(Device::Interpreter, 6, 200_000);
}

#[test]
fn safepoints_stop_compiled_slots_which_deopt_at_their_back_edge_and_lose_nothing() {
    safepoints_on(Device::Cpu, 4000, 20_000);
}

#[test]
fn safepoints_in_inlined_calls_deopt_with_every_frame_and_lose_nothing() {
    safepoints_in(SPIN_CALL, Device::Cpu, 4000, 20_000, true);
}

#[test]
fn safepoints_stop_unrolled_loops_checked_at_entry_and_lose_nothing() {
    safepoints_in(SPIN_PLAIN, Device::Cpu, 4000, 20_000, false);
}

#[test]
fn a_safepoint_with_nothing_running_is_immediate() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let (v, tts) = rt.safepoint(|heap| heap.used());
    assert!(v > 0);
    assert!(tts < Duration::from_secs(1));
}

/// What a safepoint's operation asks of its own runtime: a nested
/// safepoint runs at once; a collection or a launch (which would wait for
/// the workers the safepoint stopped) is refused with `InSafepoint`, also
/// while another thread's launch is stopped at it; an interrupt is
/// counted and stops that launch when the safepoint releases it. Another
/// runtime is not affected. Each of these hung before.
#[test]
fn a_safepoint_operation_that_reenters_its_runtime_gets_an_answer() {
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .build()
            .unwrap();
        let other = Runtime::builder().workers(1).build().unwrap();
        let m = rt.load("spin.obc", SPIN_PLAIN).unwrap();
        let counts = rt.new_array::<i64>(4).unwrap();
        let small = m.closure("spin", [10.into(), (&counts).into()]).unwrap();
        let refused = |r: Result<(), offload::OffloadError>, what: &str| match r {
            Err(e @ offload::OffloadError::InSafepoint { .. }) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            Err(e) => panic!("{device:?}: {what}: {e}"),
            Ok(()) => panic!("{device:?}: {what} ran inside a safepoint"),
        };
        let ((), _) = rt.safepoint(|_| {
            let (used, tts) = rt.safepoint(|heap| heap.used());
            assert!(used > 0);
            assert_eq!(tts, Duration::ZERO);
            refused(rt.collect().map(drop), "a collection");
            refused(par_offload(0..4, &small).map(drop), "a launch");
            // Another runtime works as ever.
            other.collect().unwrap();
        });
        // Afterwards, both run normally.
        rt.collect().unwrap();
        par_offload(0..4, &small).unwrap();
        // With a launch of another thread stopped at the safepoint.
        let forever = m
            .closure("spin", [2_000_000_000.into(), (&counts).into()])
            .unwrap();
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| par_offload(0..4, &forever));
            std::thread::sleep(Duration::from_millis(100));
            rt.safepoint(|_| {
                refused(rt.collect().map(drop), "a collection");
                rt.interrupt();
            });
            h.join().unwrap()
        });
        assert!(
            matches!(r, Err(offload::OffloadError::Interrupted(_))),
            "{device:?}: {r:?}"
        );
    }
}
