//! Each instruction kind the simulator executes, run as PTX against a Rust
//! reference, bit for bit, over edge values: zero of both signs, ±1, the
//! extremes of each width, NaN, infinities, subnormals, shift counts at and
//! past the width, and values that saturate when converted.

use offload_vgpu::{call, parse};

/// Runs `body` (PTX using `%a`, `%b`, `%c` of type `ty` and writing `%d`
/// of type `dty`) on the arguments.
fn run(dty: &str, ty: &str, body: &str, args: &[u64]) -> u64 {
    let params: Vec<String> = ["a", "b", "c"][..args.len()]
        .iter()
        .map(|n| format!(".reg .{ty} %{n}"))
        .collect();
    let text = format!(
        ".version 6.3\n.target sm_70\n.address_size 64\n\
         .func (.reg .{dty} %d) f ({})\n{{\n\t.reg .pred %p, %q;\n\t{body}\n\tret;\n}}\n",
        params.join(", ")
    );
    let m = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    call(&m, "f", args).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

const I32: [i32; 12] = [
    0,
    1,
    -1,
    2,
    -2,
    7,
    -7,
    0x7fff_ffff,
    i32::MIN,
    0x1234_5678,
    -0x1234_5678,
    31,
];
const I64: [i64; 12] = [
    0,
    1,
    -1,
    2,
    -3,
    63,
    64,
    i64::MAX,
    i64::MIN,
    0x1234_5678_9abc_def0,
    -0x1234_5678_9abc_def0,
    0xffff_ffff,
];

fn f32s() -> Vec<f32> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        -2.5,
        3.0e38,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40, // subnormal
        -1e-45,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        2.5,
        -0.5,
        16_777_217.0,
        2.147_483_6e9,
        -2.147_483_6e9,
        4.294_967_3e9,
    ]
}

fn f64s() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.1,
        -2.5,
        1e308,
        f64::MAX,
        f64::MIN_POSITIVE,
        1e-310, // subnormal
        -5e-324,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        2.5,
        3.5,
        -0.5,
        2_147_483_647.5,
        -2_147_483_648.7,
        9.3e18,
        -9.3e18,
        1.8e19,
        3.4e38,
        3.5e38,
        1.000_000_000_000_000_2,
    ]
}

fn same32(a: u64, b: f32) -> bool {
    let a = f32::from_bits(a as u32);
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn same64(a: u64, b: f64) -> bool {
    let a = f64::from_bits(a);
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn integer_arithmetic_wraps_at_its_width() {
    for &a in &I32 {
        for &b in &I32 {
            let (ua, ub) = (u64::from(a as u32), u64::from(b as u32));
            let r = |op: &str, ty: &str| {
                run(ty, ty, &format!("{op}.{ty} %d, %a, %b;"), &[ua, ub]) as u32
            };
            assert_eq!(r("add", "s32"), a.wrapping_add(b) as u32);
            assert_eq!(r("sub", "s32"), a.wrapping_sub(b) as u32);
            assert_eq!(r("mul.lo", "s32"), a.wrapping_mul(b) as u32);
            assert_eq!(
                r("mul.hi", "s32"),
                ((i64::from(a) * i64::from(b)) >> 32) as u32
            );
            assert_eq!(
                r("mul.hi", "u32"),
                ((u64::from(a as u32) * u64::from(b as u32)) >> 32) as u32
            );
            assert_eq!(r("min", "s32"), a.min(b) as u32);
            assert_eq!(r("max", "u32"), (a as u32).max(b as u32));
            if b != 0 {
                assert_eq!(r("div", "s32"), a.wrapping_div(b) as u32, "{a} / {b}");
                assert_eq!(r("rem", "s32"), a.wrapping_rem(b) as u32, "{a} % {b}");
                assert_eq!(r("div", "u32"), (a as u32) / (b as u32));
                assert_eq!(r("rem", "u32"), (a as u32) % (b as u32));
            }
            let wide = run("s64", "s32", "mul.wide.s32 %d, %a, %b;", &[ua, ub]);
            assert_eq!(wide as i64, i64::from(a) * i64::from(b));
            let wide = run("u64", "u32", "mul.wide.u32 %d, %a, %b;", &[ua, ub]);
            assert_eq!(wide, u64::from(a as u32) * u64::from(b as u32));
            let mad = run("s32", "s32", "mad.lo.s32 %d, %a, %b, %c;", &[ua, ub, 5]) as u32;
            assert_eq!(mad, a.wrapping_mul(b).wrapping_add(5) as u32);
        }
    }
    for &a in &I64 {
        for &b in &I64 {
            let r = |op: &str, ty: &str| {
                run(
                    ty,
                    ty,
                    &format!("{op}.{ty} %d, %a, %b;"),
                    &[a as u64, b as u64],
                )
            };
            assert_eq!(r("add", "s64"), a.wrapping_add(b) as u64);
            assert_eq!(r("sub", "u64"), (a as u64).wrapping_sub(b as u64));
            assert_eq!(r("mul.lo", "u64"), (a as u64).wrapping_mul(b as u64));
            assert_eq!(
                r("mul.hi", "s64"),
                ((i128::from(a) * i128::from(b)) >> 64) as u64
            );
            assert_eq!(r("min", "s64"), a.min(b) as u64);
            assert_eq!(r("max", "u64"), (a as u64).max(b as u64));
            if b != 0 {
                assert_eq!(r("div", "s64"), a.wrapping_div(b) as u64);
                assert_eq!(r("rem", "s64"), a.wrapping_rem(b) as u64);
                assert_eq!(r("div", "u64"), (a as u64) / (b as u64));
            }
        }
        let un = |op: &str, ty: &str| run(ty, ty, &format!("{op}.{ty} %d, %a;"), &[a as u64]);
        assert_eq!(un("neg", "s64"), a.wrapping_neg() as u64);
        assert_eq!(un("abs", "s64"), a.wrapping_abs() as u64);
        assert_eq!(un("not", "b64"), !(a as u64));
        assert_eq!(un("brev", "b64"), (a as u64).reverse_bits());
        let clz = run("u32", "b64", "clz.b64 %d, %a;", &[a as u64]);
        assert_eq!(clz, u64::from(a.leading_zeros()));
        let popc = run("u32", "b64", "popc.b64 %d, %a;", &[a as u64]);
        assert_eq!(popc, u64::from(a.count_ones()));
        let clz = run("u32", "b32", "clz.b32 %d, %a;", &[a as u32 as u64]);
        assert_eq!(clz, u64::from((a as u32).leading_zeros()));
    }
}

#[test]
fn shifts_clamp_counts_at_the_width() {
    for &a in &I64 {
        for n in [0u64, 1, 5, 31, 32, 33, 63, 64, 65, 200, u64::from(u32::MAX)] {
            let shl = run("b64", "b64", "shl.b64 %d, %a, %b;", &[a as u64, n]);
            let want = if n >= 64 { 0 } else { (a as u64) << n };
            assert_eq!(shl, want, "{a} << {n}");
            let shr = run("u64", "u64", "shr.u64 %d, %a, %b;", &[a as u64, n]);
            let want = if n >= 64 { 0 } else { (a as u64) >> n };
            assert_eq!(shr, want, "{a} >>u {n}");
            let sar = run("s64", "s64", "shr.s64 %d, %a, %b;", &[a as u64, n]);
            assert_eq!(sar as i64, a >> n.min(63), "{a} >>s {n}");
            let a32 = a as i32;
            let shl = run(
                "b32",
                "b32",
                "shl.b32 %d, %a, %b;",
                &[u64::from(a32 as u32), n],
            ) as u32;
            assert_eq!(shl, if n >= 32 { 0 } else { (a32 as u32) << n });
            let sar = run(
                "s32",
                "s32",
                "shr.s32 %d, %a, %b;",
                &[u64::from(a32 as u32), n],
            ) as u32;
            assert_eq!(sar as i32, a32 >> n.min(31));
        }
    }
}

/// PTX's float `min`/`max`: a NaN operand yields the other, two NaNs a
/// NaN, and −0 orders below +0.
fn ptx_minmax(x: f32, y: f32, max: bool) -> f32 {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => f32::NAN,
        (true, false) => y,
        (false, true) => x,
        // Equal values differ at most in the sign of zero.
        _ if x == y => {
            if x.is_sign_negative() != max {
                x
            } else {
                y
            }
        }
        _ if max => x.max(y),
        _ => x.min(y),
    }
}

#[test]
fn float_arithmetic_rounds_to_nearest_and_keeps_subnormals() {
    for &x in &f32s() {
        for &y in &f32s() {
            let a = [u64::from(x.to_bits()), u64::from(y.to_bits())];
            let r = |op: &str| run("f32", "f32", &format!("{op}.f32 %d, %a, %b;"), &a);
            assert!(same32(r("add.rn"), x + y), "{x} + {y}");
            assert!(same32(r("sub.rn"), x - y), "{x} - {y}");
            assert!(same32(r("mul.rn"), x * y), "{x} * {y}");
            assert!(same32(r("div.rn"), x / y), "{x} / {y}");
            let fma = run(
                "f32",
                "f32",
                "fma.rn.f32 %d, %a, %b, %c;",
                &[a[0], a[1], a[0]],
            );
            assert!(same32(fma, x.mul_add(y, x)), "fma({x}, {y}, {x})");
            assert!(same32(r("min"), ptx_minmax(x, y, false)), "min({x}, {y})");
            assert!(same32(r("max"), ptx_minmax(x, y, true)), "max({x}, {y})");
        }
        let a = [u64::from(x.to_bits())];
        assert!(same32(
            run("f32", "f32", "sqrt.rn.f32 %d, %a;", &a),
            x.sqrt()
        ));
        assert_eq!(
            run("f32", "f32", "neg.f32 %d, %a;", &a) as u32,
            (-x).to_bits()
        );
        assert_eq!(
            run("f32", "f32", "abs.f32 %d, %a;", &a) as u32,
            x.abs().to_bits()
        );
    }
    for &x in &f64s() {
        for &y in &f64s() {
            let a = [x.to_bits(), y.to_bits()];
            let r = |op: &str| run("f64", "f64", &format!("{op}.f64 %d, %a, %b;"), &a);
            assert!(same64(r("add.rn"), x + y), "{x} + {y}");
            assert!(same64(r("sub.rn"), x - y), "{x} - {y}");
            assert!(same64(r("mul.rn"), x * y), "{x} * {y}");
            assert!(same64(r("div.rn"), x / y), "{x} / {y}");
            let fma = run(
                "f64",
                "f64",
                "fma.rn.f64 %d, %a, %b, %c;",
                &[a[0], a[1], a[1]],
            );
            assert!(same64(fma, x.mul_add(y, y)), "fma({x}, {y}, {y})");
            let cs = run("f64", "f64", "copysign.f64 %d, %a, %b;", &a);
            assert_eq!(cs, y.copysign(x).to_bits(), "copysign({x}, {y})");
        }
        assert!(same64(
            run("f64", "f64", "sqrt.rn.f64 %d, %a;", &[x.to_bits()]),
            x.sqrt()
        ));
    }
}

#[test]
fn comparisons_are_ordered_or_unordered_and_combine() {
    use std::cmp::Ordering::*;
    type Want = fn(Option<std::cmp::Ordering>) -> bool;
    let cmps: [(&str, Want); 14] = [
        ("eq", |o| o == Some(Equal)),
        ("ne", |o| matches!(o, Some(Less | Greater))),
        ("lt", |o| o == Some(Less)),
        ("le", |o| matches!(o, Some(Less | Equal))),
        ("gt", |o| o == Some(Greater)),
        ("ge", |o| matches!(o, Some(Greater | Equal))),
        ("equ", |o| matches!(o, None | Some(Equal))),
        ("neu", |o| o != Some(Equal)),
        ("ltu", |o| matches!(o, None | Some(Less))),
        ("leu", |o| o != Some(Greater)),
        ("gtu", |o| matches!(o, None | Some(Greater))),
        ("geu", |o| o != Some(Less)),
        ("num", |o| o.is_some()),
        ("nan", |o| o.is_none()),
    ];
    for &x in &f64s() {
        for &y in &f64s() {
            for (name, want) in cmps {
                let body = format!("setp.{name}.f64 %p, %a, %b;\n\tselp.u32 %d, 1, 0, %p;");
                let got = run("u32", "f64", &body, &[x.to_bits(), y.to_bits()]);
                assert_eq!(got == 1, want(x.partial_cmp(&y)), "setp.{name} {x} {y}");
            }
        }
    }
    for &a in &I32 {
        for &b in &I32 {
            let args = [u64::from(a as u32), u64::from(b as u32)];
            let test = |cmp: &str, ty: &str| {
                let body = format!("setp.{cmp}.{ty} %p, %a, %b;\n\tselp.u32 %d, 1, 0, %p;");
                run("u32", ty, &body, &args) == 1
            };
            assert_eq!(test("lt", "s32"), a < b);
            assert_eq!(test("lt", "u32"), (a as u32) < (b as u32));
            assert_eq!(test("lo", "u32"), (a as u32) < (b as u32));
            assert_eq!(test("hs", "u32"), (a as u32) >= (b as u32));
            assert_eq!(test("ge", "s32"), a >= b);
            // `.and`/`.or` with a third, possibly negated, predicate; the
            // second destination gets the complement combined the same way.
            let body = "setp.gt.s32 %q, %a, 0;\n\tsetp.lt.and.s32 %p, %a, %b, !%q;\n\tselp.u32 %d, 1, 0, %p;";
            assert_eq!(run("u32", "s32", body, &args) == 1, a < b && a <= 0);
            let body = "setp.gt.s32 %q, %a, 0;\n\tsetp.lt.or.s32 %p|%q, %a, %b, %q;\n\tselp.u32 %d, 1, 0, %q;";
            assert_eq!(run("u32", "s32", body, &args) == 1, a >= b || a > 0);
        }
    }
}

#[test]
fn float_to_integer_conversions_round_saturate_and_zero_nans() {
    // NaN (PTX ISA, `cvt`; what an H100 does): 0 when the source is not
    // `.f64` and the destination not 64 bits wide, else `1 << (bits - 1)`.
    let nan = |x: f64, v: i64, bits: u32| {
        if x.is_nan() {
            (1u64 << (bits - 1)) as i64
        } else {
            v
        }
    };
    for &x in &f64s() {
        let a = [x.to_bits()];
        let r = |q: &str| run("s32", "f64", &format!("cvt.{q}.s32.f64 %d, %a;"), &a) as u32 as i32;
        // Rust's `as` is truncation with saturation and NaN → 0: `.rzi`.
        let r32 = |v: i32| nan(x, i64::from(v), 32) as i32;
        assert_eq!(r("rzi"), r32(x as i32), "rzi {x}");
        assert_eq!(r("rni"), r32(x.round_ties_even() as i32), "rni {x}");
        assert_eq!(r("rmi"), r32(x.floor() as i32), "rmi {x}");
        assert_eq!(r("rpi"), r32(x.ceil() as i32), "rpi {x}");
        let u = run("u32", "f64", "cvt.rzi.u32.f64 %d, %a;", &a) as u32;
        assert_eq!(u, nan(x, i64::from(x as u32), 32) as u32, "rzi.u32 {x}");
        let l = run("s64", "f64", "cvt.rzi.s64.f64 %d, %a;", &a) as i64;
        assert_eq!(l, nan(x, x as i64, 64), "rzi.s64 {x}");
        let ul = run("u64", "f64", "cvt.rni.u64.f64 %d, %a;", &a);
        assert_eq!(
            ul,
            nan(x, x.round_ties_even() as u64 as i64, 64) as u64,
            "rni.u64 {x}"
        );
        let s8 = run("s32", "f64", "cvt.rzi.s8.f64 %d, %a;", &a) as u8;
        assert_eq!(s8 as i8, nan(x, i64::from(x as i8), 8) as i8, "rzi.s8 {x}");
    }
    for &x in &f32s() {
        let a = [u64::from(x.to_bits())];
        let r = run("s64", "f32", "cvt.rzi.s64.f32 %d, %a;", &a) as i64;
        assert_eq!(r, nan(f64::from(x), x as i64, 64), "f32 rzi {x}");
        let r = run("s32", "f32", "cvt.rzi.s32.f32 %d, %a;", &a) as u32 as i32;
        assert_eq!(r, x as i32, "f32 rzi.s32 {x}");
        let fl = run("f32", "f32", "cvt.rmi.f32.f32 %d, %a;", &a);
        assert!(same32(fl, x.floor()), "floor {x}");
        let ce = run("f32", "f32", "cvt.rpi.f32.f32 %d, %a;", &a);
        assert!(same32(ce, x.ceil()), "ceil {x}");
        let sat = run("f32", "f32", "cvt.sat.f32.f32 %d, %a;", &a);
        let want = if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) };
        assert!(same32(sat, want), "sat {x}");
    }
}

/// The f32 nearest `x` in direction `m` (`"rn"`, `"rz"`, `"rm"`, `"rp"`),
/// chosen among the three candidates around Rust's round-to-nearest.
fn directed(x: f64, m: &str) -> f32 {
    let n = x as f32;
    if x.is_nan() || f64::from(n) == x {
        return n;
    }
    let cands = [n.next_down(), n, n.next_up()];
    let below = cands
        .iter()
        .copied()
        .filter(|c| f64::from(*c) <= x)
        .fold(f32::NEG_INFINITY, f32::max);
    let above = cands
        .iter()
        .copied()
        .filter(|c| f64::from(*c) >= x)
        .fold(f32::INFINITY, f32::min);
    match m {
        "rn" => n,
        "rm" => below,
        "rp" => above,
        _ => {
            if x > 0.0 {
                below
            } else {
                above
            }
        }
    }
}

/// The f32 nearest the integer `v` in direction `m`, compared exactly.
fn directed_int(v: i64, m: &str) -> f32 {
    let n = v as f32;
    let exact = |f: f32| f as i128;
    if exact(n) == i128::from(v) {
        return n;
    }
    let cands = [n.next_down(), n, n.next_up()];
    let below = cands
        .iter()
        .copied()
        .filter(|&c| exact(c) <= i128::from(v))
        .fold(f32::NEG_INFINITY, f32::max);
    let above = cands
        .iter()
        .copied()
        .filter(|&c| exact(c) >= i128::from(v))
        .fold(f32::INFINITY, f32::min);
    match m {
        "rm" => below,
        "rp" => above,
        _ => {
            if v > 0 {
                below
            } else {
                above
            }
        }
    }
}

#[test]
fn float_narrowing_and_integer_to_float_round_as_asked() {
    for &x in &f64s() {
        for m in ["rn", "rz", "rm", "rp"] {
            let got = run(
                "f32",
                "f64",
                &format!("cvt.{m}.f32.f64 %d, %a;"),
                &[x.to_bits()],
            );
            assert!(same32(got, directed(x, m)), "cvt.{m}.f32.f64 {x:e}");
        }
        let wide = run(
            "f64",
            "f32",
            "cvt.f64.f32 %d, %a;",
            &[u64::from((x as f32).to_bits())],
        );
        assert!(same64(wide, f64::from(x as f32)));
    }
    for &v in &I64 {
        let got = run("f32", "s64", "cvt.rn.f32.s64 %d, %a;", &[v as u64]);
        assert!(same32(got, v as f32), "s64 {v} to f32");
        let got = run("f64", "u64", "cvt.rn.f64.u64 %d, %a;", &[v as u64]);
        assert!(same64(got, v as u64 as f64), "u64 {v} to f64");
        for m in ["rz", "rm", "rp"] {
            let got = run(
                "f32",
                "s64",
                &format!("cvt.{m}.f32.s64 %d, %a;"),
                &[v as u64],
            );
            assert!(same32(got, directed_int(v, m)), "s64 {v} {m}");
        }
    }
}

#[test]
fn integer_conversions_extend_truncate_and_saturate() {
    for &v in &I64 {
        let x = v as u64;
        assert_eq!(
            run("s64", "s32", "cvt.s64.s32 %d, %a;", &[x]) as i64,
            i64::from(v as i32)
        );
        assert_eq!(
            run("u64", "u32", "cvt.u64.u32 %d, %a;", &[x]),
            u64::from(v as u32)
        );
        assert_eq!(
            run("u32", "u64", "cvt.u32.u64 %d, %a;", &[x]),
            u64::from(v as u32)
        );
        let sat = run("s32", "s64", "cvt.sat.s32.s64 %d, %a;", &[x]) as u32 as i32;
        assert_eq!(
            sat,
            v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
        );
        let sat = run("u32", "s64", "cvt.sat.u32.s64 %d, %a;", &[x]) as u32;
        assert_eq!(sat, v.clamp(0, i64::from(u32::MAX)) as u32);
        let sat = run(
            "s32",
            "s32",
            "cvt.sat.s8.s32 %d, %a;",
            &[u64::from(v as i32 as u32)],
        ) as u8 as i8;
        assert_eq!(sat, (v as i32).clamp(-128, 127) as i8);
        let sat = run("u32", "u64", "cvt.sat.u16.u64 %d, %a;", &[x]) as u16;
        assert_eq!(sat, x.min(0xffff) as u16);
    }
}

#[test]
fn selp_pack_unpack_and_predicate_logic() {
    for (a, b) in [(3u64, 9u64), (0, 1), (u64::MAX, 0)] {
        let body = "setp.ne.u64 %p, %a, 0;\n\tselp.b64 %d, %a, %b, %p;";
        assert_eq!(run("b64", "b64", body, &[a, b]), if a != 0 { a } else { b });
        let body = "setp.ne.u64 %p, %a, 0;\n\tsetp.ne.u64 %q, %b, 0;\n\txor.pred %p, %p, %q;\n\tnot.pred %p, %p;\n\tselp.u64 %d, 1, 0, %p;";
        assert_eq!(
            run("u64", "b64", body, &[a, b]),
            u64::from((a != 0) == (b != 0))
        );
    }
    let body = ".reg .b32 %lo, %hi;\n\tmov.b64 {%lo, %hi}, %a;\n\tmov.b64 %d, {%hi, %lo};";
    assert_eq!(
        run("b64", "b64", body, &[0x1122_3344_5566_7788]),
        0x5566_7788_1122_3344
    );
}

#[test]
fn what_is_not_modelled_is_an_error_naming_the_line() {
    let cases = [
        ("add.ftz.f32 %d, %a, %a;", "ftz"),
        ("lg2.approx.f32 %d, %a;", "unknown instruction"),
        ("rcp.approx.f32 %d, %a;", "`.approx` is not modelled"),
        ("ex2.f32 %d, %a;", "needs `.approx`"),
        ("add.rz.f32 %d, %a, %a;", "directed"),
        ("frobnicate.f32 %d, %a;", "unknown instruction"),
        ("add.f32 %d, %a, %nope;", "unknown operand"),
    ];
    for (body, want) in cases {
        let text = format!(".func (.reg .f32 %d) f (.reg .f32 %a)\n{{\n\t{body}\n\tret;\n}}\n");
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("PTX line 3") && e.contains(want), "{body}: {e}");
    }
    let e = parse(".version 6.3\n.bogus 1\n").unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains(".bogus"), "{e}");
    // A prototype then its definition is fine; two definitions are not.
    let f = ".func (.reg .b32 %d) f (.reg .b32 %a)\n{\n\tret;\n}\n";
    let proto = ".func (.reg .b32 %d) f (.reg .b32 %a);\n";
    assert!(parse(&format!("{proto}{f}")).is_ok());
    let e = parse(&format!("{f}{f}")).unwrap_err().to_string();
    assert!(
        e.contains("PTX line 5") && e.contains("defined twice"),
        "{e}"
    );
}

#[test]
fn fma_rounds_once_in_every_direction_and_rcp_and_ex2_are_exact() {
    let mut checked = 0;
    for &a in &f32s() {
        for &b in &f32s() {
            for &c in &[0.0f32, -0.0, 1.0, -3.0, 1e-3, 1e30, -1e-40, 12_582_913.0] {
                // The reference is exact only where the double sum is.
                let p = f64::from(a) * f64::from(b);
                let s = p + f64::from(c);
                if !s.is_finite() || s - p != f64::from(c) || s - f64::from(c) != p {
                    continue;
                }
                for m in ["rn", "rz", "rm", "rp"] {
                    let got = run(
                        "f32",
                        "f32",
                        &format!("fma.{m}.f32 %d, %a, %b, %c;"),
                        &[a.to_bits().into(), b.to_bits().into(), c.to_bits().into()],
                    );
                    let want = if m == "rn" {
                        a.mul_add(b, c)
                    } else {
                        directed(s, m)
                    };
                    assert!(
                        same32(got, want),
                        "fma.{m}({a:e}, {b:e}, {c:e}): {} vs {want:e}",
                        f32::from_bits(got as u32)
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 1000, "{checked}");
    // The exponent trick of NVRTC's expf: 2^k as a float from fma.rm.
    let got = run(
        "f32",
        "f32",
        "fma.rm.f32 %d, %a, %b, %c;",
        &[
            0.7f32.to_bits().into(),
            252.0f32.to_bits().into(),
            f32::from_bits(0x4B40_0001).to_bits().into(),
        ],
    );
    let exact = f64::from(0.7f32) * 252.0 + f64::from(f32::from_bits(0x4B40_0001));
    assert_eq!(f32::from_bits(got as u32), 12_583_089.0);
    assert!(same32(got, directed(exact, "rm")));
    for &x in &f32s() {
        let got = run("f32", "f32", "rcp.rn.f32 %d, %a;", &[x.to_bits().into()]);
        assert!(same32(got, 1.0 / x), "rcp({x:e})");
        let got = run(
            "f32",
            "f32",
            "ex2.approx.f32 %d, %a;",
            &[x.to_bits().into()],
        );
        assert!(same32(got, x.exp2()), "ex2({x:e})");
        let got = run(
            "f32",
            "f32",
            "ex2.approx.ftz.f32 %d, %a;",
            &[x.to_bits().into()],
        );
        let flush = |v: f32| {
            if v.is_subnormal() {
                0.0f32.copysign(v)
            } else {
                v
            }
        };
        assert!(same32(got, flush(flush(x).exp2())), "ex2.ftz({x:e})");
    }
    for &x in &f64s() {
        let got = run("f64", "f64", "rcp.rn.f64 %d, %a;", &[x.to_bits()]);
        assert!(same64(got, 1.0 / x), "rcp({x:e})");
    }
}
