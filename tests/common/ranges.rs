//! Launches over 2-D and 3-D ranges (`offload::LaunchRange`,
//! `offload_lang::ranges`) against Rust, with deopts and exceptions named
//! by their indices. Shared by `tests/ranges.rs` (the CPU device and the
//! interpreter) and the GPU suite (`tests/gpu.rs`).

#![allow(dead_code)]

use offload::{Arg, OffloadError, Runtime};

pub const SRC: &str = r#"
#[kernel]
fn fill2((i, j): (i32, i32), out: &mut [i64], w: i32) {
    out[(i - 1) * w + (j - 2)] = (i * 1000 + j) as i64;
}

#[kernel]
fn fill3((i, j, k): (i32, i32, i32), out: &mut [i64], h: i32, w: i32) {
    out[(i * h + j) * w + k] = (i * 1000000 + j * 1000 + k) as i64;
}

#[kernel]
fn heat((i, j): (i64, i64), t: &[f32], u: &mut [f32], w: i32) {
    let c = (i as i32) * w + j as i32;
    u[c] = t[c] + 0.1 * (t[c - 1] + t[c + 1] + t[c - w] + t[c + w] - 4.0 * t[c]);
}

#[kernel]
fn heat32((i, j): (i32, i32), t: &[f32], u: &mut [f32], w: i32) {
    let c = i * w + j;
    u[c] = t[c] + 0.1 * (t[c - 1] + t[c + 1] + t[c - w] + t[c + w] - 4.0 * t[c]);
}

#[kernel]
fn thrower((i, j): (i32, i32), out: &mut [i32], w: i32, zero: i32) {
    if i == 2 && j == 3 {
        out[i * w + j] = 7 / zero;
    } else {
        out[i * w + j] = 1;
    }
}

#[kernel]
fn flat(i: i32, out: &mut [i32]) {
    out[i] = i;
}
"#;

/// One step of the heat stencil in Rust, as `heat` computes it.
pub fn heat_native(t: &[f32], h: usize, w: usize) -> Vec<f32> {
    let mut u = t.to_vec();
    for i in 1..h - 1 {
        for j in 1..w - 1 {
            let c = i * w + j;
            u[c] = t[c] + 0.1 * (t[c - 1] + t[c + 1] + t[c - w] + t[c + w] - 4.0 * t[c]);
        }
    }
    u
}

/// Every check of this file on `rt`, launching `(h, w)`-sized ranges;
/// `what` names the runtime in failures.
pub fn check(rt: &Runtime, h: usize, w: usize, what: &str) {
    let m = rt.load_source("ranges.ofk", SRC).unwrap();

    // 2-D: every (i, j) of (1..h+1, 2..w+2) once, at its element.
    let out = rt.new_array::<i64>(h * w).unwrap();
    let c = m
        .closure("fill2", [Arg::from(&out), Arg::I32(w as i32)])
        .unwrap();
    assert_eq!(c.dims(), 2);
    let r = rt
        .par_offload((1..h as i64 + 1, 2..w as i64 + 2), &c)
        .unwrap();
    assert_eq!(r.workitems(), (h * w) as u64, "{what}");
    let shape = r.shape.clone().expect("a 2-D launch has a shape");
    assert_eq!(shape.coords(0), vec![1, 2], "{what}");
    assert_eq!(shape.coords(w as i64 + 1), vec![2, 3], "{what}");
    let got = rt.read(&out).unwrap();
    for i in 0..h {
        for j in 0..w {
            let want = ((i + 1) * 1000 + (j + 2)) as i64;
            assert_eq!(got[i * w + j], want, "{what}: ({}, {})", i + 1, j + 2);
        }
    }

    // 3-D.
    let d = 3usize;
    let out3 = rt.new_array::<i64>(d * h * w).unwrap();
    let c3 = m
        .closure(
            "fill3",
            [Arg::from(&out3), Arg::I32(h as i32), Arg::I32(w as i32)],
        )
        .unwrap();
    assert_eq!(c3.dims(), 3);
    rt.par_offload((0..d as i64, 0..h as i64, 0..w as i64), &c3)
        .unwrap();
    let got = rt.read(&out3).unwrap();
    for i in 0..d {
        for j in 0..h {
            for k in 0..w {
                let want = (i * 1_000_000 + j * 1000 + k) as i64;
                assert_eq!(got[(i * h + j) * w + k], want, "{what}: ({i}, {j}, {k})");
            }
        }
    }

    // The heat stencil's interior against Rust, bit for bit.
    let t0: Vec<f32> = (0..h * w).map(|x| ((x * 37) % 101) as f32 * 0.5).collect();
    let t = rt.array(&t0).unwrap();
    let u = rt.array(&t0).unwrap();
    let ch = m
        .closure("heat", [Arg::from(&t), Arg::from(&u), Arg::I32(w as i32)])
        .unwrap();
    rt.par_offload((1..h as i64 - 1, 1..w as i64 - 1), &ch)
        .unwrap();
    assert_eq!(rt.read(&u).unwrap(), heat_native(&t0, h, w), "{what}: heat");
    // With `i32` indices (decoded by `i32` division: on the CPU, lockstep
    // groups whose row is the same for every lane, and the rest scalar).
    let u = rt.array(&t0).unwrap();
    let ch = m
        .closure("heat32", [Arg::from(&t), Arg::from(&u), Arg::I32(w as i32)])
        .unwrap();
    rt.par_offload((1..h as i64 - 1, 1..w as i64 - 1), &ch)
        .unwrap();
    assert_eq!(
        rt.read(&u).unwrap(),
        heat_native(&t0, h, w),
        "{what}: heat32"
    );

    // An exception names its workitem by its indices.
    let o = rt.new_array::<i32>(h * w).unwrap();
    let ct = m
        .closure("thrower", [Arg::from(&o), Arg::I32(w as i32), Arg::I32(0)])
        .unwrap();
    match rt.par_offload((0..h as i64, 0..w as i64), &ct) {
        Err(OffloadError::Exceptions(e)) => {
            let text = e.to_string();
            assert!(text.contains("in workitem (2, 3)"), "{what}: {text}");
            assert_eq!(e.count, 1, "{what}: {text}");
            assert_eq!(e.report.completed, (h * w - 1) as u64, "{what}: {text}");
        }
        other => panic!("{what}: expected the exception, got {other:?}"),
    }

    // A range of the wrong dimensions is refused, saying what the kernel
    // takes.
    let e = rt.par_offload(0..10, &c).unwrap_err().to_string();
    assert!(
        e.contains("kernel `fill2` runs over a 2-D range") && e.contains("gave a range (`lo..hi`)"),
        "{what}: {e}"
    );
    let flat = m.closure("flat", [Arg::from(&o)]).unwrap();
    let e = rt.par_offload((0..2, 0..2), &flat).unwrap_err().to_string();
    assert!(
        e.contains("runs over a range (`lo..hi`), and the launch gave a 2-D range"),
        "{what}: {e}"
    );
    // The captures are the parameters after the index, less the range's.
    let e = m
        .closure("fill2", [Arg::from(&out)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("takes 2 capture(s) (out: i64[], w: i32), 1 given"),
        "{what}: {e}"
    );
    // An empty dimension: no workitem.
    let r = rt.par_offload((0..0, 0..w as i64), &c).unwrap();
    assert_eq!(r.workitems(), 0, "{what}");
    // A start after its end.
    let (five, one) = (5, 1);
    assert!(matches!(
        rt.par_offload((0..2, five..one), &c),
        Err(OffloadError::Range { start: 5, end: 1 })
    ));
}
