//! Resume: for every deopt site of every example kernel, run a workitem to
//! that site, capture its frame state, resume it in a fresh interpreter, and
//! check that the heap ends up exactly as after the uninterrupted run — the
//! entry point deopt replay relies on. The first occurrence of each site goes
//! through a save record (encode, store in the save area, decode, resume).

use offload::deopt::{DeoptMetadata, Record, SaveArea};
use offload::heap::layout::Header;
use offload::heap::{AllocPolicy, Allocator, Ref};
use offload::interp::{Interpreter, Outcome, ResumeFrame};
use offload::ir::ExceptionKind;
use offload::{Arg, Runtime};
use offload_testkit::kernels::example;

fn snapshot(rt: &Runtime, arrays: &[Ref]) -> Vec<Vec<u32>> {
    arrays
        .iter()
        .map(|&r| {
            let h = rt.heap().header(r).unwrap();
            let bytes = h.size().unwrap() as usize;
            (0..bytes / 4)
                .map(|i| rt.heap().load32(r.byte_offset() + 4 * i).unwrap())
                .collect()
        })
        .collect()
}

fn restore(rt: &Runtime, arrays: &[Ref], snap: &[Vec<u32>]) {
    // SAFETY: only array elements are written (offsets past each header),
    // with no launch running.
    let heap = unsafe { rt.raw_heap() };
    for (r, words) in arrays.iter().zip(snap) {
        for (i, &w) in words.iter().enumerate().skip(2) {
            heap.store32(r.byte_offset() + 4 * i, w).unwrap();
        }
    }
}

fn check_example(file: &str, kernel: &str, args: Vec<Arg>, rt: &Runtime, workitems: &[i64]) {
    let m = rt.load(file, example(file)).unwrap();
    let arrays: Vec<Ref> = args
        .iter()
        .filter_map(|a| match a {
            Arg::Ref(h) => {
                let r = h.root().get();
                matches!(rt.heap().header(r), Ok(Header::Array { .. })).then_some(r)
            }
            _ => None,
        })
        .collect();
    let c = m.closure(kernel, args).unwrap();
    let prog = m.program();
    let k = c.kernel();
    let caps = c.captures();
    let analysis = prog.analysis(k).unwrap();
    // SAFETY: the interpreters below allocate and write through the
    // heap as a launch's do (headers true, the heap parseable), and no
    // launch runs meanwhile.
    let heap = unsafe { rt.raw_heap() };
    let alloc = Allocator::new(heap, AllocPolicy::default(), 1);
    let meta = DeoptMetadata::new(analysis, k, 0);
    let area = SaveArea::new(2, meta.layout);
    let initial = snapshot(rt, &arrays);

    // The uninterrupted run.
    let mut baseline: Vec<Option<ExceptionKind>> = Vec::new();
    for &w in workitems {
        let mut it = Interpreter::new(prog, heap, &alloc, 0);
        baseline.push(it.run_kernel(k, w, &caps).err().map(|e| e.kind));
    }
    let expected = snapshot(rt, &arrays);

    let mut reached = vec![false; analysis.sites.len()];
    for (si, site) in analysis.sites.iter().enumerate() {
        for occurrence in [0u64, 2] {
            restore(rt, &arrays, &initial);
            for (wi, &w) in workitems.iter().enumerate() {
                let mut first = Interpreter::new(prog, heap, &alloc, 0);
                let outcome = first.run_to_site(k, w, &caps, site.bci, occurrence);
                let result = match outcome {
                    Ok(Outcome::Stopped(values)) => {
                        reached[si] = true;
                        assert_eq!(values.len(), site.frame.len());
                        let mut fresh = Interpreter::new(prog, heap, &alloc, 0);
                        let result = if occurrence == 0 {
                            // Through a save record, as deopt replay does.
                            let record = Record {
                                workitem: w,
                                site: site.id,
                                reason: meta.sites[si].reasons[0],
                                values,
                            };
                            area.write(wi % area.slots(), &record).unwrap();
                            let back = area
                                .read(wi % area.slots(), &meta)
                                .unwrap()
                                .expect("just written");
                            assert_eq!(back, record);
                            fresh.resume_record(&meta, &back).expect("a valid record")
                        } else {
                            let frames = [ResumeFrame {
                                func: k,
                                bci: site.bci,
                                values,
                            }];
                            fresh
                                .resume(Some(w), &frames)
                                .expect("a valid resume request")
                                .map(|_| ())
                        };
                        result.err().map(|e| {
                            assert_eq!(e.workitem, Some(w));
                            e.kind
                        })
                    }
                    Ok(Outcome::Finished(_)) => None,
                    Err(e) => Some(e.kind),
                };
                assert_eq!(
                    result, baseline[wi],
                    "{kernel}: workitem {w} resumed at site @{} (occurrence {occurrence})",
                    site.bci
                );
            }
            assert_eq!(
                snapshot(rt, &arrays),
                expected,
                "{kernel}: heap differs after resuming at site @{} (occurrence {occurrence})",
                site.bci
            );
        }
    }
    let missed: Vec<u32> = analysis
        .sites
        .iter()
        .zip(&reached)
        .filter(|(_, r)| !**r)
        .map(|(s, _)| s.bci)
        .collect();
    assert!(
        missed.is_empty(),
        "{kernel}: sites never reached by the chosen workitems: {missed:?}"
    );
}

#[test]
fn resume_from_every_site_of_every_example() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let f = |v: &[f32]| rt.array(v).unwrap();
    let w: &[i64] = &[0, 1, 2, 5, 7];

    let (x, y) = (f(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]), f(&[0.5; 8]));
    check_example(
        "saxpy.obc",
        "saxpy",
        vec![3.0f32.into(), (&x).into(), (&y).into()],
        &rt,
        w,
    );

    let img = rt.new_array::<i32>(64).unwrap();
    check_example(
        "mandelbrot.obc",
        "mandelbrot",
        vec![8i32.into(), 8i32.into(), 20i32.into(), (&img).into()],
        &rt,
        w,
    );

    let b = offload_testkit::reference::Bodies::random(8, 1);
    let arrs: Vec<Arg> = [&b.px, &b.py, &b.pz, &b.m, &b.vx, &b.vy, &b.vz]
        .iter()
        .map(|v| Arg::from(&f(v)))
        .collect();
    let mut args = vec![8i32.into(), 0.01f32.into(), 0.01f32.into()];
    args.extend(arrs);
    check_example("nbody.obc", "nbody", args, &rt, w);

    let (s, x, t) = offload_testkit::reference::options(8, 2);
    let (call, put) = (
        rt.new_array::<f32>(8).unwrap(),
        rt.new_array::<f32>(8).unwrap(),
    );
    check_example(
        "blackscholes.obc",
        "blackscholes",
        vec![
            0.02f32.into(),
            0.3f32.into(),
            (&f(&s)).into(),
            (&f(&x)).into(),
            (&f(&t)).into(),
            (&call).into(),
            (&put).into(),
        ],
        &rt,
        w,
    );

    let (a, bm, cm) = (
        f(&[1.5; 16]),
        f(&[0.25; 16]),
        rt.new_array::<f32>(16).unwrap(),
    );
    check_example(
        "matmul.obc",
        "matmul",
        vec![4i32.into(), (&a).into(), (&bm).into(), (&cm).into()],
        &rt,
        w,
    );

    let (data, bins) = (
        rt.array(&[3i32, -9, 12, 7, 7, 100, 5, 1]).unwrap(),
        rt.new_array::<i32>(4).unwrap(),
    );
    check_example(
        "histogram.obc",
        "histogram",
        vec![(&data).into(), (&bins).into()],
        &rt,
        w,
    );

    let out = rt.new_array::<f64>(8).unwrap();
    check_example(
        "alloc.obc",
        "alloc_vectors",
        vec![5i32.into(), (&out).into()],
        &rt,
        w,
    );

    let sums = rt.new_array::<i64>(8).unwrap();
    check_example(
        "linkedlist.obc",
        "linked_list",
        vec![4i32.into(), (&sums).into()],
        &rt,
        w,
    );

    let areas = rt.new_array::<f64>(8).unwrap();
    check_example("shapes.obc", "shape_areas", vec![(&areas).into()], &rt, w);

    let (na, nb, no) = (
        rt.array(&[4i32, -1, 9, 3, 3, 8, 1, 1]).unwrap(),
        rt.array(&[2i32, 1, 0, 1, 1, 2, 1, 1]).unwrap(),
        rt.new_array::<i32>(8).unwrap(),
    );
    check_example(
        "throws.obc",
        "checked_div",
        vec![(&na).into(), (&nb).into(), (&no).into()],
        &rt,
        w,
    );
}

#[test]
fn bad_resume_requests_are_errors() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let m = rt.load("saxpy.obc", example("saxpy.obc")).unwrap();
    let prog = m.program();
    let k = prog.verified().func_named("saxpy").unwrap();
    // SAFETY: as in `check_example`.
    let heap = unsafe { rt.raw_heap() };
    let alloc = Allocator::new(heap, AllocPolicy::default(), 1);
    let mut it = Interpreter::new(prog, heap, &alloc, 0);
    assert!(it.resume(Some(0), &[]).is_err());
    let e = it
        .resume(
            Some(0),
            &[ResumeFrame {
                func: k,
                bci: 1,
                values: vec![],
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a deopt site"), "{e}");
    let e = it
        .resume(
            Some(0),
            &[ResumeFrame {
                func: k,
                bci: 0,
                values: vec![1],
            }],
        )
        .unwrap_err();
    assert!(e.to_string().contains("4 live values, 1 given"), "{e}");
}
