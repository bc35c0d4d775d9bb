//! Random valid kernels from the generator run through `par_offload` on the
//! interpreter: whatever they do, the result is completion or exceptions —
//! never a panic, a hang or a corrupt heap.

use offload::ir::{Elem, Type, print_module};
use offload::{Arg, OffloadError, Runtime, par_offload};
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

/// The arrays of numbers a race-free kernel is given: `n` elements each,
/// every element different, and how to read them all back as words.
enum Made {
    I32(offload::Array<i32>),
    I64(offload::Array<i64>),
    F32(offload::Array<f32>),
    F64(offload::Array<f64>),
}

fn made(rt: &Runtime, t: Type, n: usize, rng: &mut Rng) -> Option<(Arg, Option<Made>)> {
    Some(match t {
        Type::I32 => (Arg::I32(rng.below(7) as i32 - 2), None),
        Type::I64 => (Arg::I64(rng.below(7) as i64 - 2), None),
        Type::F32 => (Arg::F32(rng.f32_in(-4.0, 4.0)), None),
        Type::F64 => (Arg::F64(f64::from(rng.f32_in(-4.0, 4.0))), None),
        Type::Array(Elem::I32, 1) => {
            let a = rt
                .array(&(0..n as i32).map(|i| i * 3 - 4).collect::<Vec<_>>())
                .ok()?;
            ((&a).into(), Some(Made::I32(a)))
        }
        Type::Array(Elem::I64, 1) => {
            let a = rt
                .array(&(0..n as i64).map(|i| i * 5 - 7).collect::<Vec<_>>())
                .ok()?;
            ((&a).into(), Some(Made::I64(a)))
        }
        Type::Array(Elem::F32, 1) => {
            let a = rt
                .array(&(0..n).map(|i| i as f32 * 0.5 - 2.0).collect::<Vec<_>>())
                .ok()?;
            ((&a).into(), Some(Made::F32(a)))
        }
        Type::Array(Elem::F64, 1) => {
            let a = rt
                .array(&(0..n).map(|i| i as f64 * 0.25 - 3.0).collect::<Vec<_>>())
                .ok()?;
            ((&a).into(), Some(Made::F64(a)))
        }
        _ => return None,
    })
}

fn words(rt: &Runtime, arrays: &[Made]) -> Vec<u64> {
    let mut v = Vec::new();
    for a in arrays {
        match a {
            Made::I32(a) => v.extend(rt.read(a).unwrap().into_iter().map(|x| x as u32 as u64)),
            Made::I64(a) => v.extend(rt.read(a).unwrap().into_iter().map(|x| x as u64)),
            Made::F32(a) => v.extend(rt.read(a).unwrap().into_iter().map(|x| {
                if x.is_nan() {
                    u64::MAX
                } else {
                    u64::from(x.to_bits())
                }
            })),
            Made::F64(a) => v.extend(
                rt.read(a)
                    .unwrap()
                    .into_iter()
                    .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() }),
            ),
        }
    }
    v
}

/// The generator's race-free mode (`GenConfig::splittable`), which the
/// split suites (`tests/gpu_split.rs`) rely on: run one workitem per
/// launch in reverse order, the arrays and the workitems that throw are
/// those of one launch in order — no workitem reads or writes what
/// another writes.
#[test]
fn race_free_kernels_end_the_same_in_any_order() {
    let rt = Runtime::builder()
        .workers(1)
        .device(offload::Device::Interpreter)
        .max_heap(512 << 20)
        .build()
        .unwrap();
    let (window, items) = (5usize, 16i64);
    let cfg = offload::ir::fuzzgen::GenConfig::splittable(window as i32);
    let mut rng = Rng::new(52);
    let (mut kernels, mut wrote) = (0, 0);
    for case in 0..200 {
        let Some(module) = programs::generate_with(&mut rng, &cfg) else {
            continue;
        };
        let text = print_module(&module);
        let m = rt.load(&format!("free{case}.obc"), &text).unwrap();
        for k in m.kernels() {
            let v = m.program().verified();
            let params: Vec<Type> = v
                .func(v.func_named(&k).unwrap())
                .param_types()
                .skip(1)
                .collect();
            let seed = rng.next_u64();
            let run = |order: &[i64]| {
                let mut r = Rng::new(seed);
                let mut args = Vec::new();
                let mut arrays = Vec::new();
                for &t in &params {
                    let (a, made) = made(&rt, t, window * items as usize, &mut r)?;
                    args.push(a);
                    arrays.extend(made);
                }
                let before = words(&rt, &arrays);
                let c = m.closure(&k, args).unwrap();
                let mut threw = Vec::new();
                for &i in order {
                    let range = if order.len() == 1 { 0..items } else { i..i + 1 };
                    match par_offload(range, &c) {
                        Ok(_) => {}
                        Err(OffloadError::Exceptions(e)) => {
                            threw.extend(e.workitems.iter().copied())
                        }
                        Err(e) => panic!("case {case}: {e}\n{text}"),
                    }
                }
                threw.sort_unstable();
                Some((words(&rt, &arrays) != before, words(&rt, &arrays), threw))
            };
            let Some((changed, whole, threw)) = run(&[0]) else {
                continue;
            };
            let reversed: Vec<i64> = (0..items).rev().collect();
            let (_, one_by_one, threw_each) = run(&reversed).unwrap();
            assert_eq!(
                whole, one_by_one,
                "case {case} kernel {k}: the order changed the arrays\n{text}"
            );
            assert_eq!(
                threw, threw_each,
                "case {case} kernel {k}: the order changed who threw\n{text}"
            );
            kernels += 1;
            wrote += usize::from(changed);
        }
    }
    assert!(kernels > 150, "only {kernels} kernels ran");
    assert!(
        wrote > kernels / 4,
        "only {wrote} of {kernels} kernels wrote an array"
    );
}
