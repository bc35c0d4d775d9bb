//! Launches that do not block (`Runtime::launch`): launches in flight at
//! once, ordered by what they capture, under safepoints and collections,
//! on the CPU device and the interpreter.

use offload::{Device, Runtime, kernel, par_offload};
#[path = "common/spin.rs"]
mod spin;
use spin::SRC;

fn runtimes(inject: bool) -> Vec<Runtime> {
    [Device::Cpu, Device::Interpreter]
        .into_iter()
        .map(|d| {
            let mut b = Runtime::builder().device(d).workers(2);
            if inject {
                b = b.inject_safepoints(7, Some(3));
            }
            b.build().unwrap()
        })
        .collect()
}

#[test]
fn launches_in_flight_give_the_results_of_launches_one_after_the_other() {
    for inject in [false, true] {
        for rt in runtimes(inject) {
            let m = rt.load_source("spin.ofk", SRC).unwrap();
            let n = 2000;
            let (a, b) = (
                rt.new_array::<i64>(n).unwrap(),
                rt.new_array::<i64>(n).unwrap(),
            );
            let fa = m
                .closure("fill", [(&a).into(), 200.into(), 3i64.into()])
                .unwrap();
            let fb = m
                .closure("fill", [(&b).into(), 300.into(), 5i64.into()])
                .unwrap();
            // Both in flight, and a collection while they run.
            let ha = rt.launch(0..n as i64, &fa).unwrap();
            let hb = rt.launch(0..n as i64, &fb).unwrap();
            let _garbage = rt.new_array::<f64>(1 << 16).unwrap();
            rt.collect().unwrap();
            let (ra, rb) = (ha.wait().unwrap(), hb.wait().unwrap());
            assert_eq!((ra.completed, rb.completed), (n as u64, n as u64));
            let got = (rt.read(&a).unwrap(), rt.read(&b).unwrap());
            // The same launches one after the other.
            let (a2, b2) = (
                rt.new_array::<i64>(n).unwrap(),
                rt.new_array::<i64>(n).unwrap(),
            );
            for (arr, iters, k) in [(&a2, 200, 3i64), (&b2, 300, 5)] {
                let c = m
                    .closure("fill", [arr.into(), iters.into(), k.into()])
                    .unwrap();
                par_offload(0..n as i64, &c).unwrap();
            }
            let want = (rt.read(&a2).unwrap(), rt.read(&b2).unwrap());
            assert_eq!(got, want, "{:?} inject {inject}", rt.device());
            assert_eq!(got.0[10], 10 * 3 + 200);
        }
    }
}

#[test]
fn a_launch_that_reads_what_an_earlier_one_writes_waits_for_it() {
    for rt in runtimes(true) {
        let m = rt.load_source("spin.ofk", SRC).unwrap();
        let n = 3000;
        let (a, b) = (
            rt.new_array::<i64>(n).unwrap(),
            rt.new_array::<i64>(n).unwrap(),
        );
        // A slow writer of `a`, then a reader of `a` submitted at once:
        // the reader must see every write.
        let fill = m
            .closure("fill", [(&a).into(), 2000.into(), 1i64.into()])
            .unwrap();
        let double = m.closure("double", [(&a).into(), (&b).into()]).unwrap();
        let h1 = rt.launch(0..n as i64, &fill).unwrap();
        let h2 = rt.launch(0..n as i64, &double).unwrap();
        drop(h2); // dropping waits (after h1, which h2 waited for)
        let want: Vec<i64> = (0..n as i64).map(|i| (i + 2000) * 2).collect();
        assert_eq!(rt.read(&b).unwrap(), want, "{:?}", rt.device());
        h1.wait().unwrap();
        // A blocking launch waits for the launches in flight it reads too.
        let c = rt.new_array::<i64>(n).unwrap();
        let refill = m
            .closure("fill", [(&a).into(), 2000.into(), 3i64.into()])
            .unwrap();
        let h = rt.launch(0..n as i64, &refill).unwrap();
        let triple = m.closure("double", [(&a).into(), (&c).into()]).unwrap();
        par_offload(0..n as i64, &triple).unwrap();
        let want: Vec<i64> = (0..n as i64).map(|i| (3 * i + 2000) * 2).collect();
        assert_eq!(rt.read(&c).unwrap(), want, "{:?}", rt.device());
        h.wait().unwrap();
    }
}

#[test]
fn host_reads_and_writes_wait_for_the_launches_that_capture_the_array() {
    for rt in runtimes(false) {
        let n = 4000usize;
        let a = rt.new_array::<i32>(n).unwrap();
        let iters = 20_000;
        let h = rt
            .launch(
                0..n as i64,
                &kernel!(move |i| {
                    let mut s = 0;
                    for _ in 0..iters {
                        s += 1;
                    }
                    a[i] = s;
                })
                .unwrap(),
            )
            .unwrap();
        // Read at once: it waits for the launch, so it sees every write.
        assert_eq!(rt.read(&a).unwrap(), vec![iters; n], "{:?}", rt.device());
        h.wait().unwrap();
    }
}

#[test]
fn launches_that_capture_objects_are_ordered_against_every_other() {
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .build()
        .unwrap();
    let m = rt
        .load_source(
            "cells.ofk",
            "struct Cell { v: i64 }
             #[kernel]
             fn bump(i: i32, cells: &mut [Option<Cell>], out: &mut [i64]) {
                 let c = cells[i].unwrap();
                 c.v = c.v + 1;
                 out[i] = c.v;
             }",
        )
        .unwrap();
    let n = 500;
    let cells = m.new_ref_array("Cell", n).unwrap();
    let mut kept = Vec::new();
    for k in 0..n {
        let c = m.new_object("Cell").unwrap();
        m.set_element(&cells, k, &c).unwrap();
        kept.push(c);
    }
    let (o1, o2) = (
        rt.new_array::<i64>(n).unwrap(),
        rt.new_array::<i64>(n).unwrap(),
    );
    // Two launches over the same objects, through different output
    // arrays: the second must run after the first.
    let h1 = rt
        .launch(
            0..n as i64,
            &m.closure("bump", [(&cells).into(), (&o1).into()]).unwrap(),
        )
        .unwrap();
    let h2 = rt
        .launch(
            0..n as i64,
            &m.closure("bump", [(&cells).into(), (&o2).into()]).unwrap(),
        )
        .unwrap();
    // A host read of a field waits for both.
    assert_eq!(m.get_field::<i64>(&kept[3], "v").unwrap(), 2);
    h1.wait().unwrap();
    h2.wait().unwrap();
    assert_eq!(rt.read(&o1).unwrap(), vec![1; n]);
    assert_eq!(rt.read(&o2).unwrap(), vec![2; n]);
}

#[test]
fn a_closure_of_another_runtime_is_refused() {
    let (r1, r2) = (
        Runtime::builder().workers(1).build().unwrap(),
        Runtime::builder().workers(1).build().unwrap(),
    );
    let a = r1.new_array::<i32>(4).unwrap();
    let c = kernel!(move |i| a[i] = 1).unwrap();
    let e = r2.launch(0..4, &c).unwrap_err();
    assert!(e.to_string().contains("another runtime"), "{e}");
    r1.launch(0..4, &c).unwrap().wait().unwrap();
    assert_eq!(r1.read(&a).unwrap(), [1; 4]);
}
