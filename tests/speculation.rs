//! Speculation from interpreter profiles and the recompilation policies,
//! end to end: each kind of speculation deoptimizes when its assumption
//! breaks and the replay gives the interpreter's result; the policies act
//! on the counts (the phase-change workload recompiles once under
//! `trap-limit` and keeps deopting under `never`), and every policy's
//! outputs equal the interpreter's. The speculative PTX of every workload
//! assembles and carries the CPU version's metadata.

use offload::jit::CompileOptions;
use offload::jit::{CpuJit, SpecConfig, Speculations, ptx, ptxas};
use offload::policy::{Context, Decided, Decision, LaunchOutcome, Policy};
use offload::{Arg, Device, OffloadError, Runtime};
use offload_deopt::{Assumption, Reason};
use offload_testkit::experiment::{self, Config};
use std::collections::BTreeSet;

/// Speculating runtime on the CPU device with one warm-up launch.
fn speculating(policy: &str) -> Runtime {
    Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .speculate(1)
        .policy(policy)
        .build()
        .unwrap()
}

fn interp() -> Runtime {
    Runtime::builder()
        .device(Device::Interpreter)
        .workers(2)
        .build()
        .unwrap()
}

const BRANCHY: &str = "
kernel branchy(i: i64, cut: i64, out: i64[]) {
    load i
    load cut
    i64.ge
    br_if big
    load out
    load i
    i64.to_i32
    load i
    i64.const 2
    i64.mul
    i64.astore
    ret
  big:
    load out
    load i
    i64.to_i32
    load i
    i64.const 1000
    i64.add
    i64.astore
    ret
}
";

/// Run `branchy` with `cut` per launch on `rt`; return the outputs, the
/// last report and the last closure.
fn run_branchy(
    rt: &Runtime,
    cuts: &[i64],
) -> (Vec<Vec<i64>>, offload::LaunchReport, offload::Closure) {
    let m = rt.load("branchy.obc", BRANCHY).unwrap();
    let out = rt.new_array::<i64>(1000).unwrap();
    let mut outs = Vec::new();
    let mut last = None;
    for &cut in cuts {
        let c = m
            .closure("branchy", [Arg::I64(cut), (&out).into()])
            .unwrap();
        let rep = rt.par_offload(0..1000, &c).unwrap();
        outs.push(rt.read(&out).unwrap());
        last = Some((rep, c));
    }
    let (rep, c) = last.unwrap();
    (outs, rep, c)
}

#[test]
fn an_untaken_branch_deopts_as_unreached_and_replays_to_the_interpreters_result() {
    let rt = speculating("never");
    let cuts = [1000, 1000, 900, 0];
    let (outs, last, c) = run_branchy(&rt, &cuts);
    let (want, ..) = run_branchy(&interp(), &cuts);
    assert_eq!(outs, want);
    // The version assumed the branch falls through, and every workitem
    // that jumped deopted there.
    assert_eq!(last.version, Some(1));
    let rec = last
        .speculations
        .iter()
        .find(|r| r.spec.assumed == Assumption::Branch { taken: false })
        .expect("the branch was speculated on");
    assert_eq!(
        last.site_deopts.get(&(rec.site, Reason::Unreached)),
        Some(&1000)
    );
    assert_eq!(last.replayed, 1000);
    // The runtime's counters, per (version, site, reason), over the
    // launches: 100 at cut 900, 1000 at cut 0.
    let info = rt.kernel_info(&c).unwrap();
    assert_eq!(info.version, 1);
    assert_eq!(info.launches, 4);
    assert_eq!(
        info.deopts.get(&(1, rec.site, Reason::Unreached)),
        Some(&1100)
    );
    assert_eq!(info.recompiles, 0);
}

#[test]
fn a_receiver_class_never_profiled_fails_the_guard_and_replays() {
    // The megamorphic workload: shapes are all circles while profiling,
    // then rectangles, squares, triangles and hexagons arrive.
    let cfg = Config {
        launches: 6,
        items: 2048,
        warmup: 1,
        workers: Some(2),
        check: true,
        ..Config::default()
    };
    let r = experiment::run("megamorphic", "never", &cfg, &|| ()).unwrap();
    assert_eq!(r.matches_interpreter, Some(true));
    let guard: u64 = r
        .launches
        .iter()
        .map(|l| l.deopts.get(&Reason::TypeGuard).copied().unwrap_or(0))
        .sum();
    assert!(guard > 0, "{r:?}");
    // Before the new classes arrive, the guarded inlined call never fails.
    let phase = cfg.phase_launch() as usize - 1; // the index of the launch of the change
    assert!(
        r.launches[..phase]
            .iter()
            .all(|l| !l.deopts.contains_key(&Reason::TypeGuard))
    );
}

const DEREF: &str = "
class Box {
    field v: i64
}

class Boxes {
    field all: Box[]
}

kernel make(i: i64, n: i32, h: Boxes) {
    load h
    load n
    newarray Box
    putfield Boxes.all
    ret
}

; box i, or null where i == hole
kernel fill(i: i64, hole: i64, h: Boxes) {
    local b: Box
    load i
    load hole
    i64.eq
    br_if done
    new Box
    store b
    load b
    load i
    putfield Box.v
    load h
    getfield Boxes.all
    load i
    i64.to_i32
    load b
    ref.astore
  done:
    ret
}

kernel deref(i: i64, h: Boxes, out: i64[]) {
    load out
    load i
    i64.to_i32
    load h
    getfield Boxes.all
    load i
    i64.to_i32
    ref.aload
    getfield Box.v
    i64.const 3
    i64.mul
    i64.astore
    ret
}
";

/// Fill the boxes without a hole, run `deref` (the warm-up on a
/// speculating runtime), then again with a hole at 77: the second launch
/// throws. Returns the first exception's (kind, workitem), the count, and
/// the second launch's report.
fn run_deref(
    rt: &Runtime,
) -> (
    (offload::ir::ExceptionKind, Option<i64>),
    u64,
    offload::LaunchReport,
) {
    let m = rt.load("deref.obc", DEREF).unwrap();
    let h = m.new_object("Boxes").unwrap();
    let out = rt.new_array::<i64>(200).unwrap();
    rt.par_offload(
        0..1,
        &m.closure("make", [Arg::I32(200), (&h).into()]).unwrap(),
    )
    .unwrap();
    rt.par_offload(
        0..200,
        &m.closure("fill", [Arg::I64(-1), (&h).into()]).unwrap(),
    )
    .unwrap();
    let deref = m.closure("deref", [(&h).into(), (&out).into()]).unwrap();
    rt.par_offload(0..200, &deref).unwrap();
    // A fresh array with a hole.
    rt.par_offload(
        0..1,
        &m.closure("make", [Arg::I32(200), (&h).into()]).unwrap(),
    )
    .unwrap();
    rt.par_offload(
        0..200,
        &m.closure("fill", [Arg::I64(77), (&h).into()]).unwrap(),
    )
    .unwrap();
    match rt.par_offload(0..200, &deref) {
        Err(OffloadError::Exceptions(e)) => {
            let got = rt.read(&out).unwrap();
            for (i, v) in got.iter().enumerate() {
                if i != 77 {
                    assert_eq!(*v, 3 * i as i64, "workitem {i}");
                }
            }
            ((e.first.kind, e.first.workitem), e.count, e.report)
        }
        other => panic!("expected a NullPointer exception, got {other:?}"),
    }
}

#[test]
fn a_value_never_seen_null_is_guarded_and_a_null_deopts_to_the_interpreters_exception() {
    let (spec, n, rep) = run_deref(&speculating("never"));
    let (want, wn, _) = run_deref(&interp());
    assert_eq!(spec, want);
    assert_eq!(spec.0, offload::ir::ExceptionKind::NullPointer);
    assert_eq!((n, wn), (1, 1));
    // The null was met by the speculation's guard (a failed speculation a
    // policy can act on), not by an ordinary null check.
    let guarded = rep
        .speculations
        .iter()
        .filter(|r| r.spec.assumed == Assumption::NonNull)
        .find(|r| rep.site_deopts.contains_key(&(r.site, Reason::TypeGuard)));
    assert!(guarded.is_some(), "{:?}", rep.site_deopts);
    assert_eq!(rep.site_deopts.values().sum::<u64>(), 1);
}

#[test]
fn phase_change_trap_limit_recompiles_once_and_never_keeps_deopting() {
    let cfg = Config {
        launches: 8,
        items: 4096,
        warmup: 1,
        workers: Some(2),
        check: true,
        ..Config::default()
    };
    let phase = cfg.phase_launch() as usize - 1; // the index of the launch of the change
    let mut digests = BTreeSet::new();
    for p in offload::policy::NAMES {
        let r = experiment::run("phase-change", p, &cfg, &|| ()).unwrap();
        assert_eq!(r.matches_interpreter, Some(true), "{p}");
        digests.insert(r.digest);
        let unreached =
            |l: &experiment::LaunchRow| l.deopts.get(&Reason::Unreached).copied().unwrap_or(0);
        // Nothing deopts before the phase change.
        assert!(r.launches[..phase].iter().all(|l| unreached(l) == 0), "{p}");
        match p {
            "never" => {
                assert_eq!(r.recompiles, 0);
                // About 10% of 4096 workitems, every launch after the change.
                assert!(
                    r.launches[phase..].iter().all(|l| unreached(l) > 200),
                    "{r:?}"
                );
            }
            "trap-limit" => {
                assert_eq!(r.recompiles, 1);
                // The launch of the change deopts; the recompile follows it,
                // and from then on nothing deopts and the version is 2.
                assert!(unreached(&r.launches[phase]) > 200);
                for l in &r.launches[phase + 1..] {
                    assert_eq!(unreached(l), 0, "{r:?}");
                    assert_eq!(l.version, Some(2));
                }
                let d = r.launches[phase].decision.as_ref().unwrap();
                assert!(matches!(d.decided.decision, Decision::Recompile { .. }));
                assert!(d.applied.contains("version 1 → 2"), "{}", d.applied);
            }
            _ => {}
        }
    }
    assert_eq!(digests.len(), 1, "policies disagree on the outputs");
}

#[test]
fn resizing_the_tlab_cuts_allocation_failures() {
    let cfg = Config {
        launches: 6,
        items: 4096,
        warmup: 1,
        workers: Some(2),
        check: false,
        ..Config::default()
    };
    let alloc = |p: &str| {
        let r = experiment::run("alloc-pressure", p, &cfg, &|| ()).unwrap();
        let last = r.launches.last().unwrap();
        (
            last.deopts
                .get(&Reason::AllocationFailure)
                .copied()
                .unwrap_or(0),
            r,
        )
    };
    let (never, _) = alloc("never");
    let (trap, r) = alloc("trap-limit");
    assert!(never > 0);
    assert!(trap * 2 <= never, "never {never}, trap-limit {trap}");
    assert!(r.launches.iter().any(|l| {
        l.decision
            .as_ref()
            .is_some_and(|d| matches!(d.decided.decision, Decision::Resize { .. }))
    }));
}

/// Stops offloading after the first compiled launch and retries two
/// launches later.
struct StopThenRetry(u32);

impl Policy for StopThenRetry {
    fn name(&self) -> &'static str {
        "stop-then-retry"
    }
    fn decide(&mut self, _: &LaunchOutcome, cx: &Context<'_>) -> Decided {
        self.0 += 1;
        let decision = match (self.0, cx.device) {
            (1, Device::Cpu) => Decision::StopOffloading {
                to: Device::Interpreter,
            },
            (2, Device::Interpreter) => Decision::RetryLater { after: 2 },
            _ => Decision::Keep,
        };
        Decided {
            decision,
            why: format!("call {}", self.0),
        }
    }
}

#[test]
fn a_custom_policy_moves_a_kernel_off_the_device_and_back() {
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .policy_with(|| Box::new(StopThenRetry(0)))
        .build()
        .unwrap();
    let m = rt.load("branchy.obc", BRANCHY).unwrap();
    let out = rt.new_array::<i64>(1000).unwrap();
    let c = m
        .closure("branchy", [Arg::I64(500), (&out).into()])
        .unwrap();
    let devices: Vec<Device> = (0..6)
        .map(|_| rt.par_offload(0..1000, &c).unwrap().device)
        .collect();
    use Device::{Cpu, Interpreter};
    // cpu (stop) → interp (retry after 2 more launches) → interp → interp
    // → cpu again.
    assert_eq!(
        devices,
        [Cpu, Interpreter, Interpreter, Interpreter, Cpu, Cpu]
    );
    let info = rt.kernel_info(&c).unwrap();
    assert_eq!(info.log.len(), 6);
    assert_eq!(info.log[0].policy, "stop-then-retry");
    assert!(info.log[0].applied.contains("interp"), "{}", info.log[0]);
    assert_eq!(info.device, Cpu);
}

#[test]
fn an_unknown_policy_is_an_error_naming_the_choices() {
    let e = Runtime::builder().policy("sometimes").build().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("sometimes") && msg.contains("trap-limit"),
        "{msg}"
    );
}

#[test]
fn speculative_ptx_of_every_workload_assembles_with_the_cpu_metadata() {
    let ptxas = ptxas::find().unwrap_or_else(|e| panic!("{e}"));
    let rt = interp();
    let jit = CpuJit::new();
    let mut speculated = 0;
    for w in experiment::WORKLOADS {
        let m = rt.load(w, experiment::source(w).unwrap()).unwrap();
        let prog = m.program();
        // The workload's measured kernel (the last), speculated from a
        // made-up profile in which every instruction ran, no value was
        // null, every branch fell through and every virtual call saw one
        // concrete receiver class.
        let main = m.kernels().last().unwrap().clone();
        let f = prog.verified().func_named(&main).unwrap();
        let mut profile = offload::interp::Profile::new(prog.verified());
        for (fi, fp) in profile.funcs.iter_mut().enumerate() {
            let body = &prog.verified().funcs[fi].body;
            for (bci, inst) in body.iter().enumerate() {
                fp.execs[bci] = 10;
                fp.branches[bci] = [0, 10];
                if let offload::ir::Inst::CallVirt { method } = inst {
                    let decl = match prog.verified().func(*method).kind {
                        offload::ir::FuncKind::Method { class, .. } => class,
                        _ => unreachable!(),
                    };
                    // The first concrete subclass.
                    let c = (0..prog.verified().classes.len())
                        .map(offload::ir::ClassId::new)
                        .find(|&c| {
                            prog.verified().is_subclass(c, decl)
                                && prog
                                    .dispatch(c, *method)
                                    .is_some_and(|f| !prog.verified().func(f).is_abstract())
                        })
                        .unwrap();
                    fp.receivers[bci].push((c.0, 10));
                }
            }
        }
        let spec =
            Speculations::from_profile(prog, &profile, SpecConfig::default(), &BTreeSet::new());
        assert!(!spec.is_empty(), "{w}");
        let cpu = jit
            .compile_speculative(prog, f, 1, CompileOptions::default(), &spec)
            .unwrap();
        let gpu = ptx::compile_speculative(prog, f, 1, CompileOptions::default(), &spec).unwrap();
        assert_eq!(cpu.meta, gpu.meta, "{w}: metadata differ");
        assert!(!cpu.meta.speculations.is_empty(), "{w}");
        speculated += cpu.meta.speculations.len();
        for arch in ["sm_70", "sm_80", "sm_90"] {
            if let Err(e) = ptxas::assemble(&ptxas, &gpu.text, arch) {
                panic!("{w}: ptxas {arch}: {e}\n{}", gpu.text);
            }
        }
    }
    assert!(speculated >= 6);
}
