//! Launches over 2-D and 3-D ranges on the CPU device (both tiers) and
//! the interpreter, with deopts injected and named by their indices; the
//! GPU suite runs the same checks (`tests/common/ranges.rs`).

use offload::{Device, Runtime};
use offload_jit::Injection;

#[path = "common/ranges.rs"]
mod ranges;

#[test]
fn two_and_three_dimensional_launches_match_rust() {
    for (device, tiered) in [
        (Device::Cpu, true),
        (Device::Cpu, false),
        (Device::Interpreter, true),
    ] {
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .tiered(tiered)
            .build()
            .unwrap();
        ranges::check(&rt, 37, 23, &format!("{device:?}, tiered {tiered}"));
        // Rows shorter than a SIMD body, and a long narrow grid.
        ranges::check(&rt, 11, 5, &format!("{device:?}, tiered {tiered}, 11 x 5"));
        ranges::check(
            &rt,
            300,
            6,
            &format!("{device:?}, tiered {tiered}, 300 x 6"),
        );
    }
}

#[test]
fn deopts_of_a_2d_launch_are_named_by_their_indices() {
    let probe = Runtime::builder().device(Device::Cpu).build().unwrap();
    let m = probe.load_source("ranges.ofk", ranges::SRC).unwrap();
    let prog = m.program();
    let k = prog.verified().func_named("fill2").unwrap();
    let site = prog.analysis(k).unwrap().sites[0].bci;
    let (h, w) = (9usize, 7usize);
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .inject(Injection {
            site_bci: site,
            modulus: 5,
            remainder: 2,
            reason: None,
        })
        .build()
        .unwrap();
    let m = rt.load_source("ranges.ofk", ranges::SRC).unwrap();
    let out = rt.new_array::<i64>(h * w).unwrap();
    let c = m
        .closure("fill2", [(&out).into(), (w as i32).into()])
        .unwrap();
    let r = rt
        .par_offload((1..h as i64 + 1, 2..w as i64 + 2), &c)
        .unwrap();
    // Every workitem once, the deopted ones finished by the interpreter.
    let got = rt.read(&out).unwrap();
    for i in 0..h {
        for j in 0..w {
            assert_eq!(got[i * w + j], ((i + 1) * 1000 + (j + 2)) as i64);
        }
    }
    assert!(!r.deopt_table.is_empty(), "{r}");
    let shape = r.shape.clone().unwrap();
    let text = r.deopt_table_text();
    for row in &r.deopt_table {
        // The injection counts flat workitem numbers.
        assert_eq!(row.workitem % 5, 2, "{text}");
        let [i, j] = shape.coords(row.workitem)[..] else {
            panic!("two indices")
        };
        assert_eq!((i - 1) * w as i64 + (j - 2), row.workitem);
        assert!(text.contains(&format!("({i}, {j})")), "{text}");
    }
}

#[test]
fn reserved_names_are_refused() {
    let rt = Runtime::builder().device(Device::Cpu).build().unwrap();
    let e = rt
        .load_source("bad.ofk", "#[kernel]\nfn k(i: i32, __range_lo0: i64) {}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("names that start with `__range_` are reserved"),
        "{e}"
    );
}

#[test]
fn kernel_closures_take_two_or_three_indices() {
    use offload::{kernel, par_offload};
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .build()
        .unwrap();
    let (h, w) = (6i64, 5i64);
    let out = rt.new_array::<i64>((h * w) as usize).unwrap();
    let r = par_offload(
        (0..h, 0..w),
        kernel!(move |i, j| out[i * 5 + j] = (i * 10 + j) as i64),
    )
    .unwrap();
    assert_eq!(r.shape.unwrap().ranges, vec![0..h, 0..w]);
    let got = rt.read(&out).unwrap();
    for i in 0..h {
        for j in 0..w {
            assert_eq!(got[(i * w + j) as usize], i * 10 + j);
        }
    }
    let cube = rt.new_array::<i64>(24).unwrap();
    par_offload(
        (0..2, 0..3, 0..4),
        kernel!(
            move |i: i64, j: i64, k: i64| cube[((i * 3 + j) * 4 + k) as i32] = i * 100 + j * 10 + k
        ),
    )
    .unwrap();
    let got = rt.read(&cube).unwrap();
    assert_eq!(got[23], 123);
    assert_eq!(got[4 * 3 + 1], 101);
}

#[test]
fn indices_narrowed_to_i32_refuse_a_range_outside_i32() {
    let rt = Runtime::builder().device(Device::Cpu).build().unwrap();
    let m = rt.load_source("ranges.ofk", ranges::SRC).unwrap();
    let out = rt.new_array::<i64>(8).unwrap();
    let c = m.closure("fill2", [(&out).into(), 4i32.into()]).unwrap();
    let big = i64::from(i32::MAX);
    match rt.par_offload((0..2, big - 1..big + 2), &c) {
        Err(offload::OffloadError::IndexRange { kernel, start, end }) => {
            assert_eq!((kernel.as_str(), start, end), ("fill2", big - 1, big + 2));
        }
        other => panic!("expected IndexRange, got {other:?}"),
    }
    // Each index fits `i32`, but not the number of workitems: with `i32`
    // indices the prologue decodes the flat number as an `i32`.
    let e = rt
        .par_offload((0..1 << 16, 0..1 << 16), &c)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("at most 2^31 workitems") && e.contains("take `i64` indices"),
        "{e}"
    );
    // `heat` takes i64 indices: nothing to refuse (its arrays are short,
    // so the workitems throw instead).
    let t = rt.new_array::<f32>(4).unwrap();
    let u = rt.new_array::<f32>(4).unwrap();
    let h = m
        .closure("heat", [(&t).into(), (&u).into(), 2i32.into()])
        .unwrap();
    assert!(matches!(
        rt.par_offload((big..big + 1, 0..1), &h),
        Err(offload::OffloadError::Exceptions(_))
    ));
    // Too many workitems to count, or to decode exactly.
    let e = rt
        .par_offload((i64::MIN..i64::MAX, 0..2), &h)
        .unwrap_err()
        .to_string();
    assert!(e.contains("more workitems than an i64 counts"), "{e}");
    let e = rt
        .par_offload((0..1 << 30, 0..1 << 30), &h)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at most 2^52"), "{e}");
}
