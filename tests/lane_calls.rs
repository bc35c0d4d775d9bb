//! Calls of lane functions inside lockstep groups on the CPU device
//! (`jit/src/cpu/opt/lane_call.rs`, `jit/src/cpu/lane_call.rs`): a called
//! function's branches become selects over the group's four lanes, and its
//! `exp` and `log` run on all four at once (libm's steps on vectors).
//! Against the interpreter, bit for bit, on inputs that send lanes down every path and
//! into the special ranges of `exp` and `log` (NaN, infinities, zeros,
//! negatives, subnormal and overflowing results), with ranges that end in
//! a partial group, and exactly once under deopts injected at every site.

use offload::{Runtime, par_offload};
use offload_jit::Injection;

#[path = "common/runtimes.rs"]
mod runtimes;

use runtimes::{injected, interpreter, optimized};

fn examples() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/examples/kernels").to_string()
}

/// Spot, strike and years for `n` options: ordinary ones, and every
/// `7`th with a special value in one of the three (NaN, ±infinity, ±0,
/// negative, tiny and huge), so that some lanes of most groups leave the
/// common ranges of `exp` and `log`.
fn options(n: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let special = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -3.0,
        1e-30,
        1e30,
        f32::MIN_POSITIVE / 4.0,
    ];
    let (mut s, mut x, mut t) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let f = i as f32;
        s.push(10.0 + (f * 7.3) % 90.0);
        x.push(10.0 + (f * 3.1) % 90.0);
        t.push(0.01 + (f * 0.37) % 2.0);
        if i % 7 == 3 {
            let v = special[(i / 7) % special.len()];
            match (i / 7) % 3 {
                0 => s[i] = v,
                1 => x[i] = v,
                _ => t[i] = v,
            }
        }
    }
    (s, x, t)
}

/// Call and put prices of `n` options from `file` on `rt` over `range`,
/// as bits.
fn prices(rt: &Runtime, file: &str, n: usize, range: std::ops::Range<i64>) -> Vec<u32> {
    prices_and_report(rt, file, n, range).0
}

/// [`prices`], and the launch's report.
fn prices_and_report(
    rt: &Runtime,
    file: &str,
    n: usize,
    range: std::ops::Range<i64>,
) -> (Vec<u32>, offload::LaunchReport) {
    let m = rt.load_file(format!("{}/{file}", examples())).unwrap();
    let (s, x, t) = options(n);
    let (sa, xa, ta) = (
        rt.array(&s).unwrap(),
        rt.array(&x).unwrap(),
        rt.array(&t).unwrap(),
    );
    let (call, put) = (
        rt.new_array::<f32>(n).unwrap(),
        rt.new_array::<f32>(n).unwrap(),
    );
    let c = m
        .closure(
            "blackscholes",
            [
                0.02f32.into(),
                0.3f32.into(),
                (&sa).into(),
                (&xa).into(),
                (&ta).into(),
                (&call).into(),
                (&put).into(),
            ],
        )
        .unwrap();
    let r = par_offload(range, &c).unwrap();
    assert!(r.fallback.is_none(), "{r}");
    let mut bits: Vec<u32> = rt
        .read(&call)
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect();
    bits.extend(rt.read(&put).unwrap().into_iter().map(f32::to_bits));
    (bits, r)
}

#[test]
fn blackscholes_runs_in_lockstep_from_bytecode_and_source_bit_for_bit() {
    let (interp, cpu) = (interpreter(2), optimized(2));
    for file in ["blackscholes.obc", "blackscholes.ofk"] {
        let m = cpu.load_file(format!("{}/{file}", examples())).unwrap();
        let clif = m.cranelift_ir("blackscholes").unwrap();
        assert!(
            clif.contains("bitselect") && clif.contains("f32x4"),
            "{file}: cnd is not inlined on lanes:\n{clif}"
        );
        for (n, range) in [
            (4099usize, 0..4099i64),
            (1000, 3..998),
            (5, 0..5),
            (3, 0..3),
        ] {
            let want = prices(&interp, file, n, range.clone());
            let got = prices(&cpu, file, n, range.clone());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g == w || (f32::from_bits(*g).is_nan() && f32::from_bits(*w).is_nan()),
                    "{file} {range:?}: element {i}: {:e} against the interpreter's {:e}",
                    f32::from_bits(*g),
                    f32::from_bits(*w)
                );
            }
        }
    }
}

/// A lane function with nested branches, value-producing `if`s, locals
/// merged where paths join, `i32` comparisons and `inc`, called twice a
/// workitem.
const SHAPES: &str = "
func shape(x: f32, n: i32) -> f32 {
    local y: f32
    local m: i32
    load n
    store m
    load x
    f32.const 0.0
    f32.lt
    br_unless nonneg
    load x
    f32.neg
    f32.log
    store y
    inc m 3
    br join
  nonneg:
    load n
    i32.const 2
    i32.gt
    br_if big
    load x
    f32.sqrt
    store y
    br join
  big:
    load x
    f32.const 0.5
    f32.mul
    f32.exp
    store y
    inc m -1
  join:
    load m
    i32.const 4
    i32.lt
    br_unless last
    load y
    load m
    i32.to_f32
    f32.add
    ret
  last:
    load y
    f32.abs
    ret
}

kernel shapes(i: i64, a: f32[], k: i32[], out: f32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load out
    load j
    load a
    load j
    f32.aload
    load k
    load j
    i32.aload
    call shape
    load a
    load j
    f32.aload
    f32.const 2.0
    f32.mul
    i32.const 1
    call shape
    f32.sub
    f32.astore
    ret
}
";

#[test]
fn nested_branches_and_joins_of_a_lane_function_agree_with_the_interpreter() {
    let n = 1031usize;
    let a: Vec<f32> = (0..n)
        .map(|i| match i % 11 {
            0 => f32::NAN,
            1 => -0.0,
            2 => 100.0,
            3 => -1e-40,
            _ => (i as f32 - 500.0) * 0.37,
        })
        .collect();
    let k: Vec<i32> = (0..n).map(|i| (i as i32 * 7) % 6).collect();
    let run = |rt: &Runtime| {
        let m = rt.load("shapes.obc", SHAPES).unwrap();
        let (aa, ka, out) = (
            rt.array(&a).unwrap(),
            rt.array(&k).unwrap(),
            rt.new_array::<f32>(n).unwrap(),
        );
        let c = m
            .closure("shapes", [(&aa).into(), (&ka).into(), (&out).into()])
            .unwrap();
        par_offload(0..n as i64, &c).unwrap();
        let got: Vec<u32> = rt
            .read(&out)
            .unwrap()
            .into_iter()
            .map(f32::to_bits)
            .collect();
        (got, m)
    };
    let (want, _) = run(&interpreter(2));
    let (got, m) = run(&optimized(2));
    assert!(m.cranelift_ir("shapes").unwrap().contains("bitselect"));
    assert_eq!(got, want);
}

#[test]
fn injected_deopts_in_a_kernel_calling_lane_functions_run_each_workitem_once() {
    let n = 2003usize;
    let want = prices(&interpreter(2), "blackscholes.obc", n, 0..n as i64);
    let mut exercised = 0;
    for site_bci in 0..80u32 {
        let rt = injected(
            2,
            Injection {
                site_bci,
                modulus: 5,
                remainder: 2,
                reason: None,
            },
        );
        let m = rt
            .load_file(format!("{}/blackscholes.obc", examples()))
            .unwrap();
        // Not a deopt site of the kernel: it does not compile with it.
        if m.cranelift_ir("blackscholes").is_err() {
            continue;
        }
        let (got, r) = prices_and_report(&rt, "blackscholes.obc", n, 0..n as i64);
        assert_eq!(got, want, "site {site_bci}\n{r}");
        assert_eq!(r.completed, n as u64, "site {site_bci}\n{r}");
        // Every chosen workitem deopted at the site, once.
        let at: u64 = r
            .deopts
            .iter()
            .filter(|&(&(s, _), _)| s == site_bci)
            .map(|(_, &k)| k)
            .sum();
        if at > 0 {
            let chosen = (0..n).filter(|w| w % 5 == 2).count() as u64;
            assert_eq!(at, chosen, "site {site_bci}\n{r}");
            exercised += 1;
        }
    }
    assert!(exercised >= 3, "only {exercised} sites injected");
}

/// `e[j] = exp(a[j])`, `l[j] = log(a[j])`: lockstep groups with `exp` and
/// `log` inline.
const EXPLOG: &str = "kernel explog(i: i64, a: f32[], e: f32[], l: f32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load e
    load j
    load a
    load j
    f32.aload
    f32.exp
    f32.astore
    load l
    load j
    load a
    load j
    f32.aload
    f32.log
    f32.astore
    ret
}";

#[test]
fn exp_and_log_of_lanes_are_libms_bit_for_bit_over_a_wide_sample() {
    // About a million bit patterns spread over every sign and exponent,
    // neighbours in a group mixing common and special ranges.
    let mut a: Vec<f32> = (0..(1u64 << 32))
        .step_by(4093)
        .map(|b| f32::from_bits(b as u32))
        .collect();
    // And 256 inputs around each edge of `expf`'s and `logf`'s common
    // ranges and of `expf`'s argument reduction (`jit/src/cpu/vmath.rs`), with
    // both signs, and where `expf` overflows and stops underflowing.
    for edge in [
        0x3900_0000u32,
        0x42ae_ac50,
        0x3eb1_7218,
        0x3f85_1592,
        0x0080_0000,
        0x7f80_0000,
        0x3f80_0000,
        0x3f35_04f3,
        0x42b1_7218,
        0x42cf_f1b5,
    ] {
        for d in 0..256u32 {
            for sign in [0, 0x8000_0000] {
                a.push(f32::from_bits(
                    edge.wrapping_add(d).wrapping_sub(128) | sign,
                ));
            }
        }
    }
    explog_agrees(&optimized(2), &a);
}

/// Every `f32`, 2^22 at a time (minutes).
#[test]
#[ignore = "exhaustive: run with --ignored"]
fn exp_and_log_of_lanes_are_libms_bit_for_bit_for_every_input() {
    let rt = optimized(2);
    for batch in 0..1024u64 {
        let a: Vec<f32> = (batch << 22..(batch + 1) << 22)
            .map(|b| f32::from_bits(b as u32))
            .collect();
        explog_agrees(&rt, &a);
    }
}

/// `explog` over `a` on `rt` gives libm's bits (any NaN for a NaN).
fn explog_agrees(rt: &Runtime, a: &[f32]) {
    let m = rt.load("explog.obc", EXPLOG).unwrap();
    let clif = m.cranelift_ir("explog").unwrap();
    assert!(
        clif.contains("vall_true") && clif.contains("load.f32x4"),
        "exp and log are not inline on lanes:\n{clif}"
    );
    let (aa, e, l) = (
        rt.array(a).unwrap(),
        rt.new_array::<f32>(a.len()).unwrap(),
        rt.new_array::<f32>(a.len()).unwrap(),
    );
    let c = m
        .closure("explog", [(&aa).into(), (&e).into(), (&l).into()])
        .unwrap();
    par_offload(0..a.len() as i64, &c).unwrap();
    let same = |x: f32, y: f32| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
    let (e, l) = (rt.read(&e).unwrap(), rt.read(&l).unwrap());
    for (i, &x) in a.iter().enumerate() {
        let (we, wl) = (
            offload::ir::semantics::f32_exp(x),
            offload::ir::semantics::f32_log(x),
        );
        assert!(same(e[i], we), "exp({x:e}) = {:e}, libm {we:e}", e[i]);
        assert!(same(l[i], wl), "log({x:e}) = {:e}, libm {wl:e}", l[i]);
    }
}

/// Kernels calling `g` (an `exp` inside) with the same argument once, twice
/// and after the argument changed: the second call with the same argument
/// reuses the first's result (no second fallback call in the code), and
/// every result is the interpreter's, bit for bit.
const TWICE: &str = "
fn g(d: f32) -> f32 {
    let e = (d * d * -0.5).exp();
    if d < 0.0 { 1.0 - e } else { e }
}

#[kernel]
fn once(i: i32, a: &[f32], out: &mut [f32]) {
    let d = a[i];
    out[i] = g(d) * 2.0;
}

#[kernel]
fn twice(i: i32, a: &[f32], out: &mut [f32]) {
    let d = a[i];
    out[i] = g(d) + g(d);
}

#[kernel]
fn changed(i: i32, a: &[f32], out: &mut [f32]) {
    let mut d = a[i];
    let x = g(d);
    d = d + 1.0;
    out[i] = x + g(d);
}
";

#[test]
fn a_lane_call_repeated_with_the_same_arguments_is_made_once() {
    let n = 1029usize;
    let a: Vec<f32> = (0..n)
        .map(|i| match i % 13 {
            0 => f32::NAN,
            1 => 20.0,
            2 => -1e-5,
            _ => (i as f32 - 500.0) * 0.01,
        })
        .collect();
    let run = |rt: &Runtime| {
        let m = rt.load_source("twice.ofk", TWICE).unwrap();
        let mut outs = Vec::new();
        for k in ["once", "twice", "changed"] {
            let (aa, out) = (rt.array(&a).unwrap(), rt.new_array::<f32>(n).unwrap());
            let c = m.closure(k, [(&aa).into(), (&out).into()]).unwrap();
            par_offload(0..n as i64, &c).unwrap();
            outs.push(
                rt.read(&out)
                    .unwrap()
                    .into_iter()
                    .map(f32::to_bits)
                    .collect::<Vec<u32>>(),
            );
        }
        (outs, m)
    };
    let (want, _) = run(&interpreter(2));
    let (got, m) = run(&optimized(2));
    assert_eq!(got, want);
    // Calls of the out-of-line `exp` of four lanes: each passes its
    // lanes through a stack slot (scalar code calls libm directly).
    let calls = |k: &str| {
        let clif = m.cranelift_ir(k).unwrap();
        assert!(
            clif.contains("vall_true"),
            "{k}: g is not on lanes:\n{clif}"
        );
        clif.matches("stack_addr").count()
    };
    assert_eq!(
        calls("twice"),
        calls("once"),
        "the second g(d) made a call of its own"
    );
    assert!(calls("changed") > calls("once"), "g(d + 1) is another call");
}
