//! Virtual calls and class tests over host-made objects (on pages of
//! their class, `offload_heap::pages`) and kernel-made ones (on mixed
//! pages): six classes behind one virtual `area`, `is::<C>()` and
//! `cast::<C>()`, checked against Rust before and after a collection moved
//! them. Shared by the CPU tests (`tests/dispatch_by_page.rs`) and the GPU
//! suite (`tests/gpu.rs`).

#![allow(dead_code)]

use offload::{Arg, Runtime};

pub const SHAPES: &str = r#"
struct Shape { id: i32 }
impl Shape { fn area(&self) -> f64; }

#[extends(Shape)]
struct Circle { r: f64 }
impl Circle { fn area(&self) -> f64 { 3.0 * self.r * self.r } }

#[extends(Shape)]
struct Rect { w: f64, h: f64 }
impl Rect { fn area(&self) -> f64 { self.w * self.h } }

#[extends(Rect)]
struct Square {}
impl Square { fn area(&self) -> f64 { self.w * self.w } }

#[extends(Shape)]
struct Tri { b: f64, h: f64 }
impl Tri { fn area(&self) -> f64 { 0.5 * self.b * self.h } }

#[extends(Shape)]
struct Ring { r: f64, t: f64 }
impl Ring { fn area(&self) -> f64 { 6.0 * self.r * self.t } }

#[extends(Shape)]
struct Dot {}
impl Dot { fn area(&self) -> f64 { 0.0 } }

// Odd workitems make their shape here (a launch's objects: mixed pages).
#[kernel]
fn make(i: i32, shapes: &mut [Option<Shape>]) {
    if i % 2 == 1 {
        let x = (i % 9 + 1) as f64;
        let s: Shape = if i % 6 == 1 {
            Circle { r: x }
        } else if i % 6 == 3 {
            Square { w: x, h: x }
        } else {
            Tri { b: x, h: 2.0 }
        };
        s.id = i;
        shapes[i] = Some(s);
    }
}

#[kernel]
fn areas(i: i32, shapes: &[Option<Shape>], out: &mut [f64], kinds: &mut [i32]) {
    let s = shapes[i].unwrap();
    out[i] = s.area();
    let mut k = 0;
    if s.is::<Circle>() { k = 1; }
    if s.is::<Rect>() { k = 2 + s.cast::<Rect>().w as i32 * 0; }
    if s.is::<Square>() { k = 3; }
    if s.is::<Dot>() { k = 4; }
    kinds[i] = k * 1000 + s.id;
}
"#;

/// The shape even workitem `i` gets from the host: (class, fields).
pub fn host_shape(i: usize) -> (&'static str, Vec<(&'static str, f64)>) {
    let x = (i % 9 + 1) as f64;
    match (i / 2) % 6 {
        0 => ("Circle", vec![("r", x)]),
        1 => ("Rect", vec![("w", x), ("h", 3.0)]),
        2 => ("Square", vec![("w", x), ("h", x)]),
        3 => ("Tri", vec![("b", x), ("h", 2.0)]),
        4 => ("Ring", vec![("r", x), ("t", 0.5)]),
        _ => ("Dot", vec![]),
    }
}

/// What `areas` writes for workitem `i`.
pub fn expected(i: usize) -> (f64, i32) {
    let x = (i % 9 + 1) as f64;
    let (area, kind) = if i % 2 == 1 {
        match i % 6 {
            1 => (3.0 * x * x, 1),
            3 => (x * x, 3),
            _ => (0.5 * x * 2.0, 0),
        }
    } else {
        match (i / 2) % 6 {
            0 => (3.0 * x * x, 1),
            1 => (x * 3.0, 2),
            2 => (x * x, 3),
            3 => (0.5 * x * 2.0, 0),
            4 => (6.0 * x * 0.5, 0),
            _ => (0.0, 4),
        }
    };
    (area, kind * 1000 + i as i32)
}

/// Make `n` shapes (even ones by the host, odd ones by a kernel), run
/// `areas` over them, check, collect, and check again; `what` names the
/// runtime in failures.
pub fn check(rt: &Runtime, n: usize, what: &str) {
    let m = rt.load_source("shapes.ofk", SHAPES).unwrap();
    let shapes = m.new_ref_array("Shape", n).unwrap();
    for i in (0..n).step_by(2) {
        let (class, fields) = host_shape(i);
        let o = m.new_object(class).unwrap();
        for (f, v) in fields {
            m.set_field(&o, f, v).unwrap();
        }
        m.set_field(&o, "id", i as i32).unwrap();
        m.set_element(&shapes, i, &o).unwrap();
    }
    let make = m.closure("make", [Arg::from(&shapes)]).unwrap();
    rt.par_offload(0..n as i64, &make).unwrap();
    // Some garbage between, so that the collection below moves objects.
    for _ in 0..50 {
        m.new_object("Dot").unwrap();
    }
    for round in 0..2 {
        let out = rt.new_array::<f64>(n).unwrap();
        let kinds = rt.new_array::<i32>(n).unwrap();
        let c = m
            .closure(
                "areas",
                [Arg::from(&shapes), Arg::from(&out), Arg::from(&kinds)],
            )
            .unwrap();
        for _ in 0..3 {
            rt.par_offload(0..n as i64, &c).unwrap();
        }
        let (got, ks) = (rt.read(&out).unwrap(), rt.read(&kinds).unwrap());
        for i in 0..n {
            assert_eq!((got[i], ks[i]), expected(i), "{what}, round {round}: {i}");
        }
        rt.heap().check_pages().unwrap();
        // The host's shapes lie on pages of their six classes.
        let stats = rt.heap().page_stats().unwrap();
        let classes = stats
            .kinds
            .iter()
            .filter(|k| offload_abi::pages::names_class(k.tag) && k.objects > 0)
            .count();
        assert!(classes >= 6, "{what}: {stats:?}");
        let moved = rt.collect().unwrap();
        assert!(moved.freed() > 0, "{what}: {moved}");
    }
}
