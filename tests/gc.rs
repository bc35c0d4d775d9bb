//! The collector in the runtime: what survives a collection (handles,
//! fields, reference arrays, save-area records, captures), exhaustion and
//! recovery, collections during launches on every device, and the figures
//! it reports.

use offload::jit::Injection;
use offload::{Arg, Device, GcPolicy, OffloadError, Runtime};

/// `Node { val, data }`; `fill` keeps a node per workitem in `out`, `churn`
/// makes one per workitem and overwrites a ring of `m` with it (garbage
/// that escaped the workitem), `check` reads them back, `hold` keeps a node
/// in a local across an allocation of garbage and a later site.
const NODES: &str = include_str!("../examples/gc/nodes.obc");

fn runtime(device: Device, max: usize, gc: GcPolicy) -> Runtime {
    Runtime::builder()
        .device(device)
        .workers(2)
        .initial_heap(max.min(1 << 20))
        .max_heap(max)
        .gc(gc)
        .build()
        .unwrap()
}

fn verify(rt: &Runtime) -> offload::heap::WalkStats {
    rt.verify_heap(&[]).unwrap()
}

#[test]
fn what_handles_fields_and_reference_arrays_reach_survives_intact() {
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = runtime(device, 64 << 20, GcPolicy::default());
        let m = rt.load("nodes.obc", NODES).unwrap();
        let n = 2000;
        let kept = m.new_ref_array("Node", n).unwrap();
        let dropped = m.new_ref_array("Node", n).unwrap();
        for arr in [&dropped, &kept] {
            let c = m.closure("fill", [Arg::from(arr)]).unwrap();
            rt.par_offload(0..n as i64, &c).unwrap();
        }
        // Host-made objects: one held, one only through a field of it.
        let o = m.new_object("Node").unwrap();
        let data = rt.array(&[7i64, 8, 9]).unwrap();
        m.set_field(&o, "val", 41i64).unwrap();
        m.set_field(&o, "data", &data).unwrap();
        drop(data);
        let garbage: Vec<_> = (0..100)
            .map(|_| rt.new_array::<i32>(100).unwrap())
            .collect();
        drop(garbage);
        drop(dropped);
        let before = rt.heap().used();
        let st = rt.collect().unwrap();
        assert_eq!(st.before, before);
        assert!(st.freed() > n as u64 * 100, "{st}");
        // Heap use is the live data: the kept nodes and their arrays, the
        // held object and its array — and the padding that starts a page
        // where the tag of the pages objects come from changes (the array,
        // the launch's mixed pages, the object's class page, the array's).
        let walk = verify(&rt);
        assert!(walk.fillers <= 3, "{walk}");
        assert!(walk.filler_bytes < 3 * 4096, "{walk}");
        assert_eq!(walk.bytes + 16, rt.heap().used());
        assert_eq!(st.after, rt.heap().used());
        let node = 24;
        let arr10 = 8 + 80;
        let live = (8 + 4 * n as u64).div_ceil(8) * 8 + n as u64 * (node + arr10) + node + 32;
        assert_eq!(walk.bytes - walk.filler_bytes, live, "{device:?}: {walk}");
        // Contents intact, through the moved handles.
        let out = rt.new_array::<i64>(n).unwrap();
        let c = m
            .closure("check", [Arg::from(&kept), Arg::from(&out)])
            .unwrap();
        rt.par_offload(0..n as i64, &c).unwrap();
        let got = rt.read(&out).unwrap();
        assert!(got.iter().enumerate().all(|(i, &v)| v == 2 * i as i64));
        assert_eq!(m.get_field::<i64>(&o, "val").unwrap(), 41);
        let d = m.get_ref_field(&o, "data").unwrap();
        assert!(!d.is_null());
        let fields = m.fields(&o).unwrap();
        assert_eq!(fields[1].1, "i64[]");
        assert_eq!(rt.gc_totals().collections, 1);
    }
}

#[test]
fn a_record_holding_references_is_updated_by_a_collection_before_its_replay() {
    // Every workitem deopts at `getfield Node.val` holding its node, and a
    // collection runs before each batch of replays: the junk allocated
    // before the node is freed, so the node moves between its deopt and
    // its replay.
    let gc = GcPolicy {
        collect_before_replays: true,
        verify: true,
        ..GcPolicy::default()
    };
    let probe = Runtime::builder().device(Device::Cpu).build().unwrap();
    let m = probe.load("nodes.obc", NODES).unwrap();
    let k = m.program().verified().func_named("hold").unwrap();
    let site = m
        .program()
        .analysis(k)
        .unwrap()
        .sites
        .iter()
        .find(|s| {
            let body = &m.program().verified().func(k).body;
            matches!(body[s.bci as usize], offload::ir::Inst::GetField { .. })
        })
        .expect("a getfield site")
        .bci;
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .deopt_records(16)
        .inject(Injection {
            site_bci: site,
            modulus: 1,
            remainder: 0,
            reason: None,
        })
        .gc(gc)
        .build()
        .unwrap();
    let m = rt.load("nodes.obc", NODES).unwrap();
    let n = 1000;
    let out = rt.new_array::<i64>(n).unwrap();
    let c = m.closure("hold", [Arg::from(&out)]).unwrap();
    let r = rt.par_offload(0..n as i64, &c).unwrap();
    assert_eq!(r.replayed, n as u64, "{r}");
    assert!(r.gc.collections > 0 && r.gc.moved > 0, "{r}");
    let got = rt.read(&out).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == 3 * i as i64));
    verify(&rt);
}

#[test]
fn garbage_that_escapes_the_nursery_is_collected_during_the_launch() {
    // About 120 bytes per workitem over a million workitems with a 16 MiB
    // heap: the heap fills many times over, and the launch completes.
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = runtime(device, 16 << 20, GcPolicy::default());
        let m = rt.load("nodes.obc", NODES).unwrap();
        let ring = m.new_ref_array("Node", 1000).unwrap();
        let c = m
            .closure("churn", [Arg::from(&ring), Arg::I32(1000)])
            .unwrap();
        let n: i64 = if device == Device::Cpu {
            1_000_000
        } else {
            500_000
        };
        let r = rt.par_offload(0..n, &c).unwrap();
        assert_eq!(r.completed, n as u64);
        assert!(r.gc.collections >= 2, "{device:?}: {r}");
        assert!(r.gc.freed > 16 << 20, "{device:?}: {}", r.gc);
        let text = r.to_string();
        assert!(text.contains("gc: "), "{text}");
        // Each ring slot holds a node of a workitem of its residue.
        let out = rt.new_array::<i64>(1000).unwrap();
        let c = m
            .closure("check", [Arg::from(&ring), Arg::from(&out)])
            .unwrap();
        rt.par_offload(0..1000, &c).unwrap();
        for (j, v) in rt.read(&out).unwrap().into_iter().enumerate() {
            assert_eq!((v / 2) % 1000, j as i64, "{device:?}");
        }
        verify(&rt);
    }
}

#[test]
fn live_data_that_does_not_fit_is_out_of_memory_and_the_runtime_recovers() {
    let rt = runtime(Device::Cpu, 16 << 20, GcPolicy::default());
    let m = rt.load("nodes.obc", NODES).unwrap();
    // 200,000 nodes of 112 bytes: 21 MiB, more than the heap.
    let n = 200_000;
    let out = m.new_ref_array("Node", n).unwrap();
    let c = m.closure("fill", [Arg::from(&out)]).unwrap();
    match rt.par_offload(0..n as i64, &c) {
        Err(OffloadError::Exceptions(e)) => {
            assert_eq!(e.first.kind, offload::ir::ExceptionKind::OutOfMemory);
            assert!(e.count > 0 && e.count < n as u64, "{}", e.count);
            assert_eq!(e.report.completed + e.report.threw, n as u64);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    verify(&rt);
    // Still full: a large host allocation fails cleanly.
    assert!(rt.new_array::<i64>(1 << 20).is_err());
    // The user drops what kept the nodes: the next allocation succeeds.
    drop(c);
    drop(out);
    let big = rt.new_array::<i64>(1 << 20).unwrap();
    assert_eq!(big.len(), 1 << 20);
    assert!(rt.gc_totals().collections >= 2);
    verify(&rt);
}

#[test]
fn a_long_session_of_launches_does_not_leak() {
    // Each launch keeps a fresh array of nodes and drops the last one's:
    // with collections due between launches, the heap stays near twice
    // the live data, far below its maximum.
    let rt = runtime(Device::Cpu, 256 << 20, GcPolicy::default());
    let m = rt.load("nodes.obc", NODES).unwrap();
    let mut peak = 0;
    for _ in 0..60 {
        let out = m.new_ref_array("Node", 20_000).unwrap();
        let c = m.closure("fill", [Arg::from(&out)]).unwrap();
        rt.par_offload(0..20_000, &c).unwrap();
        peak = peak.max(rt.heap().used());
    }
    // 60 launches keep 60 x 2.2 MiB; live at any time is one launch's.
    assert!(peak < 16 << 20, "peak {peak}");
    assert!(rt.gc_totals().collections >= 5, "{}", rt.gc_totals());
    verify(&rt);
}

#[test]
fn memory_a_collection_frees_goes_back_to_the_system() {
    // A 1 MiB heap that grew to hold 48 MiB: once that is garbage, the
    // collection gives the memory back (it had stayed committed), and what
    // is committed again reads as zero.
    let rt = runtime(Device::Cpu, 256 << 20, GcPolicy::default());
    let start = rt.heap().committed();
    let big = rt.new_array::<i64>(6 << 20).unwrap();
    rt.write(&big, 0, &vec![-1i64; 6 << 20]).unwrap();
    assert!(rt.heap().committed() >= 48 << 20);
    drop(big);
    let st = rt.collect().unwrap();
    assert!(rt.heap().committed() <= 2 * start.max(2 << 20), "{st}");
    assert!(st.released >= 40 << 20, "{st}");
    assert!(
        st.to_string().contains("bytes of memory given back"),
        "{st}"
    );
    let again = rt.new_array::<i64>(6 << 20).unwrap();
    assert!(rt.read(&again).unwrap().iter().all(|&x| x == 0));
    // A heap in use keeps what it uses and room to grow: nothing is given
    // back while the data lives.
    let st = rt.collect().unwrap();
    assert_eq!(st.released, 0, "{st}");
    assert!(rt.heap().committed() >= 48 << 20);
    verify(&rt);
}

#[test]
fn redefined_classes_keep_a_healthy_heap() {
    let rt = runtime(Device::Cpu, 64 << 20, GcPolicy::default());
    let old = rt
        .load("a.obc", "class P {\n    field x: i64\n}\n")
        .unwrap();
    let o = old.new_object("P").unwrap();
    let _new = rt
        .load(
            "a.obc",
            "class P {\n    field x: i64\n    field y: i64\n}\n",
        )
        .unwrap();
    let _o2 = _new.new_object("P").unwrap();
    verify(&rt);
    rt.collect().unwrap();
    let w = verify(&rt);
    assert_eq!(w.objects, 2);
    drop(o);
    rt.collect().unwrap();
    assert_eq!(verify(&rt).objects, 1);
}

#[path = "common/programs.rs"]
mod programs;

#[path = "common/examples.rs"]
mod examples;

/// GC stress: every second TLAB refill finds eden exhausted (so every launch that
/// allocates collects, from the interpreter that replays or runs the
/// allocating workitem), a collection runs before every batch of replays,
/// and the heap is verified after each.
fn stress() -> GcPolicy {
    GcPolicy {
        stress: 2,
        collect_before_replays: true,
        verify: true,
        ..GcPolicy::default()
    }
}

#[test]
fn random_programs_agree_with_the_interpreter_under_gc_stress() {
    use offload_testkit::differential::Differ;
    use offload_testkit::reference::Rng;
    for device in [Device::Cpu, Device::Interpreter] {
        let differ = Differ::with_gc(device, stress()).unwrap();
        let mut rng = Rng::new(2028);
        let mut compared = 0;
        for case in 0..150 {
            let Some(module) = programs::generate(&mut rng) else {
                continue;
            };
            let text = offload::ir::print_module(&module);
            match differ.compare(&text, rng.next_u64()) {
                Ok(c) => compared += c.kernels,
                Err(why) => panic!("{device:?}, case {case}: {why}"),
            }
        }
        assert!(compared > 100, "only {compared} kernels compared");
    }
}

#[test]
fn the_example_kernels_run_exactly_once_under_gc_stress() {
    // The list kernel of `examples/kernels/linkedlist.obc`'s shape:
    // every workitem builds a list and walks it, allocating across many
    // refills, each of which collects.
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .tlab_bytes(1024)
            .gc(stress())
            .build()
            .unwrap();
        let m = rt.load("nodes.obc", NODES).unwrap();
        let n = 3000;
        let out = m.new_ref_array("Node", n).unwrap();
        let c = m.closure("fill", [Arg::from(&out)]).unwrap();
        let r = rt.par_offload(0..n as i64, &c).unwrap();
        assert_eq!(r.completed, n as u64, "{r}");
        assert!(r.gc.collections > 10, "{device:?}: {r}");
        let sums = rt.new_array::<i64>(n).unwrap();
        let c = m
            .closure("check", [Arg::from(&out), Arg::from(&sums)])
            .unwrap();
        rt.par_offload(0..n as i64, &c).unwrap();
        let got = rt.read(&sums).unwrap();
        assert!(
            got.iter().enumerate().all(|(i, &v)| v == 2 * i as i64),
            "{device:?}"
        );
        verify(&rt);
    }
}

#[test]
fn every_example_kernel_agrees_with_the_interpreter_under_gc_stress() {
    use offload_testkit::differential::Differ;
    let files = examples::examples();
    for device in [Device::Cpu, Device::Interpreter] {
        let differ = Differ::with_gc(device, stress()).unwrap();
        let mut kernels = 0;
        for (i, (f, text)) in files.iter().enumerate() {
            for s in 0..3u64 {
                let c = differ
                    .compare(text, 1000 * i as u64 + s)
                    .unwrap_or_else(|why| panic!("{device:?}, {f}: {why}"));
                kernels += c.kernels;
            }
        }
        assert!(kernels >= 30, "{device:?}: only {kernels}");
    }
}

/// Each workitem needs 4.8 MB of an 8 MiB heap: two cannot run at once,
/// but each fits alone. A worker whose allocation finds no room after a
/// collection waits for the other to make progress and collects again
/// (`offload_host_interp::room`), so every workitem completes — none throws
/// `OutOfMemory` because of when it ran.
#[test]
fn workitems_that_each_fit_alone_all_complete_with_two_workers() {
    const BIG: &str = "#[kernel]\nfn big(i: i64, n: i32, out: &mut [i64]) {\n    let mut a = vec![0i64; n];\n    a[(i as i32) % n] = i + 1;\n    let mut s = 0i64;\n    for k in 0..n {\n        s = s + a[k];\n    }\n    out[i] = s;\n}\n";
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = runtime(device, 8 << 20, GcPolicy::default());
        let m = rt.load_source("big.ofk", BIG).unwrap();
        let out = rt.new_array::<i64>(16).unwrap();
        let c = m
            .closure("big", [600_000i32.into(), (&out).into()])
            .unwrap();
        let r = rt.par_offload(0..16, &c).unwrap();
        assert_eq!(r.completed, 16, "{device:?}: {r}");
        assert_eq!(rt.read(&out).unwrap(), (1..=16).collect::<Vec<i64>>());
        assert!(r.gc.collections >= 15, "{device:?}: {r}");
        verify(&rt);
        // Run again after an explicit collection: the same.
        rt.collect().unwrap();
        assert_eq!(rt.par_offload(0..16, &c).unwrap().completed, 16);
        // A workitem that needs more than the heap still throws, at once.
        let c = m
            .closure("big", [1_100_000i32.into(), (&out).into()])
            .unwrap();
        match rt.par_offload(0..4, &c) {
            Err(OffloadError::Exceptions(e)) => {
                assert_eq!(e.first.kind, offload::ir::ExceptionKind::OutOfMemory);
                assert_eq!(e.count, 4, "{device:?}");
            }
            other => panic!("{device:?}: expected OutOfMemory, got {other:?}"),
        }
    }
}

#[test]
fn a_collection_due_when_a_launch_begins_is_part_of_its_report() {
    // Arrays made and dropped before a launch leave the heap due for a
    // collection, which the launch runs first: its time is the report's
    // `collect` phase (inside the total, which the phases add up to) and
    // its pause is in the report's `gc`. (The total was the wall time less
    // that collection: 8 ms short on a first launch over 3x10^7 floats.)
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = runtime(device, 64 << 20, GcPolicy::default());
        let m = rt
            .load_source("saxpy.ofk", include_str!("../examples/kernels/saxpy.ofk"))
            .unwrap();
        for _ in 0..4 {
            drop(rt.new_array::<f32>(1 << 20).unwrap());
        }
        let x = rt.array(&[1.0f32; 1000]).unwrap();
        let y = rt.array(&[2.0f32; 1000]).unwrap();
        let c = m
            .closure("saxpy", [2.0f32.into(), (&x).into(), (&y).into()])
            .unwrap();
        let r = rt.par_offload(0..1000, &c).unwrap();
        assert_eq!(r.gc.collections, 1, "{device:?}: {r}");
        assert!(!r.timings.collect.is_zero(), "{r}");
        assert!(
            r.timings.collect >= r.gc.pause,
            "the pause is within the phase: {r}"
        );
        let sum: std::time::Duration = r.timings.parts().iter().map(|p| p.1).sum();
        assert_eq!(sum, r.timings.total, "{r}");
        assert!(r.to_string().contains(" (collect "), "{r}");
        // The next launch has nothing to collect first.
        let r = rt.par_offload(0..1000, &c).unwrap();
        assert_eq!(
            (r.gc.collections, r.timings.collect),
            (0, Default::default()),
            "{r}"
        );
        assert!(!r.to_string().contains("collect "), "{r}");
    }
}

#[test]
fn a_collections_pause_is_one_figure_wherever_it_is_shown() {
    // `:gc` prints what `collect` returns, `:heap` the runtime's totals:
    // they said 11.1 µs and 11.3 µs for one collection (the totals added
    // the time to reach the safepoint, the collection's own figure not).
    let rt = runtime(Device::Cpu, 64 << 20, GcPolicy::default());
    let a = rt.new_array::<f32>(1 << 16).unwrap();
    let st = rt.collect().unwrap();
    let totals = rt.gc_totals();
    assert_eq!((totals.pause, totals.max_pause), (st.pause(), st.pause()));
    assert_eq!(st.pause(), st.to_safepoint + st.mark + st.compact);
    assert_eq!(rt.last_collection().map(|l| l.pause()), Some(st.pause()));
    // Objects and arrays are counted apart, as the heap walk counts them
    // (`:gc` said "2 objects" where `:heap` said "0 objects, 2 arrays").
    let walk = rt.verify_heap(&[]).unwrap();
    assert_eq!(st.live_arrays, walk.arrays);
    assert_eq!(st.live_objects - st.live_arrays, walk.objects);
    assert_eq!(st.live_arrays, 1);
    drop(a);
}
