//! The CPU device (Cranelift JIT + deopt + replay) against the interpreter.

use offload::deopt::Reason;
use offload::ir::ExceptionKind;
use offload::{Device, OffloadError, Runtime, par_offload};
use offload_jit::Injection;
use offload_testkit::kernels::example;
use offload_testkit::reference as native;

use offload_testkit::kernels::INC_KERNEL as INC;

#[path = "common/runtimes.rs"]
mod runtimes;
#[path = "common/stress.rs"]
mod stress;

use runtimes::{cpu, interpreter, optimized};

#[test]
fn the_demo_matches_native_rust_on_the_cpu_device() {
    let rt = cpu(2);
    let rows =
        offload_testkit::demo::run(&rt, offload_testkit::demo::Sizes { shrink: 20 }).unwrap();
    let bad: Vec<_> = rows.iter().filter(|r| !r.ok).collect();
    assert!(bad.is_empty(), "{}", offload_testkit::demo::table(&rows));
}

#[test]
fn compiled_kernels_run_natively_and_others_fall_back_with_a_reason() {
    let rt = cpu(2);
    let m = rt.load("saxpy.obc", example("saxpy.obc")).unwrap();
    let (x, y) = (
        rt.array(&[1.0f32; 100]).unwrap(),
        rt.array(&[2.0f32; 100]).unwrap(),
    );
    let r = par_offload(
        0..100,
        m.closure("saxpy", [3.0f32.into(), (&x).into(), (&y).into()])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (r.device, r.on_device, r.replayed, r.launches),
        (Device::Cpu, 100, 0, 1),
        "{r}"
    );
    assert!(r.fallback.is_none());
    assert_eq!(rt.read(&y).unwrap(), vec![5.0; 100]);

    let m = rt.load("shapes.obc", example("shapes.obc")).unwrap();
    let out = rt.new_array::<f64>(10).unwrap();
    let r = par_offload(0..10, m.closure("shape_areas", [(&out).into()]).unwrap()).unwrap();
    assert!(
        r.fallback.is_none(),
        "virtual calls and allocation compile: {r}"
    );
    assert_eq!(
        rt.read(&out).unwrap(),
        (0..10).map(native::shape_area).collect::<Vec<_>>()
    );

    // Recursion is not inlined: the kernel runs on the interpreter, and the
    // report says why.
    let src = "func fact(n: i64) -> i64 {\n    load n\n    i64.const 1\n    i64.le\n    br_unless rec\n    i64.const 1\n    ret\n  rec:\n    load n\n    load n\n    i64.const 1\n    i64.sub\n    call fact\n    i64.mul\n    ret\n}\n\nkernel k(i: i64, out: i64[]) {\n    load out\n    load i\n    i64.to_i32\n    load i\n    call fact\n    i64.astore\n    ret\n}\n";
    let m = rt.load("fact.obc", src).unwrap();
    let out = rt.new_array::<i64>(6).unwrap();
    let r = par_offload(0..6, m.closure("k", [(&out).into()]).unwrap()).unwrap();
    let why = r.fallback.expect("recursion: interpreter");
    assert!(why.contains("recursive"), "{why}");
    assert_eq!(rt.read(&out).unwrap(), [1, 1, 2, 6, 24, 120]);
}

#[test]
fn exceptions_deopt_and_are_reported_as_on_the_interpreter() {
    let n = 20_000usize;
    let a: Vec<i32> = (0..n as i32)
        .map(|j| if j % 97 == 5 { -1 } else { j })
        .collect();
    let b: Vec<i32> = (0..n as i32)
        .map(|j| if j % 1000 == 999 { 0 } else { 3 })
        .collect();
    let run = |rt: &Runtime| {
        let m = rt.load("throws.obc", example("throws.obc")).unwrap();
        let (aa, ba, oa) = (
            rt.array(&a).unwrap(),
            rt.array(&b).unwrap(),
            rt.new_array::<i32>(n).unwrap(),
        );
        let c = m
            .closure("checked_div", [(&aa).into(), (&ba).into(), (&oa).into()])
            .unwrap();
        let e = match par_offload(0..n as i64, &c) {
            Err(OffloadError::Exceptions(e)) => e,
            other => panic!("expected exceptions, got {other:?}"),
        };
        (e, rt.read(&oa).unwrap())
    };
    let (ei, oi) = run(&interpreter(2));
    // Few records per slot, so slots fill up, stop, replay and re-enter.
    let (ec, oc) = run(&Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .deopt_records(3)
        .build()
        .unwrap());
    assert_eq!(oc, oi, "same heap");
    assert_eq!(
        (ec.count, &ec.by_kind, &ec.workitems),
        (ei.count, &ei.by_kind, &ei.workitems)
    );
    assert_eq!(ec.first.kind, ExceptionKind::IllegalArgument);
    assert_eq!(ec.first.workitem, Some(5));
    assert_eq!(
        ec.first.trace, ei.first.trace,
        "the replayed exception has the interpreter's trace"
    );
    let r = &ec.report;
    assert!(r.fallback.is_none());
    assert_eq!(
        r.replayed, ec.count,
        "every throwing workitem deopted and was replayed"
    );
    assert!(r.deopts.keys().any(|&(_, reason)| reason == Reason::Throw));
    assert!(
        r.deopts
            .keys()
            .any(|&(_, reason)| reason == Reason::DivideByZero)
    );
    assert!(r.reentries > 0 && r.never_ran > 0, "{r}");
    assert_eq!(r.completed, (n as u64) - ec.count);
    assert!(r.deopt_table_text().contains("replayed, threw"));
    // The table holds the lowest deopted workitems, in order, whatever
    // order the slots' records were replayed in (it showed workitems from
    // the second worker's part up while the first exception was workitem 5).
    let rows: Vec<i64> = r.deopt_table.iter().map(|row| row.workitem).collect();
    let bad: Vec<i64> = (0..n as i64)
        .filter(|&j| a[j as usize] < 0 || b[j as usize] == 0)
        .take(offload::LaunchReport::TABLE_ROWS)
        .collect();
    assert_eq!(rows, bad, "{r}");
}

fn injected_inc(site_bci: u32, modulus: i64, n: usize) -> offload::LaunchReport {
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .deopt_records(1 + (site_bci as usize % 5))
        .inject(Injection {
            site_bci,
            modulus,
            remainder: 3 % modulus,
            reason: None,
        })
        .build()
        .unwrap();
    let m = rt.load("inc.obc", INC).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let r = par_offload(0..n as i64, m.closure("inc", [(&out).into()]).unwrap()).unwrap();
    let got = rt.read(&out).unwrap();
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != 1).take(5).collect();
    assert!(
        wrong.is_empty(),
        "cells not exactly 1 with deopts at bci {site_bci}: {wrong:?}\n{r}"
    );
    assert!(r.fallback.is_none(), "{:?}", r.fallback);
    assert_eq!(
        r.replayed,
        (0..n as i64).filter(|w| w % modulus == 3 % modulus).count() as u64,
        "{r}"
    );
    assert_eq!(r.completed, n as u64);
    stress::check_report(&r, &format!("deopts at {site_bci} mod {modulus}"));
    r
}

/// A safepoint storm and one-record slots over a large range: every stop
/// leaves a slot's rest unstarted, many of them more than once, and the
/// report still counts each workitem once, on every device.
#[test]
fn reports_partition_the_range_under_a_safepoint_storm() {
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder()
            .workers(2)
            .device(device)
            .deopt_records(1)
            .inject(Injection {
                site_bci: 7,
                modulus: 3,
                remainder: 1,
                reason: None,
            })
            .inject_safepoints(1, Some(7))
            .build()
            .unwrap();
        let m = rt.load("inc.obc", INC).unwrap();
        let n = 200_000usize;
        let out = rt.new_array::<i32>(n).unwrap();
        let r = par_offload(0..n as i64, m.closure("inc", [(&out).into()]).unwrap()).unwrap();
        assert!(rt.read(&out).unwrap().iter().all(|&v| v == 1));
        assert_eq!(r.completed, n as u64);
        stress::check_report(&r, &format!("{device:?}, safepoint storm"));
        if device == Device::Cpu {
            assert!(r.never_ran > 0 && r.reentries > 0, "{r}");
        }
    }
}

#[test]
fn exactly_once_under_injected_deopts_at_every_site() {
    // Sites of `inc`: the entry (0), the load of out[j] (7) and the store (10).
    for site in [0, 7, 10] {
        let r = injected_inc(site, 7, 20_000);
        assert!(r.reentries > 0 && r.never_ran > 0, "{r}");
        let reason = if site == 0 {
            Reason::Safepoint
        } else {
            Reason::NullCheck
        };
        assert!(r.deopts.contains_key(&(site, reason)), "{:?}", r.deopts);
        // The deopt table names and types every saved value.
        for row in &r.deopt_table {
            assert_eq!(row.saved.len(), row.values.len(), "{row:?}");
            if site == 0 {
                assert!(
                    row.saved.iter().any(|v| v.name == "i"
                        && v.ty == "i64"
                        && v.value == row.workitem.to_string()),
                    "{row:?}"
                );
            }
            if site == 7 {
                assert!(
                    row.saved.iter().any(|v| v.name == "s1"
                        && v.ty == "i32"
                        && v.value == row.workitem.to_string()),
                    "{row:?}"
                );
            }
        }
        let text = r.deopt_table_text();
        if site == 0 {
            assert!(text.contains("i: i64 = "), "{text}");
        }
    }
    // A deopt storm: every workitem deopts.
    let r = injected_inc(10, 1, 3000);
    assert_eq!(r.on_device, 0);
}

/// The optimized tier runs `inc`'s chunks unchecked and four workitems per
/// control-word check: deopts forced at the first, second, third and fourth
/// workitem of those groups, at the entry, the load and the store, still
/// leave every cell incremented exactly once, and every forced workitem is
/// replayed.
#[test]
fn deopts_inside_unrolled_groups_are_replayed_exactly_once() {
    let n = 20_000usize;
    for site_bci in [0, 7, 10] {
        for (modulus, remainder) in [(4, 0), (4, 1), (4, 2), (4, 3), (9, 5)] {
            let rt = Runtime::builder()
                .workers(2)
                .device(Device::Cpu)
                .deopt_records(3)
                .inject(Injection {
                    site_bci,
                    modulus,
                    remainder,
                    reason: None,
                })
                .build()
                .unwrap();
            let m = rt.load("inc.obc", INC).unwrap();
            let warm = rt.new_array::<i32>(n).unwrap();
            par_offload(0..n as i64, m.closure("inc", [(&warm).into()]).unwrap()).unwrap();
            rt.finish_compiles();
            let out = rt.new_array::<i32>(n).unwrap();
            let r = par_offload(0..n as i64, m.closure("inc", [(&out).into()]).unwrap()).unwrap();
            assert!(!r.quick_tier, "the optimized tier runs");
            let got = rt.read(&out).unwrap();
            let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != 1).take(5).collect();
            assert!(
                wrong.is_empty(),
                "bci {site_bci}, w % {modulus} == {remainder}: cells {wrong:?}\n{r}"
            );
            let forced = (0..n as i64).filter(|w| w % modulus == remainder).count() as u64;
            assert_eq!(r.replayed, forced, "{r}");
            assert_eq!(r.completed, n as u64);
            assert_eq!(r.on_device, n as u64 - forced, "{r}");
        }
    }
}

#[test]
fn bounded_bookkeeping_for_a_huge_range() {
    // 10^9 workitems where the first deopts: the launch stops at once and its
    // bookkeeping is one record per slot plus the never-ran ranges, whatever
    // the range. (Measured by what the report carries, not by timing.)
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .inject(Injection {
            site_bci: 0,
            modulus: 1_000_000_000_000,
            remainder: 0,
            reason: None,
        })
        .build()
        .unwrap();
    let m = rt.load("probe.obc", "kernel probe(i: i64, out: i64[]) {\n    load i\n    i64.const 1000000000\n    i64.lt\n    br_unless done\n  done:\n    ret\n}\n").unwrap();
    let out = rt.new_array::<i64>(1).unwrap();
    let r = par_offload(0..1_000, m.closure("probe", [(&out).into()]).unwrap()).unwrap();
    assert_eq!(r.replayed, 1);
    assert!(r.deopt_table.len() <= offload::LaunchReport::TABLE_ROWS);
}

#[test]
fn compiled_code_is_never_reused_for_another_module() {
    // Same kernel name and id, no classes, the first module dropped before the
    // second is loaded: the second must run its own code.
    let rt = cpu(1);
    let src = |c: i32| {
        format!(
            "kernel k(i: i64, out: i32[]) {{\n    load out\n    load i\n    i64.to_i32\n    i32.const {c}\n    i32.astore\n    ret\n}}\n"
        )
    };
    for c in [7, 9, 11] {
        let m = rt.load("k.obc", &src(c)).unwrap();
        let out = rt.new_array::<i32>(4).unwrap();
        let r = par_offload(0..4, m.closure("k", [(&out).into()]).unwrap()).unwrap();
        assert!(r.fallback.is_none());
        assert_eq!(rt.read(&out).unwrap(), vec![c; 4]);
    }
}

#[test]
fn ranges_near_the_top_of_i64_do_not_wrap_the_cursor() {
    let rt = cpu(2);
    let src = "kernel k(i: i64, out: i64[]) {\n    load out\n    i32.const 0\n    i64.const 1\n    i64.array_atomic_add\n    pop\n    ret\n}\n";
    let m = rt.load("k.obc", src).unwrap();
    let out = rt.new_array::<i64>(1).unwrap();
    let r = par_offload(
        i64::MAX - 100..i64::MAX,
        m.closure("k", [(&out).into()]).unwrap(),
    )
    .unwrap();
    assert_eq!(rt.read(&out).unwrap(), [100]);
    assert!(r.fallback.unwrap().contains("i64::MAX"));
    let r = par_offload(-50..50, m.closure("k", [(&out).into()]).unwrap()).unwrap();
    assert!(r.fallback.is_none());
    assert_eq!(rt.read(&out).unwrap(), [200]);
}

#[test]
fn ranges_near_the_bottom_of_i64_run_without_overflow() {
    // Workitem indices near i64::MIN: chunk arithmetic must not overflow.
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder()
            .workers(2)
            .device(device)
            .build()
            .unwrap();
        let m = rt
            .load("k.obc", "kernel k(i: i64) {\n    ret\n}\n")
            .unwrap();
        let c = m.closure("k", []).unwrap();
        let r = par_offload(i64::MIN..i64::MIN + 1000, &c).unwrap();
        assert_eq!(r.completed, 1000, "{device:?}");
    }
}

/// `k` calls `outer`, which calls the virtual `Acc.add` in a loop; the
/// callee divides, so some workitems deopt two calls deep.
const NESTED: &str = "
class Acc {
    field total: i64
    method add(x: i64, d: i64) {
        load this
        load this
        getfield Acc.total
        load x
        load d
        i64.div
        i64.add
        putfield Acc.total
        ret
    }
}

class Twice extends Acc {
    method add(x: i64, d: i64) {
        load this
        load this
        getfield Acc.total
        load x
        i64.const 2
        i64.mul
        load d
        i64.div
        i64.add
        putfield Acc.total
        ret
    }
}

func outer(a: Acc, n: i64, d: i64) -> i64 {
    local j: i64
    i64.const 0
    store j
  loop:
    load j
    load n
    i64.ge
    br_if done
    load a
    load j
    load d
    callvirt Acc.add
    inc j 1
    br loop
  done:
    load a
    getfield Acc.total
    ret
}

kernel k(i: i64, out: i64[]) {
    local a: Acc
    load i
    i64.const 2
    i64.rem
    i64.const 0
    i64.eq
    br_if even
    new Twice
    store a
    br go
  even:
    new Acc
    store a
  go:
    load out
    load i
    i64.to_i32
    load a
    i64.const 50
    load i
    i64.const 7
    i64.rem
    call outer
    i64.astore
    ret
}
";

#[test]
fn deopts_in_inlined_calls_resume_every_frame() {
    let run = |rt: &Runtime| {
        let m = rt.load("nested.obc", NESTED).unwrap();
        let out = rt.new_array::<i64>(700).unwrap();
        let c = m.closure("k", [(&out).into()]).unwrap();
        let r = par_offload(0..700, &c);
        (r, rt.read(&out).unwrap())
    };
    let interp = interpreter(2);
    let cpu = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .deopt_records(3)
        .build()
        .unwrap();
    let (ri, oi) = run(&interp);
    let (rc, oc) = run(&cpu);
    assert_eq!(oc, oi, "same heap");
    let (Err(OffloadError::Exceptions(ei)), Err(OffloadError::Exceptions(ec))) = (ri, rc) else {
        panic!("every 7th workitem divides by zero");
    };
    assert_eq!((ec.count, &ec.workitems), (ei.count, &ei.workitems));
    assert_eq!(ec.count, 100);
    assert_eq!(
        ec.first.trace, ei.first.trace,
        "three frames, as the interpreter has them"
    );
    assert_eq!(ec.first.trace.len(), 3);
    let r = &ec.report;
    assert!(r.fallback.is_none(), "{r}");
    // Reported at the kernel's call (bci 19), where the inlined frames hang.
    assert_eq!(
        r.deopts.get(&(19, Reason::DivideByZero)),
        Some(&100),
        "{:?}",
        r.deopts
    );
    assert_eq!(r.replayed, 100);
}

/// `out[i] = f(i)` where `f` allocates with a value in a local and on its
/// stack: the kernel's store is indexed by the workitem number, so the
/// optimized tier lowers the body twice (checked and unchecked chunks) and
/// inlines `f` once in each.
const TWICE_INLINED: &str = "
func f(x: i32) -> i32 {
    local t: i32
    load x
    i32.const 3
    i32.mul
    i32.const 1
    i32.add
    store t
    load t
    load x
    i32.const 3
    i32.and
    i32.const 1
    i32.add
    newarray i32
    dup
    i32.const 0
    load x
    i32.astore
    i32.const 0
    i32.aload
    i32.add
    ret
}

kernel k(i: i64, out: i32[]) {
    load out
    load i
    i64.to_i32
    load i
    i64.to_i32
    call f
    i32.astore
    ret
}
";

#[test]
fn deopts_in_a_callee_inlined_into_both_versions_save_that_copys_frame() {
    // Every TLAB refill fails, so `f`'s allocations deopt, in the
    // unchecked version too, whose exit must save its own copy of `f`'s
    // locals and stack (not the checked copy's, undefined on its path).
    let n = 3000;
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .tiered(false)
        .tlab_bytes(256)
        .fail_refills(1, 1)
        // Keep every workitem's array (no nursery reset), so that the
        // TLABs keep filling and refilling.
        .reclaim(false)
        .build()
        .unwrap();
    let m = rt.load("twice.obc", TWICE_INLINED).unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let r = par_offload(0..n as i64, m.closure("k", [(&out).into()]).unwrap()).unwrap();
    assert!(r.fallback.is_none(), "{r}");
    // A failed refill fails its own allocation (the others of its TLAB go
    // on): one deopt in each TLAB's worth, reported at the kernel's call.
    let failed = r.deopts.get(&(5, Reason::AllocationFailure)).copied();
    assert!(failed.unwrap_or(0) > 100, "{:?}\n{r}", r.deopts);
    assert_eq!(r.replayed, failed.unwrap(), "{r}");
    let want: Vec<i32> = (0..n as i32).map(|x| 4 * x + 1).collect();
    assert_eq!(rt.read(&out).unwrap(), want, "{r}");
}

/// Each workitem adds 1 to its cell `m` times, allocating an array per
/// iteration and bumping a shared atomic counter (`demo::STRESS_KERNEL`):
/// out[i] == m and counter == n * m exactly, however the work is cut.
#[test]
fn exactly_once_under_random_deopts_safepoints_and_refill_failures() {
    let mut rng = native::Rng::new(2024);
    let sites = stress::sites(&cpu(1), offload_testkit::kernels::STRESS_KERNEL);
    for case in 0..24 {
        let (n, m) = (1500 + rng.below(1500) as usize, 1 + rng.below(12) as i32);
        let b = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            .tlab_bytes(256 + 64 * rng.below(8) as u32)
            .deopt_records(1 + rng.below(6) as usize)
            .reclaim(false);
        let (b, mut what) =
            stress::random_faults(&mut rng, b, &sites, |rng| (1 + rng.below(5), rng.below(4)));
        what.insert(0, format!("case {case}"));
        let rt = b.build().unwrap();
        let r = stress::run(&rt, n, m, &what);
        // Injected safepoints show up (unless forced deopts end every
        // workitem before its first back-edge).
        if what.iter().any(|w| w.starts_with("safepoints"))
            && !what.iter().any(|w| w.starts_with("deopts"))
            && m > 1
        {
            assert!(
                r.deopts.keys().any(|&(_, why)| why == Reason::Safepoint),
                "{what:?}: {:?}",
                r.deopts
            );
        }
    }
}

#[test]
fn a_tiered_runtime_runs_the_quick_tier_first_and_the_optimized_tier_once_compiled() {
    let mandel = |rt: &Runtime| {
        let m = rt
            .load("mandelbrot.obc", example("mandelbrot.obc"))
            .unwrap();
        let img = rt.new_array::<i32>(32 * 32).unwrap();
        let c = m
            .closure(
                "mandelbrot",
                [32.into(), 32.into(), 64.into(), (&img).into()],
            )
            .unwrap();
        (c, img)
    };
    let mut want = vec![0; 32 * 32];
    native::mandelbrot_par(32, 32, 64, &mut want);

    let rt = cpu(2);
    let (c, img) = mandel(&rt);
    let first = par_offload(0..32 * 32, &c).unwrap();
    assert!(first.fallback.is_none(), "{:?}", first.fallback);
    assert!(
        first.quick_tier,
        "the first launch waits only for the quick tier"
    );
    assert_eq!(rt.read(&img).unwrap(), want);
    rt.finish_compiles();
    rt.write(&img, 0, &vec![0; 32 * 32]).unwrap();
    let later = par_offload(0..32 * 32, &c).unwrap();
    assert!(!later.quick_tier, "the optimized tier was compiled");
    assert_eq!(later.version, first.version, "a tier is not a new version");
    assert_eq!(rt.read(&img).unwrap(), want);

    // Without tiering the first launch runs optimized code.
    let rt = optimized(2);
    let (c, img) = mandel(&rt);
    let r = par_offload(0..32 * 32, &c).unwrap();
    assert!(!r.quick_tier);
    assert_eq!(rt.read(&img).unwrap(), want);
}

#[test]
fn a_launch_that_began_on_the_quick_tier_switches_to_the_optimized_code_once_it_is_ready() {
    // A first launch long enough to outlast the optimized compile: another
    // thread waits for that compile while the launch runs, and the slots
    // switch at their next claims (before, the whole launch ran the quick
    // tier). With injected safepoint stops, records written by one tier
    // are resumed or replayed after the switch: each workitem still counts
    // to `iters` exactly once.
    // About 0.7 s of optimized code on two workers either way: longer than
    // the optimized compile even in an unoptimized build of the runtime.
    // (Injected safepoints take the lockstep groups away, so that run has
    // scalar code and fewer iterations; 100 stops a workitem.)
    for (inject, iters) in [(None, 1_000_000), (Some(500), 50_000)] {
        let mut b = Runtime::builder().workers(2).device(Device::Cpu);
        if let Some(every) = inject {
            b = b.inject_safepoints(every, Some(7));
        }
        let rt = b.build().unwrap();
        let m = rt
            .load("spin.obc", include_str!("../examples/kernels/spin.obc"))
            .unwrap();
        let n = 4096;
        let out = rt.new_array::<i32>(n).unwrap();
        let c = m.closure("spin", [iters.into(), (&out).into()]).unwrap();
        let r = std::thread::scope(|s| {
            let launch = s.spawn(|| par_offload(0..n as i64, &c).unwrap());
            // The launch compiles its quick tier first, then starts the
            // optimized compile: wait for that compile once it exists.
            std::thread::sleep(std::time::Duration::from_millis(50));
            rt.finish_compiles();
            launch.join().unwrap()
        });
        assert!(r.quick_tier, "{r}");
        assert!(
            r.quick_workitems < r.on_device,
            "the launch switched tiers part-way: {r}"
        );
        assert!(r.to_string().contains(" on the quick tier, "), "{r}");
        assert_eq!(rt.read(&out).unwrap(), vec![iters; n], "{r}");
        // The next launch runs optimized code from its start.
        let r = par_offload(0..n as i64, &c).unwrap();
        assert!(!r.quick_tier && r.quick_workitems == 0, "{r}");
    }
}

#[test]
fn a_first_launch_over_a_large_range_waits_for_the_optimized_code() {
    // At 2^19 workitems or more the quick tier would cost the launch more
    // than the optimized compile takes (saxpy over 10^7: 2.1x the time of
    // an untiered runtime's first launch even with the switch).
    let rt = cpu(2);
    let m = rt.load("inc.obc", INC).unwrap();
    let small = rt.new_array::<i32>(1 << 10).unwrap();
    let r = par_offload(0..1 << 10, m.closure("inc", [(&small).into()]).unwrap()).unwrap();
    assert!(r.quick_tier, "{r}");
    let m = rt.load("inc.obc", INC).unwrap();
    let big = rt.new_array::<i32>(1 << 20).unwrap();
    let r = par_offload(0..1 << 20, m.closure("inc", [(&big).into()]).unwrap()).unwrap();
    assert!(!r.quick_tier, "{r}");
    assert_eq!(rt.read(&big).unwrap(), vec![1; 1 << 20]);
}

#[test]
fn both_tiers_deopt_at_the_same_sites_and_replay_exactly_once() {
    // Every 7th workitem deopts at the store; `inc` adds one per workitem.
    for tiered in [true, false] {
        let rt = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            .tiered(tiered)
            .inject(Injection {
                site_bci: 10,
                modulus: 7,
                remainder: 3,
                reason: None,
            })
            .build()
            .unwrap();
        let m = rt.load("inc.obc", INC).unwrap();
        let out = rt.new_array::<i32>(1000).unwrap();
        let c = m.closure("inc", [(&out).into()]).unwrap();
        let r = par_offload(0..1000, &c).unwrap();
        assert_eq!(r.quick_tier, tiered);
        assert_eq!(r.replayed, (0..1000).filter(|w| w % 7 == 3).count() as u64);
        rt.finish_compiles();
        let r2 = par_offload(0..1000, &c).unwrap();
        assert!(!r2.quick_tier);
        assert_eq!(r2.deopts, r.deopts, "same sites, same reasons");
        assert!(rt.read(&out).unwrap().iter().all(|&x| x == 2));
    }
}

/// Injected safepoints with a seed are random at the rate asked for: each
/// back-edge poll deopts with probability 1/`every`, whatever the seed and
/// however often the slots re-enter or resume a record (a deopt is an
/// exit, and the stream goes on from where the slot's last entry left it).
#[test]
fn injected_random_safepoints_come_at_the_rate_asked_for() {
    for (every, seed) in [(50u64, 1u64), (50, 2), (50, 77), (4, 9)] {
        let rt = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            // The quick tier throughout: its loops poll at every back-edge
            // (the optimized code's unrolled loops once per round).
            .tier_up(false)
            .deopt_records(1)
            .inject_safepoints(every, Some(seed))
            .build()
            .unwrap();
        let r = stress::check_safepoint_rate(&rt, 20_000, every, seed);
        assert!(
            r.resumed > 0,
            "the CPU device resumes stopped workitems\n{r}"
        );
    }
}

/// The CPU cuts the range into a home part per worker and a worker that
/// spends its part claims from the others' (`ctx::Part`). Workitems of the
/// first part cost a thousand times the others', so the second worker
/// spends its part early and takes most of the first part's claims: every
/// workitem still runs once per launch, on odd-sized ranges (parts of
/// unequal length), on ranges shorter than the team, and the report counts
/// the claims the parts were cut into.
#[test]
fn workers_take_from_each_others_parts_and_run_every_workitem_once() {
    const SKEW: &str = "kernel skew(i: i64, heavy: i64, c: i32[]) {
    local j: i32
    local k: i32
    local s: i32
    load i
    i64.to_i32
    store j
    i32.const 0
    store k
    i32.const 0
    store s
    load i
    load heavy
    i64.ge
    br_if count
  spin:
    load k
    i32.const 2000
    i32.ge
    br_if count
    load s
    load k
    i32.xor
    i32.const 3
    i32.mul
    store s
    inc k 1
    br spin
  count:
    load c
    load j
    load c
    load j
    i32.aload
    i32.const 1
    i32.add
    load s
    i32.const 0
    i32.mul
    i32.add
    i32.astore
    ret
}";
    for workers in [2, 3] {
        let rt = optimized(workers);
        let m = rt.load("skew.obc", SKEW).unwrap();
        for n in [1usize, 2, 5, 999, 20_011] {
            let counts = rt.new_array::<i32>(n).unwrap();
            // The first part (of `workers`) is the heavy one.
            let heavy = (n / workers) as i64;
            let c = m.closure("skew", [heavy.into(), (&counts).into()]).unwrap();
            for launch in 1..=3 {
                let r = par_offload(0..n as i64, &c).unwrap();
                assert_eq!(r.completed, n as u64, "{workers} workers, n {n}");
                let chunk = (n as u64).div_ceil(r.chunks.max(1));
                assert!(
                    r.chunks >= workers.min(n) as u64 && chunk >= 1,
                    "{workers} workers, n {n}: {} claims",
                    r.chunks
                );
                assert!(
                    rt.read(&counts).unwrap().iter().all(|&v| v == launch),
                    "{workers} workers, n {n}: not once per launch"
                );
            }
        }
    }
}
