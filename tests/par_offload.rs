//! `par_offload` end to end on the interpreter device.

use offload::ir::ExceptionKind;
use offload::{AllocPolicy, Device, OffloadError, Runtime, par_offload};
use offload_testkit::kernels::example;
use offload_testkit::reference as native;

use offload_testkit::kernels::INC_KERNEL as INC;

fn rt() -> Runtime {
    Runtime::builder().workers(4).build().unwrap()
}

#[test]
fn every_workitem_runs_exactly_once() {
    let rt = rt();
    let m = rt.load("inc.obc", INC).unwrap();
    let n = 1_000_000;
    let out = rt.new_array::<i32>(n).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    assert_eq!(r.completed, n as u64);
    assert_eq!(r.threw, 0);
    let got = rt.read(&out).unwrap();
    let wrong: Vec<usize> = (0..n).filter(|&i| got[i] != 1).take(5).collect();
    assert!(wrong.is_empty(), "cells not exactly 1: {wrong:?}");
    // A sub-range touches exactly its cells.
    par_offload(10..20, &c).unwrap();
    let got = rt.read(&out).unwrap();
    assert!((0..n).all(|i| got[i] == if (10..20).contains(&i) { 2 } else { 1 }));
}

#[test]
fn atomic_histogram_sums_exactly() {
    let rt = rt();
    let m = rt.load("histogram.obc", example("histogram.obc")).unwrap();
    let mut r = native::Rng::new(9);
    let data: Vec<i32> = (0..200_000).map(|_| r.next_u64() as i32).collect();
    let (d, bins) = (rt.array(&data).unwrap(), rt.new_array::<i32>(7).unwrap());
    par_offload(
        0..data.len() as i64,
        m.closure("histogram", [(&d).into(), (&bins).into()])
            .unwrap(),
    )
    .unwrap();
    let got = rt.read(&bins).unwrap();
    assert_eq!(
        got.iter().map(|&x| i64::from(x)).sum::<i64>(),
        data.len() as i64
    );
    assert_eq!(got, native::histogram_par(&data, 7));
}

fn alloc_run(policy: AllocPolicy) {
    let rt = Runtime::builder()
        .workers(4)
        .initial_heap(256 << 10)
        .max_heap(512 << 20)
        .tlab_bytes(2048)
        .alloc_policy(policy)
        // Keep every object: the walk below counts them (no reclaim, and
        // no collection between the launches).
        .reclaim(false)
        .gc(offload::GcPolicy {
            trigger: 0.0,
            ..offload::GcPolicy::default()
        })
        .build()
        .unwrap();
    let m = rt.load("alloc.obc", example("alloc.obc")).unwrap();
    let n = 4000;
    let out = rt.new_array::<f64>(n).unwrap();
    let c = m
        .closure("alloc_vectors", [40i32.into(), (&out).into()])
        .unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    let want: Vec<f64> = (0..n as i64)
        .map(|i| native::alloc_vectors_one(i, 40))
        .collect();
    assert_eq!(rt.read(&out).unwrap(), want);
    assert!(r.alloc.heap_grows >= 1, "{policy:?}: the heap grew: {r}");
    if !matches!(policy, AllocPolicy::EdenCas) {
        assert!(r.alloc.refills > 100, "{policy:?}: many refills: {r}");
    }
    let ll = rt
        .load("linkedlist.obc", example("linkedlist.obc"))
        .unwrap();
    let sums = rt.new_array::<i64>(500).unwrap();
    par_offload(
        0..500,
        ll.closure("linked_list", [60i32.into(), (&sums).into()])
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        rt.read(&sums).unwrap(),
        (0..500)
            .map(|i| native::linked_list_one(i, 60))
            .collect::<Vec<_>>()
    );
    let walk = rt.verify_heap(&[&m, &ll]).unwrap();
    assert!(walk.objects >= (n as u64) * 81 + 500 * 60, "{walk:?}");
}

#[test]
fn allocation_heavy_kernels_refill_and_grow_under_every_policy() {
    for p in [
        AllocPolicy::SharedTlab { group: 2 },
        AllocPolicy::FailOnOverflow { group: 4 },
        AllocPolicy::PrivateTlab,
        AllocPolicy::EdenCas,
    ] {
        alloc_run(p);
    }
}

#[test]
fn a_heap_too_small_for_the_garbage_collects_and_stays_walkable() {
    // Lists of 1000 nodes per workitem in a 1 MiB heap: each list is
    // garbage when its workitem ends, and the heap fills many times over;
    // the collector makes room, and every list is summed.
    let rt = Runtime::builder()
        .workers(2)
        .initial_heap(64 << 10)
        .max_heap(1 << 20)
        .tlab_bytes(1024)
        .build()
        .unwrap();
    let m = rt
        .load("linkedlist.obc", example("linkedlist.obc"))
        .unwrap();
    let out = rt.new_array::<i64>(100).unwrap();
    let c = m
        .closure("linked_list", [1000i32.into(), (&out).into()])
        .unwrap();
    let r = par_offload(0..100, &c).unwrap();
    assert_eq!(
        rt.read(&out).unwrap(),
        (0..100)
            .map(|i| native::linked_list_one(i, 1000))
            .collect::<Vec<_>>()
    );
    assert!(r.gc.collections > 0, "{r}");
    rt.verify_heap(&[&m]).unwrap();
}

#[test]
fn exceptions_are_reported_in_workitem_order_and_others_complete() {
    let rt = rt();
    let m = rt.load("throws.obc", example("throws.obc")).unwrap();
    let n = 50_000usize;
    let a: Vec<i32> = (0..n as i32)
        .map(|j| if j % 97 == 5 { -1 } else { j })
        .collect();
    let b: Vec<i32> = (0..n as i32)
        .map(|j| if j % 1000 == 999 { 0 } else { 3 })
        .collect();
    let (aa, ba, oa) = (
        rt.array(&a).unwrap(),
        rt.array(&b).unwrap(),
        rt.new_array::<i32>(n).unwrap(),
    );
    let c = m
        .closure("checked_div", [(&aa).into(), (&ba).into(), (&oa).into()])
        .unwrap();
    let err = match par_offload(0..n as i64, &c) {
        Err(OffloadError::Exceptions(e)) => e,
        other => panic!("expected exceptions, got {other:?}"),
    };
    let bad: Vec<i64> = (0..n as i64)
        .filter(|&j| a[j as usize] < 0 || b[j as usize] == 0)
        .collect();
    assert_eq!(err.count, bad.len() as u64);
    assert_eq!(err.workitems, bad[..16]);
    assert_eq!(err.first.workitem, Some(5));
    assert_eq!(err.first.kind, ExceptionKind::IllegalArgument);
    assert_eq!(
        err.by_kind[&ExceptionKind::Arithmetic],
        (0..n).filter(|&j| a[j] >= 0 && b[j] == 0).count() as u64
    );
    let top = err.first.top().unwrap();
    assert_eq!(top.func, "checked_div");
    assert!(top.line > 0);
    assert_eq!(err.report.completed, (n - bad.len()) as u64);
    let text = err.to_string();
    assert!(text.contains("IllegalArgument in workitem 5"), "{text}");
    assert!(text.contains("more"), "{text}");
    let got = rt.read(&oa).unwrap();
    assert!(
        (0..n)
            .filter(|j| !bad.contains(&(*j as i64)))
            .all(|j| got[j] == a[j] / 3)
    );
}

#[test]
fn bad_captures_are_rejected_naming_the_parameter() {
    let rt = rt();
    let m = rt.load("saxpy.obc", example("saxpy.obc")).unwrap();
    let x = rt.array(&[1.0f32; 4]).unwrap();
    let xi = rt.array(&[1i32; 4]).unwrap();
    let msg = |r: Result<offload::Closure, OffloadError>| r.unwrap_err().to_string();
    let e = msg(m.closure("saxpy", [2.0f32.into(), (&x).into()]));
    assert!(
        e.contains("takes 3 capture(s)") && e.contains("y: f32[]"),
        "{e}"
    );
    let e = msg(m.closure("saxpy", [2.0f64.into(), (&x).into(), (&x).into()]));
    assert!(
        e.contains("capture 1 (`a`) must be f32, found an f64"),
        "{e}"
    );
    let e = msg(m.closure("saxpy", [2.0f32.into(), (&x).into(), rt.null()]));
    assert!(
        e.contains("capture 3 (`y`) must be f32[], found null"),
        "{e}"
    );
    let e = msg(m.closure("saxpy", [2.0f32.into(), (&xi).into(), (&x).into()]));
    assert!(
        e.contains("capture 2 (`x`) must be f32[], found `i32[]`"),
        "{e}"
    );
    let other = Runtime::builder().workers(1).build().unwrap();
    let foreign = other.array(&[0.0f32; 4]).unwrap();
    let e = msg(m.closure("saxpy", [2.0f32.into(), (&foreign).into(), (&x).into()]));
    assert!(e.contains("another runtime"), "{e}");
    let e = msg(m.closure("nope", []));
    assert!(e.contains("no kernel `nope`") && e.contains("saxpy"), "{e}");
    // Nothing ran: x is untouched.
    assert_eq!(rt.read(&x).unwrap(), [1.0; 4]);
}

#[test]
fn bad_input_gets_errors_not_panics() {
    let rt = rt();
    let err = rt
        .load("bad.obc", "kernel k(i: i64) {\n    i32.add\n    ret\n}\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stack underflow") && err.contains("bad.obc:2:5") && err.contains('^'),
        "{err}"
    );
    let m = rt.load("inc.obc", INC).unwrap();
    let out = rt.new_array::<i32>(10).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    assert!(matches!(
        par_offload(std::ops::Range { start: 5, end: 2 }, &c),
        Err(OffloadError::Range { .. })
    ));
    assert_eq!(par_offload(3..3, &c).unwrap().completed, 0);
    // Out-of-range workitems throw, and the error says so.
    let e = par_offload(0..12, &c).unwrap_err().to_string();
    assert!(
        e.contains("2 workitem(s) of `inc` threw") && e.contains("IndexOutOfBounds in workitem 10"),
        "{e}"
    );
    assert!(rt.write(&out, 8, &[1, 2, 3]).is_err());
    assert!(rt.new_array::<f64>(usize::MAX).is_err());
    // An array of 4 GiB or more names its size, not u64::MAX.
    let e = rt.new_array::<i64>(600_000_000).unwrap_err().to_string();
    assert!(
        e.contains("an array of 600000000 i64 elements would take 4800000008 bytes")
            && e.contains("at most 4294967288 bytes"),
        "{e}"
    );
    assert!(
        rt.load_file("/nonexistent.obc")
            .unwrap_err()
            .to_string()
            .contains("cannot read")
    );
}

#[test]
fn absurd_runtime_settings_are_refused_not_aborted() {
    // Too many workers would start (and hang on) a hundred thousand
    // threads; too many deopt records would abort on the save area's
    // allocation at the first launch.
    let refused = |b: offload::RuntimeBuilder| b.build().unwrap_err().to_string();
    let e = refused(Runtime::builder().workers(offload::MAX_WORKERS + 1));
    assert!(
        e.contains("1025 workers") && e.contains("at most 1024"),
        "{e}"
    );
    let e = refused(Runtime::builder().deopt_records(usize::MAX));
    assert!(
        e.contains("deopt records per worker") && e.contains("at most"),
        "{e}"
    );
    // A maximum below the default initial size lowers the initial size;
    // an initial size set above the maximum is refused.
    let small = Runtime::builder().max_heap(8 << 20).build().unwrap();
    assert!(small.new_array::<i64>(2 << 20).is_err());
    assert!(small.new_array::<i64>(128 << 10).is_ok());
    let e = refused(Runtime::builder().initial_heap(16 << 20).max_heap(8 << 20));
    assert!(e.contains("exceeds the maximum"), "{e}");
    // The limits themselves are accepted, and launch.
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .deopt_records(offload::MAX_DEOPT_RECORDS)
        .build()
        .unwrap();
    let m = rt.load("inc.obc", INC).unwrap();
    let out = rt.new_array::<i32>(10).unwrap();
    let c = m.closure("inc", [(&out).into()]).unwrap();
    assert_eq!(par_offload(0..10, &c).unwrap().completed, 10);
    assert_eq!(rt.read(&out).unwrap(), vec![1; 10]);
}

#[test]
fn objects_from_rust() {
    let rt = rt();
    let m = rt.load("shapes.obc", example("shapes.obc")).unwrap();
    let c = m.new_object("Circle").unwrap();
    m.set_field(&c, "r", 2.0f64).unwrap();
    m.set_field(&c, "id", 7i32).unwrap();
    assert_eq!(m.get_field::<f64>(&c, "r").unwrap(), 2.0);
    assert_eq!(m.get_field::<i32>(&c, "id").unwrap(), 7);
    assert_eq!(c.class_name(), "Circle");
    assert!(
        m.new_object("Shape")
            .unwrap_err()
            .to_string()
            .contains("abstract")
    );
    for err in [
        m.new_object("Circel").unwrap_err(),
        m.new_ref_array("Circel", 3).unwrap_err(),
    ] {
        assert_eq!(
            err.to_string(),
            "module `shapes.obc` has no class `Circel`; did you mean `Circle`?"
        );
    }
    assert!(m.get_field::<f32>(&c, "r").is_err());
    assert!(m.set_field(&c, "nope", 1i32).is_err());
    assert!(m.set_field(&c, "r", 1i32).is_err());
}

#[test]
fn profiles_are_merged_across_workers() {
    let rt = Runtime::builder().workers(3).profile(true).build().unwrap();
    let m = rt.load("throws.obc", example("throws.obc")).unwrap();
    let n = 10_000;
    let a: Vec<i32> = (0..n).map(|j| if j % 10 == 0 { -1 } else { 1 }).collect();
    let (aa, ba, oa) = (
        rt.array(&a).unwrap(),
        rt.array(&vec![1i32; n as usize]).unwrap(),
        rt.new_array::<i32>(n as usize).unwrap(),
    );
    let c = m
        .closure("checked_div", [(&aa).into(), (&ba).into(), (&oa).into()])
        .unwrap();
    let e = match par_offload(0..i64::from(n), &c) {
        Err(OffloadError::Exceptions(e)) => e,
        other => panic!("{other:?}"),
    };
    let p = e.report.profile.expect("profiling was on");
    let k = m.program().verified().func_named("checked_div").unwrap();
    let fp = &p.funcs[k.index()];
    let branch = m
        .program()
        .verified()
        .func(k)
        .body
        .iter()
        .position(|i| matches!(i, offload::ir::Inst::BrUnless { .. }))
        .unwrap();
    // br_unless ok: taken for the 9000 non-negative numerators.
    assert_eq!(fp.branches[branch], [9000, 1000]);
    assert_eq!(fp.execs[0], u64::from(n as u32));
}
