//! Lockstep groups on the CPU device (`jit/src/cpu/opt/lockstep.rs`): kernels
//! whose loops are the same for every workitem run four workitems as one
//! SIMD body. Against the interpreter, bit for bit, with the exceptions
//! their uniform accesses throw (the group is abandoned and the scalar path
//! deopts), tails shorter than a group, and exactly once while the host
//! raises safepoints inside their loops (which abandon groups too).

use offload::ir::ExceptionKind;
use offload::{Device, OffloadError, Runtime, par_offload};
use offload_jit::Injection;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

#[path = "common/runtimes.rs"]
mod runtimes;

use runtimes::{injected, interpreter, optimized};

/// `out[b] = sum over j < n of a[j * s + o] * x[b] / sqrt(x[b] + j)`, an
/// `i32` mix of the same in `iout[b]`: uniform loads at a computed index,
/// lane loads, `sqrt`, a division, `i32` lanes.
const DOT: &str =
    "kernel dot(i: i64, n: i32, s: i32, o: i32, a: f32[], x: f32[], out: f32[], iout: i32[]) {
    local b: i32
    local j: i32
    local acc: f32
    local h: i32
    local t: f32
    load i
    i64.to_i32
    store b
    i32.const 0
    store j
    f32.const 0.0
    store acc
    i32.const 0
    store h
  loop:
    load j
    load n
    i32.ge
    br_if done
    load a
    load j
    load s
    i32.mul
    load o
    i32.add
    f32.aload
    load x
    load b
    f32.aload
    f32.mul
    store t
    load acc
    load t
    load x
    load b
    f32.aload
    load j
    i32.to_f32
    f32.add
    f32.sqrt
    f32.div
    f32.add
    store acc
    load h
    load j
    i32.const 7
    i32.mul
    i32.add
    load h
    i32.xor
    store h
    inc j 1
    br loop
  done:
    load out
    load b
    load acc
    f32.astore
    load iout
    load b
    load h
    i32.astore
    ret
}";

/// What a launch threw: how many workitems, of which kinds, the first ones.
type Thrown = Option<(u64, BTreeMap<ExceptionKind, u64>, Vec<i64>)>;

/// Launch `c` over `range` twice (the first compiles) and say what the
/// second threw.
fn twice(range: std::ops::Range<i64>, c: &offload::Closure) -> Thrown {
    let _ = par_offload(range.clone(), c);
    match par_offload(range, c) {
        Ok(_) => None,
        Err(OffloadError::Exceptions(e)) => Some((e.count, e.by_kind.clone(), e.workitems.clone())),
        Err(e) => panic!("{e}"),
    }
}

type Outcome = (Thrown, Vec<u32>, Vec<i32>);

/// Each workitem spins `n` uniform iterations, then counts itself once.
const COUNT: &str = "kernel count(i: i64, n: i32, x: f32[], sum: f32[], hits: i32[]) {
    local b: i32
    local j: i32
    local acc: f32
    load i
    i64.to_i32
    store b
    i32.const 0
    store j
    f32.const 0.0
    store acc
  loop:
    load j
    load n
    i32.ge
    br_if done
    load acc
    load x
    load b
    f32.aload
    f32.add
    store acc
    inc j 1
    br loop
  done:
    load sum
    load b
    load acc
    f32.astore
    load hits
    load b
    load hits
    load b
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}";

fn run(rt: &Runtime, n: i32, s: i32, o: i32, alen: usize, range: std::ops::Range<i64>) -> Outcome {
    let m = rt.load("dot.obc", DOT).unwrap();
    let len = range.end.max(1) as usize;
    let a = rt
        .array(&(0..alen).map(|v| v as f32 * 0.5 - 3.0).collect::<Vec<_>>())
        .unwrap();
    let x = rt
        .array(
            &(0..len)
                .map(|v| (v % 13) as f32 * 0.75 + 0.1)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let out = rt.new_array::<f32>(len).unwrap();
    let iout = rt.new_array::<i32>(len).unwrap();
    let c = m
        .closure(
            "dot",
            [
                n.into(),
                s.into(),
                o.into(),
                (&a).into(),
                (&x).into(),
                (&out).into(),
                (&iout).into(),
            ],
        )
        .unwrap();
    let thrown = twice(range, &c);
    let bits = rt
        .read(&out)
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect();
    (thrown, bits, rt.read(&iout).unwrap())
}

#[test]
fn lockstep_groups_agree_with_the_interpreter_bit_for_bit() {
    let (interp, cpu) = (interpreter(2), optimized(2));
    // The optimized tier runs `dot` in lockstep: SIMD loads in its loop.
    let m = cpu.load("dot.obc", DOT).unwrap();
    let clif = m.cranelift_ir("dot").unwrap();
    assert!(clif.contains("load.f32x4"), "no lockstep group:\n{clif}");
    for (n, s, o, alen) in [
        (0, 1, 0, 4),
        (1, 1, 0, 4),
        (7, 1, 3, 16),
        (33, 2, 1, 80),
        // a[j * s + o] runs past a's end at j = 10: every workitem throws.
        (12, 1, 0, 10),
    ] {
        for range in [0..3i64, 0..4, 0..17, 5..1003, 0..4096] {
            let want = run(&interp, n, s, o, alen, range.clone());
            let got = run(&cpu, n, s, o, alen, range.clone());
            assert_eq!(got, want, "n {n} s {s} o {o} alen {alen} range {range:?}");
        }
    }
}

#[test]
fn an_empty_array_in_a_lockstep_loop_throws_where_the_scalar_code_does() {
    const NULLS: &str = "kernel nulls(i: i64, n: i32, a: f32[], out: f32[]) {
    local b: i32
    local j: i32
    local acc: f32
    load i
    i64.to_i32
    store b
    i32.const 0
    store j
    f32.const 1.0
    store acc
  loop:
    load j
    load n
    i32.ge
    br_if done
    load acc
    load a
    load j
    f32.aload
    f32.add
    store acc
    inc j 1
    br loop
  done:
    load out
    load b
    load acc
    f32.astore
    ret
}";
    let go = |rt: &Runtime, n: i32| {
        let m = rt.load("nulls.obc", NULLS).unwrap();
        let out = rt.new_array::<f32>(64).unwrap();
        let empty = rt.new_array::<f32>(0).unwrap();
        let c = m
            .closure("nulls", [n.into(), (&empty).into(), (&out).into()])
            .unwrap();
        let e = twice(0..64, &c);
        (e, rt.read(&out).unwrap())
    };
    let (interp, cpu) = (interpreter(2), optimized(2));
    // No iterations: nothing reads `a`; one or more: every workitem throws
    // at its first (the group's uniform check fails, the scalar path
    // deopts).
    for n in [0, 1, 5] {
        assert_eq!(go(&cpu, n), go(&interp, n), "n {n}");
    }
}

#[test]
fn exactly_once_while_the_host_raises_safepoints_inside_lockstep_loops() {
    let items = 4096usize;
    let n = 20_000i32;
    let rt = optimized(2);
    let m = rt.load("count.obc", COUNT).unwrap();
    let x = rt
        .array(&(0..items).map(|v| (v % 5) as f32).collect::<Vec<_>>())
        .unwrap();
    let sum = rt.new_array::<f32>(items).unwrap();
    let warm = rt.new_array::<i32>(items).unwrap();
    let c = m
        .closure(
            "count",
            [n.into(), (&x).into(), (&sum).into(), (&warm).into()],
        )
        .unwrap();
    par_offload(0..items as i64, &c).unwrap();
    let hits = rt.new_array::<i32>(items).unwrap();
    let c = m
        .closure(
            "count",
            [n.into(), (&x).into(), (&sum).into(), (&hits).into()],
        )
        .unwrap();
    let stop = AtomicBool::new(false);
    let (rep, raised) = std::thread::scope(|s| {
        let raiser = s.spawn(|| {
            let mut raised = 0u64;
            while !stop.load(Ordering::Acquire) {
                rt.safepoint(|_| ());
                raised += 1;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            raised
        });
        let rep = par_offload(0..items as i64, &c).unwrap();
        stop.store(true, Ordering::Release);
        (rep, raiser.join().unwrap())
    });
    assert!(raised > 0 && rep.safepoints > 0, "{raised} raised\n{rep}");
    assert!(
        rt.read(&hits).unwrap().iter().all(|&h| h == 1),
        "a workitem ran twice or not at all\n{rep}"
    );
    let want: Vec<u32> = (0..items)
        .map(|v| {
            let mut acc = 0.0f32;
            for _ in 0..n {
                acc += (v % 5) as f32;
            }
            acc.to_bits()
        })
        .collect();
    let got: Vec<u32> = rt
        .read(&sum)
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect();
    assert_eq!(got, want, "{rep}");
}

/// Consecutive values (`b + o + j`, `b % n`) and uniform quotients
/// (`b / n`): one vector load per run of indices, guards for the divisor
/// (0 throws, -1 and groups straddling a multiple of `n` go scalar), and
/// indices past the array's end for the last workitems only.
#[test]
fn consecutive_indices_and_quotients_agree_with_the_interpreter() {
    const RUNS: &str =
        "kernel runs(i: i64, n: i32, o: i32, m: i32, a: f32[], out: f32[], iout: i32[]) {
    local b: i32
    local j: i32
    local acc: f32
    local q: i32
    local r: i32
    load i
    i64.to_i32
    store b
    load b
    load n
    i32.div
    store q
    load b
    load n
    i32.rem
    store r
    f32.const 0.0
    store acc
    i32.const 0
    store j
  loop:
    load j
    load m
    i32.ge
    br_if done
    load acc
    load a
    load b
    load o
    i32.add
    load j
    i32.add
    f32.aload
    f32.add
    store acc
    inc j 1
    br loop
  done:
    load out
    load b
    load acc
    load q
    i32.to_f32
    f32.add
    f32.astore
    load iout
    load b
    load r
    load q
    i32.xor
    i32.astore
    ret
}";
    let go = |rt: &Runtime, n: i32, o: i32, m: i32, range: std::ops::Range<i64>| {
        let md = rt.load("runs.obc", RUNS).unwrap();
        let len = range.end as usize;
        // Two elements past the range: the last workitems read past the end
        // when `o + m > 2`.
        let a = rt
            .array(&(0..len + 2).map(|v| v as f32 * 0.25).collect::<Vec<_>>())
            .unwrap();
        let out = rt.new_array::<f32>(len).unwrap();
        let iout = rt.new_array::<i32>(len).unwrap();
        let c = md
            .closure(
                "runs",
                [
                    n.into(),
                    o.into(),
                    m.into(),
                    (&a).into(),
                    (&out).into(),
                    (&iout).into(),
                ],
            )
            .unwrap();
        let e = twice(range, &c);
        let bits: Vec<u32> = rt
            .read(&out)
            .unwrap()
            .into_iter()
            .map(f32::to_bits)
            .collect();
        (e, bits, rt.read(&iout).unwrap())
    };
    let (interp, cpu) = (interpreter(2), optimized(2));
    let m = cpu.load("runs.obc", RUNS).unwrap();
    assert!(m.cranelift_ir("runs").unwrap().contains("load.f32x4"));
    for n in [0, -1, 1, 3, 4, 5, 7, 64] {
        for (o, m) in [(0, 0), (0, 2), (3, 5)] {
            for range in [0..3i64, 0..37, 5..1003] {
                let want = go(&interp, n, o, m, range.clone());
                let got = go(&cpu, n, o, m, range.clone());
                assert_eq!(got, want, "n {n} o {o} m {m} range {range:?}");
            }
        }
    }
}

/// The examples with uniform loops run in lockstep whether they were
/// written in bytecode or in the source language (whose `a[i] += x` copies
/// the array and the index into locals first).
#[test]
fn nbody_and_matmul_run_in_lockstep_from_bytecode_and_from_source() {
    let rt = optimized(2);
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kernels");
    for (file, kernel) in [
        ("nbody.obc", "nbody"),
        ("nbody.ofk", "nbody"),
        ("matmul.obc", "matmul"),
        ("matmul.ofk", "matmul"),
    ] {
        let m = rt.load_file(format!("{dir}/{file}")).unwrap();
        let clif = m.cranelift_ir(kernel).unwrap();
        assert!(clif.contains("f32x4"), "{file}: no lockstep group");
    }
}

/// Quotients and remainders of `b + o` where the last lanes pass
/// `i32::MAX` and wrap to negative dividends: the group goes scalar.
#[test]
fn consecutive_dividends_that_wrap_go_scalar() {
    const WRAP: &str = "kernel wrap(i: i64, o: i32, n: i32, m: i32, q: i32[], r: i32[]) {
    local b: i32
    local j: i32
    local s: i32
    local t: i32
    load i
    i64.to_i32
    store b
    load b
    load o
    i32.add
    load n
    i32.div
    store s
    load b
    load o
    i32.add
    load n
    i32.rem
    store t
    i32.const 0
    store j
  loop:
    load j
    load m
    i32.ge
    br_if done
    inc j 1
    br loop
  done:
    load q
    load b
    load s
    i32.astore
    load r
    load b
    load t
    i32.astore
    ret
}";
    let go = |rt: &Runtime, o: i32, n: i32| {
        let m = rt.load("wrap.obc", WRAP).unwrap();
        let (q, r) = (
            rt.new_array::<i32>(4096).unwrap(),
            rt.new_array::<i32>(4096).unwrap(),
        );
        let c = m
            .closure(
                "wrap",
                [o.into(), n.into(), 3i32.into(), (&q).into(), (&r).into()],
            )
            .unwrap();
        // 4096 workitems: chunks of 64 (a small range runs chunks of one
        // workitem, too few for a group).
        par_offload(0..4096, &c).unwrap();
        par_offload(0..4096, &c).unwrap();
        (rt.read(&q).unwrap(), rt.read(&r).unwrap())
    };
    let (interp, cpu) = (interpreter(2), optimized(2));
    // The group at 2000 sees dividends MAX, MIN, .. (and MAX - 1, MAX, ..).
    for (o, n) in [
        (i32::MAX - 2000, 1000),
        (i32::MAX - 2001, 7),
        (i32::MIN, 9),
        (100, 64),
    ] {
        assert_eq!(go(&cpu, o, n), go(&interp, o, n), "o {o} n {n}");
    }
}

/// Deopts injected at each site of a lockstep kernel, for chosen
/// workitems: their groups go scalar from the start, the scalar code deopts
/// them at the site, and every workitem still counts itself exactly once
/// with the right sum.
#[test]
fn injected_deopts_send_their_groups_to_the_scalar_path_exactly_once() {
    let (items, n) = (4096usize, 50i32);
    let want: Vec<u32> = (0..items)
        .map(|v| {
            let mut acc = 0.0f32;
            for _ in 0..n {
                acc += (v % 5) as f32;
            }
            acc.to_bits()
        })
        .collect();
    let mut exercised = 0;
    for site_bci in 0..40u32 {
        for (modulus, remainder) in [(4i64, 0i64), (4, 3), (9, 5)] {
            let rt = injected(
                2,
                Injection {
                    site_bci,
                    modulus,
                    remainder,
                    reason: None,
                },
            );
            let m = rt.load("count.obc", COUNT).unwrap();
            let x = rt
                .array(&(0..items).map(|v| (v % 5) as f32).collect::<Vec<_>>())
                .unwrap();
            let (sum, hits) = (
                rt.new_array::<f32>(items).unwrap(),
                rt.new_array::<i32>(items).unwrap(),
            );
            let c = m
                .closure(
                    "count",
                    [n.into(), (&x).into(), (&sum).into(), (&hits).into()],
                )
                .unwrap();
            // Not a deopt site: the kernel does not compile with it.
            let Ok(rep) = par_offload(0..items as i64, &c) else {
                continue;
            };
            if rep.device != Device::Cpu || rep.fallback.is_some() {
                continue;
            }
            assert!(
                m.cranelift_ir("count").unwrap().contains("f32x4"),
                "site {site_bci}: no lockstep group"
            );
            assert!(
                rt.read(&hits).unwrap().iter().all(|&h| h == 1),
                "site {site_bci} {modulus}/{remainder}: a workitem ran twice or not at all\n{rep}"
            );
            let got: Vec<u32> = rt
                .read(&sum)
                .unwrap()
                .into_iter()
                .map(f32::to_bits)
                .collect();
            assert_eq!(got, want, "site {site_bci} {modulus}/{remainder}\n{rep}");
            // Every chosen workitem deopted there, once per visit (every
            // workitem reaches every site of `count`; one resumed at the
            // loop's header meets it again each iteration).
            let at: u64 = rep
                .deopts
                .iter()
                .filter(|&(&(s, _), _)| s == site_bci)
                .map(|(_, &n)| n)
                .sum();
            if at > 0 {
                let chosen = (0..items as i64)
                    .filter(|w| w % modulus == remainder)
                    .count();
                assert!(
                    at.is_multiple_of(chosen as u64),
                    "site {site_bci} {modulus}/{remainder}: {at} deopts, {chosen} chosen\n{rep}"
                );
                exercised += 1;
            }
        }
    }
    assert!(exercised >= 6, "only {exercised} injections deopted");
}
