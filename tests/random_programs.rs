//! Random valid kernels from the generator run through `par_offload` on the
//! interpreter: whatever they do, the result is completion or exceptions —
//! never a panic, a hang or a corrupt heap.

use offload::ir::{Elem, Type, print_module};
use offload::{Arg, OffloadError, Runtime, par_offload};
use offload_testkit::differential::{Shape, order_free};
use offload_testkit::reference::Rng;

#[path = "common/programs.rs"]
mod programs;

fn capture(rt: &Runtime, m: &offload::Module, t: Type, rng: &mut Rng) -> Option<Arg> {
    Some(match t {
        Type::I32 => Arg::I32(rng.below(7) as i32 - 2),
        Type::I64 => Arg::I64(rng.below(7) as i64 - 2),
        Type::F32 => Arg::F32(rng.f32_in(-4.0, 4.0)),
        Type::F64 => Arg::F64(f64::from(rng.f32_in(-4.0, 4.0))),
        Type::Array(Elem::I32, 1) => (&rt
            .array(&(0..5).map(|i| i * 3 - 4).collect::<Vec<i32>>())
            .ok()?)
            .into(),
        Type::Array(Elem::I64, 1) => (&rt
            .array(&(0..5).map(|i| i * 5 - 7).collect::<Vec<i64>>())
            .ok()?)
            .into(),
        Type::Array(Elem::F32, 1) => (&rt.array(&[0.5f32, -1.0, 2.0, 0.0, 3.5]).ok()?).into(),
        Type::Array(Elem::F64, 1) => (&rt.array(&[0.25f64, -2.0, 1.0, 0.0, 8.0]).ok()?).into(),
        Type::Class(c) => {
            let name = m.program().verified().class(c).name.clone();
            (&m.new_object(&name).ok()?).into()
        }
        _ => return None,
    })
}

#[test]
fn random_kernels_complete_or_throw() {
    let rt = Runtime::builder()
        .workers(2)
        .max_heap(512 << 20)
        .build()
        .unwrap();
    let mut rng = Rng::new(2026);
    let mut ran = 0;
    let mut threw = 0;
    let mut loaded: Vec<offload::Module> = Vec::new();
    for case in 0..300 {
        let Some(module) = programs::generate(&mut rng) else {
            continue;
        };
        let text = print_module(&module);
        let m = rt
            .load(&format!("case{case}.obc"), &text)
            .unwrap_or_else(|e| panic!("generated module does not load: {e}\n{text}"));
        for k in m.kernels() {
            let kid = m.program().verified().func_named(&k).unwrap();
            let params: Vec<Type> = m
                .program()
                .verified()
                .func(kid)
                .param_types()
                .skip(1)
                .collect();
            let Some(args) = params
                .iter()
                .map(|&t| capture(&rt, &m, t, &mut rng))
                .collect::<Option<Vec<Arg>>>()
            else {
                continue;
            };
            let c = m
                .closure(&k, args)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
            if std::env::var_os("OFFLOAD_TRACE_CASES").is_some() {
                eprintln!("case {case} kernel {k}\n{text}");
            }
            match par_offload(0..8, &c) {
                Ok(r) => assert_eq!(r.completed, 8),
                Err(OffloadError::Exceptions(e)) => {
                    assert_eq!(e.count + e.report.completed, 8);
                    threw += 1;
                }
                Err(e) => panic!("case {case}: unexpected error {e}\n{text}"),
            }
            ran += 1;
        }
        loaded.push(m);
        let all: Vec<&offload::Module> = loaded.iter().collect();
        rt.verify_heap(&all)
            .unwrap_or_else(|e| panic!("case {case}: heap corrupt: {e}\n{text}"));
    }
    assert!(ran > 200, "only {ran} kernels ran");
    assert!(
        threw > 10 && threw < ran,
        "a mix of completing and throwing kernels: {threw} of {ran} threw"
    );
}

/// The generator's race-free mode (`GenConfig::splittable`), which the
/// split suites (`tests/gpu_split.rs`) rely on: run one workitem per
/// launch in reverse order, the arrays and the workitems that throw are
/// those of one launch in order (`differential::order_free`) — no
/// workitem reads or writes what another writes.
#[test]
fn race_free_kernels_end_the_same_in_any_order() {
    let rt = Runtime::builder()
        .workers(1)
        .device(offload::Device::Interpreter)
        .max_heap(512 << 20)
        .build()
        .unwrap();
    let window = 5;
    let shape = Shape {
        workitems: 16,
        elements: 16 * window as usize,
    };
    let cfg = offload::ir::fuzzgen::GenConfig::splittable(window);
    let mut rng = Rng::new(52);
    let (mut kernels, mut wrote) = (0, 0);
    for case in 0..200 {
        let Some(module) = programs::generate_with(&mut rng, &cfg) else {
            continue;
        };
        let c = order_free(&rt, &print_module(&module), rng.next_u64(), shape)
            .unwrap_or_else(|e| panic!("case {case}: {e}"));
        kernels += c.kernels;
        wrote += c.wrote;
    }
    assert!(kernels > 150, "only {kernels} kernels ran");
    assert!(
        wrote > kernels / 4,
        "only {wrote} of {kernels} kernels wrote an array"
    );
}

/// `order_free` finds workitems that share what they write: a kernel whose
/// workitems read and write one element, and one whose workitem `i` reads
/// the element workitem `i + 1` writes; not one that reads an array nobody
/// writes.
#[test]
fn order_free_finds_workitems_that_share_what_they_write() {
    let rt = Runtime::builder()
        .workers(1)
        .device(offload::Device::Interpreter)
        .build()
        .unwrap();
    let shape = Shape {
        workitems: 16,
        elements: 20,
    };
    let shared = "kernel k(i: i64, a: i64[]) {
    load a
    i32.const 0
    load a
    i32.const 0
    i64.aload
    i64.const 3
    i64.mul
    load i
    i64.add
    i64.astore
    ret
}
";
    let neighbour = "kernel k(i: i64, a: i64[]) {
    load a
    load i
    i64.to_i32
    load a
    load i
    i64.to_i32
    i32.const 1
    i32.add
    i64.aload
    i64.const 1
    i64.add
    i64.astore
    ret
}
";
    let reads_only = "kernel k(i: i64, a: i64[], b: i64[]) {
    load a
    load i
    i64.to_i32
    load b
    i32.const 3
    i64.aload
    load i
    i64.add
    i64.astore
    ret
}
";
    for (name, text) in [("shared", shared), ("neighbour", neighbour)] {
        let e = order_free(&rt, text, 1, shape).expect_err(name);
        assert!(e.contains("share what they write"), "{name}: {e}");
    }
    let c = order_free(&rt, reads_only, 1, shape).unwrap();
    assert_eq!((c.kernels, c.wrote), (1, 1));
}
