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

// Odd workitems make their shape here (a launch's objects: on pages of
// their class, a TLAB per kind, on the CPU and the interpreter; on mixed
// pages on the GPU).
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

// Every workitem makes one class only: the launch's TLABs are carved
// from pages of that class (`Program::allocation_kinds`).
#[kernel]
fn circles(i: i32, shapes: &mut [Option<Shape>]) {
    let c = Circle { r: (i % 9 + 1) as f64 };
    c.id = i;
    shapes[i] = Some(c);
}

// A circle and a row: a TLAB for the circles (pages of their class) and
// one for everything else (mixed pages).
#[kernel]
fn circles_and_rows(i: i32, shapes: &mut [Option<Shape>], out: &mut [f64]) {
    let row = vec![0.0; 3];
    row[i % 3] = i as f64;
    let c = Circle { r: (i % 9 + 1) as f64 };
    c.id = i;
    shapes[i] = Some(c);
    out[i] = row[0] + row[1] + row[2];
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

/// Where a launch's objects go (`Program::allocation_kinds`): a kernel
/// that makes instances of one class of a hierarchy (`circles`) places
/// them on pages of that class on every device; one that also makes arrays
/// (`circles_and_rows`) or several such classes (`make`) places each class
/// on pages of its own (a TLAB per kind), and its arrays on mixed pages.
/// Virtual calls and class tests over them agree with Rust, before and
/// after a collection; `what` names the runtime in failures.
pub fn check_kinds(rt: &Runtime, n: usize, what: &str) {
    use offload_abi::pages::MIXED;
    let m = rt.load_source("shapes.ofk", SHAPES).unwrap();
    let shapes = m.new_ref_array("Shape", n).unwrap();
    let circles = m.closure("circles", [Arg::from(&shapes)]).unwrap();
    rt.par_offload(0..n as i64, &circles).unwrap();
    let (more, sums) = (
        m.new_ref_array("Shape", n).unwrap(),
        rt.new_array::<f64>(n).unwrap(),
    );
    let c = m
        .closure("circles_and_rows", [Arg::from(&more), Arg::from(&sums)])
        .unwrap();
    rt.par_offload(0..n as i64, &c).unwrap();
    let got = rt.read(&sums).unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, i as f64, "{what}: circles_and_rows {i}");
    }
    let made = m.new_ref_array("Shape", n).unwrap();
    let make = m.closure("make", [Arg::from(&made)]).unwrap();
    rt.par_offload(0..n as i64, &make).unwrap();
    // `make`'s odd workitems: a circle where i % 6 == 1, a square where
    // 3, a triangle where 5.
    let made_of = |r: usize| (0..n).filter(|i| i % 6 == r).count() as u64;
    let (made_circles, made_all) = (made_of(1), made_of(1) + made_of(3) + made_of(5));
    let circle = m
        .program()
        .global_class(m.program().verified().class_named("Circle").unwrap());
    for round in 0..2 {
        // The live objects only (the rows are garbage).
        rt.collect().unwrap();
        rt.heap().check_pages().unwrap();
        let stats = rt.heap().page_stats().unwrap();
        let objects = |tag: u32| {
            stats
                .kinds
                .iter()
                .filter(|k| k.tag == tag)
                .map(|k| k.objects)
                .sum::<u64>()
        };
        assert_eq!(objects(MIXED), 0, "{what}, round {round}: {stats:?}");
        assert_eq!(
            objects(circle),
            2 * n as u64 + made_circles,
            "{what}, round {round}: {stats:?}"
        );
        // `make`'s squares and triangles on pages of their classes.
        let others = stats
            .kinds
            .iter()
            .filter(|k| offload_abi::pages::names_class(k.tag) && k.tag != circle)
            .map(|k| k.objects)
            .sum::<u64>();
        assert_eq!(
            others,
            made_all - made_circles,
            "{what}, round {round}: {stats:?}"
        );
        let (report, got, ks) = areas(rt, &m, &shapes, n, 1);
        // Where the lookups are counted (the virtual GPU): every one found
        // the class from the address, none read a header.
        if let Some(d) = report.dispatch {
            assert!(d.lookups >= n as u64, "{what}: {d:?}");
            assert_eq!(d.header_loads, 0, "{what}, round {round}: {d:?}");
        }
        for i in 0..n {
            let x = (i % 9 + 1) as f64;
            assert_eq!(
                (got[i], ks[i]),
                (3.0 * x * x, 1000 + i as i32),
                "{what}, round {round}: {i}"
            );
        }
    }
}

/// Run `areas` over `shapes` `launches` times into fresh arrays: the last
/// launch's report, and what it wrote.
fn areas(
    rt: &Runtime,
    m: &offload::Module,
    shapes: &offload::RefArray,
    n: usize,
    launches: usize,
) -> (offload::LaunchReport, Vec<f64>, Vec<i32>) {
    let out = rt.new_array::<f64>(n).unwrap();
    let kinds = rt.new_array::<i32>(n).unwrap();
    let c = m
        .closure(
            "areas",
            [Arg::from(shapes), Arg::from(&out), Arg::from(&kinds)],
        )
        .unwrap();
    let mut report = None;
    for _ in 0..launches {
        report = Some(rt.par_offload(0..n as i64, &c).unwrap());
    }
    let report = report.expect("at least one launch");
    (report, rt.read(&out).unwrap(), rt.read(&kinds).unwrap())
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
        let (_, got, ks) = areas(rt, &m, &shapes, n, 3);
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
