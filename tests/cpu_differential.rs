//! Random valid kernels on the CPU device and on the interpreter, with the
//! same inputs: the same heap contents and the same exceptions. Kernels the
//! JIT does not compile yet fall back (and are compared all the same).

use offload::ir::fuzzgen::{GenConfig, arbitrary_module};
use offload::ir::{Elem, Type, print_module};
use offload::reference::Rng;
use offload::{Arg, Device, OffloadError, Runtime, par_offload};

fn args_for(
    rt: &Runtime,
    m: &offload::Module,
    params: &[Type],
    seed: u64,
) -> Option<(Vec<Arg>, Vec<ArrayOut>)> {
    let mut rng = Rng::new(seed);
    let mut args = Vec::new();
    let mut outs = Vec::new();
    for &t in params {
        args.push(match t {
            Type::I32 => Arg::I32(rng.below(7) as i32 - 2),
            Type::I64 => Arg::I64(rng.below(7) as i64 - 2),
            Type::F32 => Arg::F32(rng.f32_in(-4.0, 4.0)),
            Type::F64 => Arg::F64(f64::from(rng.f32_in(-4.0, 4.0))),
            Type::Array(Elem::I32, 1) => {
                let a = rt
                    .array(&(0..5).map(|_| rng.below(9) as i32 - 3).collect::<Vec<_>>())
                    .ok()?;
                outs.push(ArrayOut::I32(a));
                (&a).into()
            }
            Type::Array(Elem::I64, 1) => {
                let a = rt
                    .array(&(0..5).map(|_| rng.below(9) as i64 - 3).collect::<Vec<_>>())
                    .ok()?;
                outs.push(ArrayOut::I64(a));
                (&a).into()
            }
            Type::Array(Elem::F32, 1) => {
                let a = rt
                    .array(&(0..5).map(|_| rng.f32_in(-2.0, 2.0)).collect::<Vec<_>>())
                    .ok()?;
                outs.push(ArrayOut::F32(a));
                (&a).into()
            }
            Type::Array(Elem::F64, 1) => {
                let a = rt
                    .array(
                        &(0..5)
                            .map(|_| f64::from(rng.f32_in(-2.0, 2.0)))
                            .collect::<Vec<_>>(),
                    )
                    .ok()?;
                outs.push(ArrayOut::F64(a));
                (&a).into()
            }
            Type::Class(c) => {
                let name = m.program().verified().class(c).name.clone();
                (&m.new_object(&name).ok()?).into()
            }
            _ => return None,
        });
    }
    Some((args, outs))
}

enum ArrayOut {
    I32(offload::Array<i32>),
    I64(offload::Array<i64>),
    F32(offload::Array<f32>),
    F64(offload::Array<f64>),
}

fn read_all(rt: &Runtime, outs: &[ArrayOut]) -> Vec<u64> {
    let mut v = Vec::new();
    for o in outs {
        match o {
            ArrayOut::I32(a) => {
                v.extend(rt.read(a).unwrap().into_iter().map(|x| u64::from(x as u32)))
            }
            ArrayOut::I64(a) => v.extend(rt.read(a).unwrap().into_iter().map(|x| x as u64)),
            ArrayOut::F32(a) => v.extend(
                rt.read(a)
                    .unwrap()
                    .into_iter()
                    .map(|x| u64::from(canon32(x))),
            ),
            ArrayOut::F64(a) => v.extend(rt.read(a).unwrap().into_iter().map(canon64)),
        }
    }
    v
}

// NaN payloads may differ between the host's float unit and libm; every NaN
// is the same value to the bytecode.
fn canon32(x: f32) -> u32 {
    if x.is_nan() {
        f32::NAN.to_bits()
    } else {
        x.to_bits()
    }
}
fn canon64(x: f64) -> u64 {
    if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

fn outcome(
    r: Result<offload::LaunchReport, OffloadError>,
) -> (Option<(u64, Option<i64>, String)>, bool) {
    match r {
        Ok(rep) => (None, rep.fallback.is_none()),
        Err(OffloadError::Exceptions(e)) => (
            Some((e.count, e.first.workitem, e.first.kind.name().to_string())),
            e.report.fallback.is_none(),
        ),
        Err(e) => panic!("unexpected error {e}"),
    }
}

#[test]
fn random_kernels_agree_between_the_cpu_device_and_the_interpreter() {
    // One worker each: generated kernels share their arrays between
    // workitems, so with more workers their results depend on the schedule.
    // With one, and one save record, both devices run the workitems in order
    // (a deoptimized workitem fills the slot's records, so it is replayed
    // before the slot goes on after it).
    let cpu = Runtime::builder()
        .workers(1)
        .deopt_records(1)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let interp = Runtime::builder()
        .workers(1)
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let mut rng = Rng::new(77);
    let (mut compared, mut compiled) = (0, 0);
    for case in 0..400 {
        let bytes: Vec<u8> = (0..4096).map(|_| rng.next_u64() as u8).collect();
        let Ok(module) = arbitrary_module(
            &mut arbitrary::Unstructured::new(&bytes),
            &GenConfig::default(),
        ) else {
            continue;
        };
        let text = print_module(&module);
        let (mc, mi) = (
            cpu.load("case.obc", &text).unwrap(),
            interp.load("case.obc", &text).unwrap(),
        );
        for k in mc.kernels() {
            let kid = mc.program().verified().func_named(&k).unwrap();
            let params: Vec<Type> = mc
                .program()
                .verified()
                .func(kid)
                .param_types()
                .skip(1)
                .collect();
            let seed = rng.next_u64();
            let (Some((ac, oc)), Some((ai, oi))) = (
                args_for(&cpu, &mc, &params, seed),
                args_for(&interp, &mi, &params, seed),
            ) else {
                continue;
            };
            let (rc, native) = outcome(par_offload(0..16, &mc.closure(&k, ac).unwrap()));
            let (ri, _) = outcome(par_offload(0..16, &mi.closure(&k, ai).unwrap()));
            assert_eq!(rc, ri, "case {case} kernel {k}: exceptions differ\n{text}");
            assert_eq!(
                read_all(&cpu, &oc),
                read_all(&interp, &oi),
                "case {case} kernel {k}: heaps differ\n{text}"
            );
            compared += 1;
            compiled += usize::from(native);
        }
    }
    assert!(compared > 300, "only {compared} kernels compared");
    assert!(compiled > 30, "only {compiled} kernels ran natively");
    eprintln!("{compared} kernels compared, {compiled} compiled by the JIT");
}
