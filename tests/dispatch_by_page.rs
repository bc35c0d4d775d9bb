//! Virtual calls and class tests that find the receiver's class from the
//! page it lies on (`offload_heap::pages`): objects the host made (on pages
//! of their class) and objects a kernel made (on pages of their class too,
//! from a TLAB per kind) dispatch alike, on every CPU tier and the
//! interpreter, with dispatch by address on and off, and after a collection
//! has moved them.

use offload::{Device, Runtime};

#[path = "common/dispatch.rs"]
mod dispatch;

fn runtime(device: Device, by_address: bool, tiered: bool) -> Runtime {
    Runtime::builder()
        .device(device)
        .workers(2)
        .tiered(tiered)
        .dispatch_by_address(by_address)
        .build()
        .unwrap()
}

#[test]
fn host_and_kernel_objects_dispatch_alike_on_the_cpu() {
    for by_address in [true, false] {
        for tiered in [true, false] {
            let rt = runtime(Device::Cpu, by_address, tiered);
            let what = format!("cpu, by address {by_address}, tiered {tiered}");
            dispatch::check(&rt, 3000, &what);
        }
    }
}

#[test]
fn a_launch_allocates_on_pages_of_each_kind() {
    for tiered in [true, false] {
        let rt = runtime(Device::Cpu, true, tiered);
        dispatch::check_kinds(&rt, 3000, &format!("cpu, tiered {tiered}"));
    }
    let rt = runtime(Device::Interpreter, true, true);
    dispatch::check_kinds(&rt, 3000, "interpreter");
}

#[test]
fn host_and_kernel_objects_dispatch_alike_on_the_interpreter() {
    dispatch::check(
        &runtime(Device::Interpreter, true, true),
        3000,
        "interpreter",
    );
}

/// Nine classes behind one virtual `v`: a kernel that makes all nine has
/// more kinds than a launch gives TLABs of their own
/// (`offload_program::MAX_ALLOCATION_KINDS`), so its objects share mixed
/// pages, whose tag names no class.
const NINE: &str = r#"
struct Base { k: i32 }
impl Base { fn v(&self, x: i32) -> i32; }
#[extends(Base)] struct C0 {} impl C0 { fn v(&self, x: i32) -> i32 { x + 100 } }
#[extends(Base)] struct C1 {} impl C1 { fn v(&self, x: i32) -> i32 { x * 2 + self.k } }
#[extends(Base)] struct C2 {} impl C2 { fn v(&self, x: i32) -> i32 { x * 3 } }
#[extends(Base)] struct C3 {} impl C3 { fn v(&self, x: i32) -> i32 { x - 7 } }
#[extends(Base)] struct C4 {} impl C4 { fn v(&self, x: i32) -> i32 { x * x } }
#[extends(Base)] struct C5 {} impl C5 { fn v(&self, x: i32) -> i32 { 5 } }
#[extends(Base)] struct C6 {} impl C6 { fn v(&self, x: i32) -> i32 { x + self.k * 6 } }
#[extends(Base)] struct C7 {} impl C7 { fn v(&self, x: i32) -> i32 { 0 - x } }
#[extends(Base)] struct C8 {} impl C8 { fn v(&self, x: i32) -> i32 { x / 8 } }

#[kernel]
fn make_and_call(i: i32, objs: &mut [Option<Base>], out: &mut [i32]) {
    let o: Base = if i % 9 == 0 { C0 {} } else if i % 9 == 1 { C1 {} }
        else if i % 9 == 2 { C2 {} } else if i % 9 == 3 { C3 {} }
        else if i % 9 == 4 { C4 {} } else if i % 9 == 5 { C5 {} }
        else if i % 9 == 6 { C6 {} } else if i % 9 == 7 { C7 {} } else { C8 {} };
    o.k = i % 4;
    objs[i] = Some(o);
    out[i] = o.v(i);
}

#[kernel]
fn call(i: i32, objs: &[Option<Base>], out: &mut [i32]) {
    out[i] = objs[i].unwrap().v(i + 1);
}
"#;

/// What `v` gives on workitem `i`'s object for argument `x`.
fn nine_v(i: i32, x: i32) -> i32 {
    let k = i % 4;
    match i % 9 {
        0 => x + 100,
        1 => x * 2 + k,
        2 => x * 3,
        3 => x - 7,
        4 => x * x,
        5 => 5,
        6 => x + k * 6,
        7 => -x,
        _ => x / 8,
    }
}

/// Virtual calls by address on receivers on mixed pages (a launch's own
/// objects, when it makes more kinds than it has TLABs for) find their
/// class from the header, off the hot path, and run compiled: the same
/// results as Rust and as dispatch by header, and not one deopt (a call
/// that tested the page's tag alone would miss every implementation and
/// leave the call to the interpreter).
#[test]
fn receivers_on_mixed_pages_dispatch_compiled_by_address() {
    let n = 2000usize;
    for by_address in [true, false] {
        for tiered in [true, false] {
            let what = format!("by address {by_address}, tiered {tiered}");
            let rt = runtime(Device::Cpu, by_address, tiered);
            let m = rt.load_source("nine.ofk", NINE).unwrap();
            let objs = m.new_ref_array("Base", n).unwrap();
            let out = rt.new_array::<i32>(n).unwrap();
            let make = m
                .closure("make_and_call", [(&objs).into(), (&out).into()])
                .unwrap();
            let call = m.closure("call", [(&objs).into(), (&out).into()]).unwrap();
            for round in 0..3 {
                let r = rt.par_offload(0..n as i64, &make).unwrap();
                assert!(r.deopts.is_empty(), "{what}, round {round}: {:?}", r.deopts);
                let got = rt.read(&out).unwrap();
                for (i, g) in got.iter().enumerate() {
                    assert_eq!(*g, nine_v(i as i32, i as i32), "{what}: make_and_call {i}");
                }
                let stats = rt.heap().page_stats().unwrap();
                let mixed: u64 = stats
                    .kinds
                    .iter()
                    .filter(|k| k.tag == offload_abi::pages::MIXED)
                    .map(|k| k.objects)
                    .sum();
                assert!(mixed >= n as u64, "{what}: objects on mixed pages {mixed}");
                let r = rt.par_offload(0..n as i64, &call).unwrap();
                assert!(r.deopts.is_empty(), "{what}, round {round}: {:?}", r.deopts);
                let got = rt.read(&out).unwrap();
                for (i, g) in got.iter().enumerate() {
                    assert_eq!(*g, nine_v(i as i32, i as i32 + 1), "{what}: call {i}");
                }
            }
        }
    }
}
