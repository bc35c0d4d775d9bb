//! The CPU device's optimized tier against the interpreter: chunks that
//! run without bounds checks, loops checked once at entry, vectorized
//! groups, and the deopt reasons of the checks they keep.

use offload::deopt::Reason;
use offload::ir::ExceptionKind;
use offload::{OffloadError, Runtime, par_offload};
use offload_jit::Injection;
use std::collections::BTreeMap;

#[path = "common/runtimes.rs"]
mod runtimes;

use runtimes::{cpu, injected, interpreter, optimized};

/// How many workitems of a launch threw `IndexOutOfBounds`, and which
/// workitems threw (none when it ran through); any other error panics.
fn out_of_bounds(launch: Result<offload::LaunchReport, OffloadError>) -> (u64, Vec<i64>) {
    match launch {
        Ok(_) => (0, Vec::new()),
        Err(OffloadError::Exceptions(e)) => (
            e.by_kind
                .get(&ExceptionKind::IndexOutOfBounds)
                .copied()
                .unwrap_or(0),
            e.workitems.clone(),
        ),
        Err(e) => panic!("{e}"),
    }
}

/// One compare checks an array access for both null and bounds (null reads
/// as an array of length 0); the record still names the right reason, and
/// the replay throws the right exception, in both tiers.
#[test]
fn a_null_array_and_an_index_out_of_bounds_deopt_with_their_own_reasons() {
    // Workitems 0..4 read `a`, the others a local that is still null.
    const GET: &str = "kernel get(i: i64, a: i32[], out: i32[]) {
    local src: i32[]
    ref.null
    store src
    load i
    i64.const 4
    i64.ge
    br_if read
    load a
    store src
  read:
    load out
    load i
    i64.to_i32
    load src
    load i
    i64.to_i32
    i32.aload
    i32.astore
    ret
}";
    // The aload's bytecode index (the site both checks share).
    const ALOAD: u32 = 14;
    for tier in ["quick", "optimized"] {
        let rt = cpu(2);
        let m = rt.load("get.obc", GET).unwrap();
        let out = rt.new_array::<i32>(8).unwrap();
        let a = rt.array(&[7i32; 4]).unwrap();
        if tier == "optimized" {
            // Warm up, then wait for the optimized tier.
            let c = m.closure("get", [(&a).into(), (&out).into()]).unwrap();
            par_offload(0..4, &c).unwrap();
            rt.finish_compiles();
        }
        // Out of bounds for 2..4 (a has 2 elements), null for 4..8.
        let out = rt.new_array::<i32>(8).unwrap();
        let a = rt.array(&[7i32; 2]).unwrap();
        let c = m.closure("get", [(&a).into(), (&out).into()]).unwrap();
        let e = match par_offload(0..8, &c) {
            Err(OffloadError::Exceptions(e)) => e,
            other => panic!("{tier}: expected exceptions, got {other:?}"),
        };
        assert_eq!(e.report.quick_tier, tier == "quick", "{}", e.report);
        assert_eq!(e.workitems, vec![2, 3, 4, 5, 6, 7]);
        assert_eq!(e.by_kind.get(&ExceptionKind::IndexOutOfBounds), Some(&2));
        assert_eq!(e.by_kind.get(&ExceptionKind::NullPointer), Some(&4));
        let deopts = &e.report.deopts;
        assert_eq!(
            deopts.get(&(ALOAD, Reason::BoundsCheck)),
            Some(&2),
            "{tier}: {deopts:?}"
        );
        assert_eq!(
            deopts.get(&(ALOAD, Reason::NullCheck)),
            Some(&4),
            "{tier}: {deopts:?}"
        );
        assert_eq!(rt.read(&out).unwrap(), [7, 7, 0, 0, 0, 0, 0, 0]);
    }
}

/// Accesses indexed by the workitem number run unchecked in chunks that
/// lie inside their arrays, and checked elsewhere: a range that runs past
/// the end of one array gives exactly the interpreter's results and
/// exceptions, in both tiers.
#[test]
fn chunks_inside_the_arrays_and_chunks_past_their_end_agree_with_the_interpreter() {
    const ADD1: &str = "kernel add1(i: i64, a: i32[], out: i32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load out
    load j
    load a
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}";
    let run = |rt: &Runtime, n: usize, warm: bool| {
        let m = rt.load("add1.obc", ADD1).unwrap();
        let a = rt.array(&(0..40).collect::<Vec<i32>>()).unwrap();
        if warm {
            let out = rt.new_array::<i32>(40).unwrap();
            let c = m.closure("add1", [(&a).into(), (&out).into()]).unwrap();
            par_offload(0..40, &c).unwrap();
            rt.finish_compiles();
        }
        let out = rt.new_array::<i32>(n).unwrap();
        let c = m.closure("add1", [(&a).into(), (&out).into()]).unwrap();
        let res = par_offload(0..n as i64, &c);
        let (quick, thrown) = match res {
            Ok(r) => (r.quick_tier, (0, Vec::new())),
            Err(OffloadError::Exceptions(e)) => (
                e.report.quick_tier,
                (
                    e.by_kind
                        .get(&ExceptionKind::IndexOutOfBounds)
                        .copied()
                        .unwrap_or(0),
                    e.workitems.clone(),
                ),
            ),
            Err(e) => panic!("{e}"),
        };
        (quick, thrown, rt.read(&out).unwrap())
    };
    let interp = interpreter(2);
    for n in [1usize, 39, 40, 41, 64, 1000, 2000] {
        let (_, want_thrown, want) = run(&interp, n, false);
        assert_eq!(want_thrown.0, n.saturating_sub(40) as u64);
        // Chunks are n / 64 workitems (at least 1): with n = 1000 and 2000
        // the first chunks lie inside `a` and one runs past its end.
        for warm in [false, true] {
            let rt = cpu(2);
            let (quick, thrown, got) = run(&rt, n, warm);
            assert_eq!(quick, !warm, "n {n}");
            assert_eq!(got, want, "n {n}, warm {warm}");
            assert_eq!(thrown, want_thrown, "n {n}, warm {warm}");
        }
    }
}

/// The source language's access with an `i64` index (`wide = i; narrow =
/// wide as i32; if narrow as i64 != wide { throw }; a[narrow]`), whose test
/// the unchecked chunks skip and whose SIMD groups take (`opt::indexed`,
/// `opt::lanes`): inside the arrays, past their end, below 0 and past
/// `i32::MAX` (where the narrowing changes the number), the CPU device
/// gives the interpreter's results and exceptions, in both tiers.
#[test]
fn an_i64_index_tested_after_its_narrowing_agrees_with_the_interpreter() {
    const SAXPY64: &str = "kernel s(i: i64, a: f32, x: f32[], y: f32[]) {
    local w: i64
    local n: i32
    load i
    store w
    load w
    i64.to_i32
    store n
    load n
    i32.to_i64
    load w
    i64.eq
    br_if ok
    throw IndexOutOfBounds
  ok:
    load y
    load n
    load a
    load x
    load n
    f32.aload
    f32.mul
    f32.astore
    ret
}";
    let len = 3000usize;
    let run = |rt: &Runtime, range: std::ops::Range<i64>, warm: bool| {
        let m = rt.load("s.obc", SAXPY64).unwrap();
        let x: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
        let xa = rt.array(&x).unwrap();
        if warm {
            let y = rt.new_array::<f32>(len).unwrap();
            let c = m
                .closure("s", [3.0f32.into(), (&xa).into(), (&y).into()])
                .unwrap();
            par_offload(0..len as i64, &c).unwrap();
            rt.finish_compiles();
        }
        let y = rt.new_array::<f32>(len).unwrap();
        let c = m
            .closure("s", [3.0f32.into(), (&xa).into(), (&y).into()])
            .unwrap();
        let thrown = out_of_bounds(par_offload(range, &c));
        (thrown, rt.read(&y).unwrap())
    };
    let interp = interpreter(2);
    let big = i64::from(i32::MAX) - 5;
    for range in [0..len as i64, 0..2999, 100..3100, -7..50, big..big + 12] {
        let (want_thrown, want) = run(&interp, range.clone(), false);
        for warm in [false, true] {
            let rt = cpu(2);
            let (thrown, got) = run(&rt, range.clone(), warm);
            assert_eq!(got, want, "{range:?}, warm {warm}");
            assert_eq!(thrown, want_thrown, "{range:?}, warm {warm}");
        }
    }
}

/// A kernel with a uniform loop and an `i64` index, as the source language
/// writes it (the store's array loaded before the index's narrowing test):
/// its lockstep groups (`opt::lockstep`, which take the test as known in a
/// proven chunk and never enter its `throw`) give the interpreter's
/// results and exceptions inside the arrays, past their end, below 0 and
/// past `i32::MAX`, in both tiers.
#[test]
fn lockstep_groups_with_an_i64_index_agree_with_the_interpreter() {
    const MATMUL64: &str = "
        #[kernel]
        fn matmul(i: i64, n: i32, a: &[f32], b: &[f32], c: &mut [f32]) {
            let row = i as i32 / n;
            let col = i as i32 % n;
            let mut acc = 0.0;
            for k in 0..n {
                acc += a[row * n + k] * b[k * n + col];
            }
            c[i] = acc;
        }
    ";
    let n = 24usize;
    let run = |rt: &Runtime, range: std::ops::Range<i64>, warm: bool| {
        let m = rt.load_source("m.ofk", MATMUL64).unwrap();
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 2.5).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.25).collect();
        let (aa, ba) = (rt.array(&a).unwrap(), rt.array(&b).unwrap());
        let closure = |c: &offload::Array<f32>| {
            m.closure(
                "matmul",
                [(n as i32).into(), (&aa).into(), (&ba).into(), c.into()],
            )
            .unwrap()
        };
        if warm {
            let c = rt.new_array::<f32>(n * n).unwrap();
            par_offload(0..(n * n) as i64, closure(&c)).unwrap();
            rt.finish_compiles();
        }
        let c = rt.new_array::<f32>(n * n).unwrap();
        let thrown = out_of_bounds(par_offload(range, closure(&c)));
        (thrown, rt.read(&c).unwrap())
    };
    let interp = interpreter(2);
    let big = i64::from(i32::MAX) - 5;
    let all = (n * n) as i64;
    for range in [0..all, 0..all - 3, 5..all + 9, -7..50, big..big + 12] {
        let (want_thrown, want) = run(&interp, range.clone(), false);
        for warm in [false, true] {
            let rt = cpu(2);
            let (thrown, got) = run(&rt, range.clone(), warm);
            assert_eq!(got, want, "{range:?}, warm {warm}");
            assert_eq!(thrown, want_thrown, "{range:?}, warm {warm}");
        }
    }
}

/// The n-body kick with an `i64` index, as the source language writes it:
/// each `px[b]` in the loop tests the index after the uniform `px[j]` was
/// loaded (a value carried into the block after the test), and
/// `vx[b] += ...` three times tests it again after the first store. Its
/// lockstep groups give the interpreter's results and exceptions.
#[test]
fn lockstep_groups_testing_an_i64_index_after_a_store_agree_with_the_interpreter() {
    let src =
        include_str!("../examples/kernels/nbody.ofk").replacen("    b: i32,", "    b: i64,", 1);
    let n = 40usize;
    let run = |rt: &Runtime, range: std::ops::Range<i64>, warm: bool| {
        let m = rt.load_source("nbody.ofk", &src).unwrap();
        // Positions, masses and velocities, fresh for each launch (the
        // kick updates the velocities).
        let bodies = || -> Vec<offload::Array<f32>> {
            (0..7)
                .map(|k| {
                    let v: Vec<f32> = (0..n)
                        .map(|i| ((i * (k + 3)) % 11) as f32 * 0.3 + 1.0)
                        .collect();
                    rt.array(&v).unwrap()
                })
                .collect()
        };
        let closure = |arrays: &[offload::Array<f32>]| {
            let mut args: Vec<offload::Arg> =
                vec![(n as i32).into(), 0.01f32.into(), 0.1f32.into()];
            args.extend(arrays.iter().map(offload::Arg::from));
            m.closure("nbody", args).unwrap()
        };
        if warm {
            par_offload(0..n as i64, closure(&bodies())).unwrap();
            rt.finish_compiles();
        }
        let arrays = bodies();
        let thrown = out_of_bounds(par_offload(range, closure(&arrays)));
        let v: Vec<Vec<f32>> = arrays[4..].iter().map(|a| rt.read(a).unwrap()).collect();
        (thrown, v)
    };
    let interp = interpreter(2);
    let big = i64::from(i32::MAX) - 5;
    for range in [0..n as i64, 3..n as i64 + 9, -7..20, big..big + 12] {
        let (want_thrown, want) = run(&interp, range.clone(), false);
        for warm in [false, true] {
            let rt = cpu(2);
            let (thrown, got) = run(&rt, range.clone(), warm);
            assert_eq!(got, want, "{range:?}, warm {warm}");
            assert_eq!(thrown, want_thrown, "{range:?}, warm {warm}");
        }
    }
}

/// Loops whose accesses the optimized tier checks once at entry
/// (`plan::loop_predicates`): where the check holds, where it fails because
/// an array is short, the start is negative, or the counter would wrap past
/// `i32::MAX`, the CPU device gives the interpreter's results and
/// exceptions (same workitems, same kinds).
#[test]
fn loops_checked_once_at_entry_agree_with_the_interpreter() {
    // out[row] = sum of a[row * m + k - k0] for k = k0, k0 + 2, ... < n.
    const ROWSUM: &str = "kernel rowsum(i: i64, n: i32, k0: i32, m: i32, a: i32[], out: i64[]) {
    local row: i32
    local k: i32
    local s: i64
    load i
    i64.to_i32
    store row
    i64.const 0
    store s
    load k0
    store k
  loop:
    load k
    load n
    i32.ge
    br_if done
    load s
    load a
    load row
    load m
    i32.mul
    load k
    i32.add
    load k0
    i32.sub
    i32.aload
    i32.to_i64
    i64.add
    store s
    inc k 2
    br loop
  done:
    load out
    load row
    load s
    i64.astore
    ret
}";
    let run = |rt: &Runtime, rows: usize, n: i32, k0: i32, m: i32, len: usize| {
        let module = rt.load("rowsum.obc", ROWSUM).unwrap();
        let a = rt.array(&(0..len as i32).collect::<Vec<i32>>()).unwrap();
        let out = rt.new_array::<i64>(rows).unwrap();
        let c = module
            .closure(
                "rowsum",
                [n.into(), k0.into(), m.into(), (&a).into(), (&out).into()],
            )
            .unwrap();
        let thrown = match par_offload(0..rows as i64, &c) {
            Ok(r) => {
                assert!(r.fallback.is_none(), "{:?}", r.fallback);
                (0, Vec::new(), Vec::new())
            }
            Err(OffloadError::Exceptions(e)) => {
                let mut kinds: Vec<_> = e.by_kind.iter().map(|(k, n)| (*k, *n)).collect();
                kinds.sort_by_key(|(k, _)| format!("{k:?}"));
                (e.count, e.workitems.clone(), kinds)
            }
            Err(e) => panic!("{e}"),
        };
        (thrown, rt.read(&out).unwrap())
    };
    let interp = interpreter(2);
    let optimized = optimized(2);
    let cases: [(usize, i32, i32, i32, usize, bool); 6] = [
        // rows, n, k0, m, a's length, whether some workitem throws
        (64, 40, 0, 40, 64 * 40, false),    // every row inside `a`
        (64, 40, 0, 40, 50 * 40 + 7, true), // rows past 50 run off its end
        (64, 40, -2, 40, 64 * 40, true),    // row 0 starts below 0
        (64, 40, 50, 40, 0, false),         // no iteration at all
        (64, 41, 1, 40, 64 * 40, false),    // odd bound, step 2
        // k = MAX-3, MAX-1, then wraps to MIN+1 < n: indices 0, 2, 4, then
        // 6 is out of bounds (the entry check must not pass).
        (1, i32::MAX, i32::MAX - 3, 0, 5, true),
    ];
    for (rows, n, k0, m, len, throws) in cases {
        let want = run(&interp, rows, n, k0, m, len);
        assert_eq!(
            want.0.0 > 0,
            throws,
            "case {rows} {n} {k0} {m} {len}: {want:?}"
        );
        let got = run(&optimized, rows, n, k0, m, len);
        assert_eq!(got, want, "case {rows} {n} {k0} {m} {len}");
    }
}

/// A straight-line kernel the optimized tier vectorizes: mixed uniform and
/// per-workitem operands, a stored uniform value, the workitem number kept
/// in a local, `f32` and `i32` lanes.
const MIX: &str = "kernel mix(i: i64, a: f32, m: i32, x: f32[], y: f32[], p: i32[], q: i32[]) {
local j: i32
load i
i64.to_i32
store j
load y
load j
load a
load x
load j
f32.aload
f32.mul
load y
load j
f32.aload
f32.sub
f32.const 0.5
f32.div
f32.astore
load p
load j
load q
load j
i32.aload
load m
i32.xor
load p
load j
i32.aload
i32.add
load m
i32.and
load q
load j
i32.aload
i32.or
i32.astore
load q
load j
load m
i32.astore
ret
}";

/// What [`MIX`] leaves: its exceptions (count, workitems), the four arrays
/// (floats as bits), whether the quick tier ran.
type Mixed = (
    (u64, Vec<i64>),
    Vec<u32>,
    Vec<u32>,
    Vec<i32>,
    Vec<i32>,
    bool,
);

/// [`MIX`] over `0..n` with arrays of `len` (its second pair of arrays the
/// first again when `same`): what it leaves, and its deopts by site.
fn run_mix(rt: &Runtime, n: usize, len: usize, same: bool) -> (Mixed, BTreeMap<u32, u64>) {
    let m = rt.load("mix.obc", MIX).unwrap();
    let x = rt
        .array(&(0..len).map(|v| v as f32 * 0.25 - 3.0).collect::<Vec<_>>())
        .unwrap();
    let y = rt
        .array(&(0..len).map(|v| (v % 7) as f32).collect::<Vec<_>>())
        .unwrap();
    let p = rt
        .array(&(0..len as i32).map(|v| v * 3 - 11).collect::<Vec<_>>())
        .unwrap();
    let q = rt
        .array(&(0..len as i32).map(|v| v ^ 0x55).collect::<Vec<_>>())
        .unwrap();
    let (ya, qa) = if same { (&x, &p) } else { (&y, &q) };
    let c = m
        .closure(
            "mix",
            [
                1.5f32.into(),
                0x0f0fi32.into(),
                (&x).into(),
                ya.into(),
                (&p).into(),
                qa.into(),
            ],
        )
        .unwrap();
    let (thrown, report) = match par_offload(0..n as i64, &c) {
        Ok(r) => ((0, Vec::new()), r),
        Err(OffloadError::Exceptions(e)) => ((e.count, e.workitems.clone()), e.report.clone()),
        Err(e) => panic!("{e}"),
    };
    let mut deopts = BTreeMap::new();
    for (&(site, _), &k) in &report.deopts {
        *deopts.entry(site).or_insert(0) += k;
    }
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    (
        (
            thrown,
            bits(rt.read(&x).unwrap()),
            bits(rt.read(&y).unwrap()),
            rt.read(&p).unwrap(),
            rt.read(&q).unwrap(),
            report.quick_tier,
        ),
        deopts,
    )
}

/// Straight-line 32-bit kernels run as SIMD bodies, a lane per workitem, in
/// the optimized tier's unchecked chunks (`plan::vectorizable`). Mixed
/// uniform and per-workitem operands, a stored uniform value, the workitem
/// number kept in a local, the same array passed twice (so that a lane's
/// load and store of one element alias), ranges with a scalar tail and
/// ranges that run past the arrays' end: all as on the interpreter.
#[test]
fn vectorized_groups_agree_with_the_interpreter() {
    let interp = interpreter(2);
    let optimized = optimized(2);
    for (n, len) in [
        (4096, 4096),
        (5000, 5003),
        (3001, 3001),
        (17, 17),
        (6000, 4100),
    ] {
        for same in [false, true] {
            let mut want = run_mix(&interp, n, len, same).0;
            let got = run_mix(&optimized, n, len, same).0;
            assert!(!got.5, "the optimized tier runs");
            want.5 = got.5;
            assert_eq!(got, want, "n {n}, len {len}, same {same}");
        }
    }
}

/// `q[j] = xor over v < live of (p[j] + 1 + v % constants)`: a body
/// holding `live` vector values at once beside `constants` uniform values
/// (the 256-bit loop keeps uniform values in registers of their own while
/// the body fits beside them, `jit/src/cpu/wide.rs`).
fn many_values(live: usize, constants: usize) -> String {
    let mut s = String::from(
        "kernel k(i: i64, p: i32[], q: i32[]) {\n    local j: i32\n    load i\n    i64.to_i32\n    store j\n    load q\n    load j\n",
    );
    for v in 0..live {
        s += &format!(
            "    load p\n    load j\n    i32.aload\n    i32.const {}\n    i32.add\n",
            1 + v % constants
        );
    }
    for _ in 1..live {
        s += "    i32.xor\n";
    }
    s + "    i32.astore\n    ret\n}"
}

/// SIMD groups whose bodies hold many values at once beside many uniform
/// values, with and without the uniform values kept in registers: as on
/// the interpreter.
#[test]
fn vectorized_groups_with_many_live_values_agree_with_the_interpreter() {
    let (interp, optimized) = (interpreter(2), optimized(2));
    for (live, constants) in [(4, 4), (9, 5), (9, 8), (9, 9), (12, 3)] {
        let src = many_values(live, constants);
        let run = |rt: &Runtime, n: usize| {
            let m = rt.load("many.obc", &src).unwrap();
            let p = rt
                .array(
                    &(0..n as i32)
                        .map(|v| v.wrapping_mul(0x9E37_79B9u32 as i32))
                        .collect::<Vec<_>>(),
                )
                .unwrap();
            let q = rt.new_array::<i32>(n).unwrap();
            let c = m.closure("k", [(&p).into(), (&q).into()]).unwrap();
            let r = par_offload(0..n as i64, &c).unwrap();
            (rt.read(&q).unwrap(), r.quick_tier)
        };
        for n in [4096, 5000] {
            let (want, _) = run(&interp, n);
            let (got, quick) = run(&optimized, n);
            assert!(!quick, "the optimized tier runs");
            let first = got.iter().zip(&want).position(|(g, w)| g != w);
            assert!(
                first.is_none(),
                "{live} values, {constants} constants, n {n}: workitem {first:?} differs"
            );
        }
    }
}

/// `q[j] = p[j] + c0 + c1 + … ` over `captures` captures: more uniform
/// values than vector registers (the 256-bit loop keeps them in the table
/// then, and once panicked picking registers for them).
#[test]
fn vectorized_groups_with_more_captures_than_registers_agree_with_the_interpreter() {
    let (interp, optimized) = (interpreter(2), optimized(2));
    for captures in [8usize, 16, 17, 40] {
        let params: Vec<String> = (0..captures).map(|c| format!("c{c}: i32")).collect();
        let mut src = format!(
            "kernel k(i: i64, p: i32[], q: i32[], {}) {{\n    local j: i32\n    load i\n    i64.to_i32\n    store j\n    load q\n    load j\n    load p\n    load j\n    i32.aload\n",
            params.join(", ")
        );
        for c in 0..captures {
            src += &format!("    load c{c}\n    i32.add\n");
        }
        src += "    i32.astore\n    ret\n}";
        let run = |rt: &Runtime, n: usize| {
            let m = rt.load("captures.obc", &src).unwrap();
            let p = rt.array(&(0..n as i32).collect::<Vec<_>>()).unwrap();
            let q = rt.new_array::<i32>(n).unwrap();
            let mut args: Vec<offload::Arg> = vec![(&p).into(), (&q).into()];
            args.extend((0..captures as i32).map(|c| (c * 7 - 3).into()));
            let c = m.closure("k", args).unwrap();
            let r = par_offload(0..n as i64, &c).unwrap();
            (rt.read(&q).unwrap(), r.quick_tier)
        };
        let (want, _) = run(&interp, 1000);
        let (got, quick) = run(&optimized, 1000);
        assert!(!quick, "the optimized tier runs");
        assert_eq!(got, want, "{captures} captures");
    }
}

/// Deopts injected at each site of a vectorized kernel: a SIMD group
/// (128- or 256-bit) stops short of a chosen workitem, which runs the
/// scalar body and deopts at the site; the groups around it stay
/// vectorized. Every chosen workitem deopts there once, and the arrays end
/// as on the interpreter, with tails, aliased arrays and chosen workitems
/// at a group's first and last lane and inside the wide loop's groups.
#[test]
fn injected_deopts_inside_vectorized_groups_agree_with_the_interpreter() {
    let interp = interpreter(2);
    let mut exercised = 0;
    for site_bci in 0..40u32 {
        for (modulus, remainder, n, same) in [
            (64i64, 0i64, 4096usize, false),
            (64, 63, 5000, true),
            (9, 5, 3001, false),
            // Claims of 1,024 workitems: the wide loop's runs of groups
            // meet chosen workitems.
            (1000, 999, 1 << 16, false),
            (777, 3, 1 << 16, true),
        ] {
            let rt = injected(
                2,
                Injection {
                    site_bci,
                    modulus,
                    remainder,
                    reason: None,
                },
            );
            // Not a deopt site: the kernel does not compile with it.
            let Ok(ir) = rt.load("mix.obc", MIX).and_then(|m| m.cranelift_ir("mix")) else {
                continue;
            };
            assert!(ir.contains("f32x4"), "site {site_bci}: no SIMD group");
            let (got, deopts) = run_mix(&rt, n, n, same);
            let (mut want, _) = run_mix(&interp, n, n, same);
            want.5 = got.5;
            assert_eq!(got, want, "site {site_bci} {modulus}/{remainder} n {n}");
            // A straight line: every workitem passes every site once.
            let chosen = (0..n as i64).filter(|w| w % modulus == remainder).count();
            assert_eq!(
                deopts.get(&site_bci).copied().unwrap_or(0),
                chosen as u64,
                "site {site_bci} {modulus}/{remainder} n {n}: deopts {deopts:?}"
            );
            exercised += 1;
        }
    }
    assert!(exercised >= 20, "only {exercised} injections compiled");
}

/// Safepoints while vectorized groups run (256-bit groups
/// on a host with AVX2, `jit/src/cpu/wide.rs`, else 128-bit ones): a slot
/// stops at the poll before a group, nothing moves during the safepoint,
/// and every workitem of every launch runs exactly once.
#[test]
fn safepoints_inside_vectorized_groups_lose_nothing() {
    const INC: &str = "kernel inc(i: i64, c: i32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load c
    load j
    load c
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}";
    const N: usize = 1 << 22;
    // At least this many launches, and more until safepoints came during
    // some (the requester thread may not run for a while on a busy
    // machine), up to the most.
    const LAUNCHES: i32 = 24;
    const MOST: i32 = 400;
    let rt = optimized(2);
    let m = rt.load("inc.obc", INC).unwrap();
    let counts = rt.new_array::<i32>(N).unwrap();
    let c = m.closure("inc", [(&counts).into()]).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (during, launches, still) = std::thread::scope(|s| {
        let requester = s.spawn(|| {
            let mut still = true;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let ((before, after), _) = rt.safepoint(|_heap| {
                    let before = rt.read(&counts).unwrap();
                    std::thread::sleep(std::time::Duration::from_micros(300));
                    (before, rt.read(&counts).unwrap())
                });
                still &= before == after;
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            still
        });
        let (mut during, mut launches) = (0, 0);
        while launches < LAUNCHES || (during == 0 && launches < MOST) {
            let report = par_offload(0..N as i64, &c).unwrap();
            assert!(!report.quick_tier);
            during += report.safepoints;
            launches += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Release);
        (during, launches, requester.join().unwrap())
    });
    assert!(still, "a slot ran during a safepoint");
    assert!(
        during > 0,
        "no safepoint came while {launches} launches ran"
    );
    assert!(
        rt.read(&counts).unwrap().iter().all(|&n| n == launches),
        "every workitem once per launch"
    );
}
