//! Hand-checked analyses on the example kernels: back-edges, liveness and
//! frame states, plus a consistency check of every site against the verifier.

use offload_ir::analysis::{BackEdge, FuncAnalysis, Value, analyze};
use offload_ir::isa::hz;
use offload_ir::{Elem, FuncId, Type, Verified, load};

fn example(name: &str) -> Verified {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/kernels")
        .join(name);
    let src = std::fs::read_to_string(&path).unwrap();
    load(name, &src).unwrap_or_else(|e| panic!("{e}"))
}

fn kernel(v: &Verified, name: &str) -> (FuncId, FuncAnalysis) {
    let f = v.func_named(name).unwrap();
    (f, analyze(v, f))
}

fn live_names(v: &Verified, f: FuncId, a: &FuncAnalysis, bci: usize) -> Vec<String> {
    a.live_in[bci]
        .ones()
        .map(|l| v.func(f).locals[l].name.clone())
        .collect()
}

#[test]
fn saxpy_sites_and_frames() {
    let v = example("saxpy.obc");
    let (f, a) = kernel(&v, "saxpy");
    assert!(a.back_edges.is_empty());
    assert_eq!(a.cfg.blocks.len(), 1);
    let bcis: Vec<u32> = a.sites.iter().map(|s| s.bci).collect();
    // Entry poll, x[j] load, y[j] load, y[j] store.
    assert_eq!(bcis, vec![0, 8, 12, 14]);
    assert!(a.sites[0].poll && a.sites[0].hazards.is_empty());
    assert_eq!(live_names(&v, f, &a, 0), ["i", "a", "x", "y"]);
    // At x[j]: y and j are still needed (for y[j]); a and x are on the stack.
    let s = &a.sites[1];
    assert!(s.hazards.has(hz::NULL_CHECK | hz::BOUNDS_CHECK));
    let arr = Type::Array(Elem::F32, 1);
    assert_eq!(
        s.frame
            .locals
            .iter()
            .map(|&(l, t)| (v.func(f).locals[l.index()].name.as_str(), t))
            .collect::<Vec<_>>(),
        [("y", arr), ("j", Type::I32)]
    );
    assert_eq!(s.frame.stack, [arr, Type::I32, Type::F32, arr, Type::I32]);
    assert_eq!(
        s.frame.refs().collect::<Vec<_>>(),
        [
            Value::Local(offload_ir::LocalId(3)),
            Value::Stack(0),
            Value::Stack(3)
        ]
    );
    // At y[j] = ...: nothing live but the stack.
    assert!(a.sites[3].frame.locals.is_empty());
    assert_eq!(a.sites[3].frame.stack, [arr, Type::I32, Type::F32]);
    assert_eq!(a.max_frame, 7);
}

#[test]
fn mandelbrot_has_one_loop_and_divisions() {
    let v = example("mandelbrot.obc");
    let (f, a) = kernel(&v, "mandelbrot");
    assert_eq!(a.back_edges.len(), 1);
    let BackEdge { from, to } = a.back_edges[0];
    assert!(from > to);
    assert_eq!(a.loop_headers, vec![to]);
    let header = a.site_at(to).expect("loop header is a site");
    assert!(header.poll);
    // In the loop: everything but t and p... p is still needed for out[p].
    assert_eq!(
        live_names(&v, f, &a, to as usize),
        ["max_iter", "out", "p", "cx", "cy", "zx", "zy", "n"]
    );
    let divs = a
        .sites
        .iter()
        .filter(|s| s.hazards.has(hz::DIV_CHECK))
        .count();
    assert_eq!(divs, 2, "p % w and p / w");
}

#[test]
fn linked_list_loops_allocation_and_nulls() {
    let v = example("linkedlist.obc");
    let (f, a) = kernel(&v, "linked_list");
    assert_eq!(
        a.back_edges
            .iter()
            .map(|e| (e.from, e.to))
            .collect::<Vec<_>>(),
        [(22, 4), (35, 25)]
    );
    let alloc = a.site_at(8).unwrap();
    assert!(alloc.hazards.has(hz::ALLOCATES));
    assert_eq!(live_names(&v, f, &a, 8), ["i", "n", "out", "head", "k"]);
    // `head` was null on entry and a Node after the first push: the merge is Node.
    let node = Type::Class(v.class_named("Node").unwrap());
    assert!(
        a.site_at(4)
            .unwrap()
            .frame
            .locals
            .iter()
            .any(|&(l, t)| l.index() == 3 && t == node)
    );
    // At `putfield Node.next` the old head is on the stack, the local is dead.
    let put = a.site_at(18).unwrap();
    assert_eq!(put.frame.stack, [node, node]);
    assert!(!live_names(&v, f, &a, 18).contains(&"head".to_string()));
}

#[test]
fn shapes_virtual_call_site() {
    let v = example("shapes.obc");
    let (_, a) = kernel(&v, "shape_areas");
    let call = a
        .sites
        .iter()
        .find(|s| s.hazards.has(hz::CALLS))
        .expect("callvirt site");
    assert!(call.hazards.has(hz::NULL_CHECK));
    let shape = Type::Class(v.class_named("Shape").unwrap());
    assert_eq!(
        call.frame.stack,
        [Type::Array(Elem::F64, 1), Type::I32, shape]
    );
    assert_eq!(
        a.sites
            .iter()
            .filter(|s| s.hazards.has(hz::ALLOCATES))
            .count(),
        3
    );
    // Vtable: Square overrides Rect.area in the slot Shape.area introduced.
    let sq = v.class_named("Square").unwrap();
    let vt = v.vtable(sq);
    assert_eq!(vt.len(), 1);
    assert_eq!(v.func(vt[0]).name, "Square.area");
    assert_eq!(v.vtable_slot(v.func_named("Circle.area").unwrap()), Some(0));
}

#[test]
fn every_site_of_every_example_agrees_with_the_verifier() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // The bytecode versions (`.ofk` beside them is source).
        if path.extension().is_none_or(|e| e != "obc") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let v = example(&name);
        for f in (0..v.funcs.len())
            .map(FuncId::new)
            .filter(|&f| !v.func(f).is_abstract())
        {
            let a = analyze(&v, f);
            let types = v.types(f);
            for s in &a.sites {
                let frame = types.frames[s.bci as usize]
                    .as_ref()
                    .expect("sites are reachable");
                assert_eq!(s.frame.stack, frame.stack, "{name} site {}", s.bci);
                for &(l, t) in &s.frame.locals {
                    assert_eq!(
                        frame.locals[l.index()],
                        Some(t),
                        "{name}: live local must be assigned at {}",
                        s.bci
                    );
                    assert!(a.live_in[s.bci as usize].contains(l.index()));
                }
                let op = v.func(f).body[s.bci as usize].opcode();
                assert_eq!(s.hazards, op.hazards());
                assert_eq!(s.poll, s.bci == 0 || a.loop_headers.contains(&s.bci));
            }
            // Every hazardous reachable instruction has a site.
            for (bci, inst) in v.func(f).body.iter().enumerate() {
                if types.frames[bci].is_some() && !inst.opcode().hazards().is_empty() {
                    assert!(a.site_at(bci as u32).is_some(), "{name}: no site at {bci}");
                }
            }
            assert_eq!(
                a.max_frame,
                a.sites.iter().map(|s| s.frame.len()).max().unwrap_or(0)
            );
        }
    }
}
