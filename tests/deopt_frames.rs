//! The deopt-frame checker (in the spirit of regalloc2's checker, src/checker.rs there): at
//! every deopt site of generated kernels, force the compiled code to deopt
//! there and check that the frame it saved — every live local and stack
//! slot, as raw bits — equals the frame the interpreter has when it reaches
//! the same bytecode index with the same inputs. Any register-allocation,
//! variable-mapping or record-layout mistake in the JIT's deopt exits shows
//! up here as a differing word, with the program printed.

use offload::heap::Allocator;
use offload::interp::{Interpreter, Outcome};
use offload::ir::{Kind, Type, print_module};
use offload::{Device, Runtime, par_offload};
use offload_jit::Injection;
use offload_testkit::differential::{canonical_bits as canon, inputs};
use offload_testkit::reference::Rng;

#[path = "common/programs.rs"]
mod programs;

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "runs optimized (scripts/test-all): ~140 s unoptimized, ~20 s optimized"
)]
fn every_compiled_deopt_frame_equals_the_interpreters_frame() {
    let mut rng = Rng::new(4242);
    let (mut sites_checked, mut frames_checked) = (0, 0);
    // Frames checked per tier: [quick, optimized].
    let mut per_tier = [0; 2];
    for case in 0..120 {
        let Some(module) = programs::generate(&mut rng) else {
            continue;
        };
        let text = print_module(&module);
        let probe = Runtime::builder().workers(1).build().unwrap();
        let pm = probe.load("case.obc", &text).unwrap();
        for kname in pm.kernels() {
            let v = pm.program().verified();
            let kid = v.func_named(&kname).unwrap();
            let params: Vec<Type> = v.func(kid).param_types().skip(1).collect();
            let seed = rng.next_u64();
            let sites: Vec<_> = pm.program().analysis(kid).unwrap().sites.clone();
            for (n, site) in sites.iter().take(12).enumerate() {
                // The compiled side: deopt at this site on first arrival, in
                // the quick tier (a tiered runtime's first launch) or the
                // optimized one, by turns.
                let optimized = (case + n) % 2 == 1;
                let cpu = Runtime::builder()
                    .workers(1)
                    .device(Device::Cpu)
                    .tiered(!optimized)
                    .inject(Injection {
                        site_bci: site.bci,
                        modulus: 1,
                        remainder: 0,
                        reason: None,
                    })
                    .build()
                    .unwrap();
                let mc = cpu.load("case.obc", &text).unwrap();
                let Some(ac) = inputs(&cpu, &mc, &params, seed) else {
                    break;
                };
                let w = (seed % 5) as i64;
                let report = match par_offload(w..w + 1, mc.closure(&kname, ac).unwrap()) {
                    Ok(r) => r,
                    Err(offload::OffloadError::Exceptions(e)) => e.report,
                    Err(e) => panic!("case {case}: {e}\n{text}"),
                };
                assert!(report.fallback.is_none(), "{:?}", report.fallback);
                // The interpreter side: same inputs on a fresh runtime, run
                // to the same bytecode index.
                let interp = Runtime::builder().workers(1).build().unwrap();
                let mi = interp.load("case.obc", &text).unwrap();
                let ai = inputs(&interp, &mi, &params, seed).unwrap();
                let ci = mi.closure(&kname, ai).unwrap();
                // SAFETY: the interpreter writes the heap as a launch's
                // does, and no launch runs on `interp` meanwhile.
                let heap = unsafe { interp.raw_heap() };
                // With the kernel's kinds of allocation, as a launch's.
                let alloc = Allocator::new(heap, offload::AllocPolicy::default(), 1)
                    .with_kinds(mi.program().allocation_kinds(kid));
                let mut it = Interpreter::new(mi.program(), heap, &alloc, 0);
                let stopped = it.run_to_site(kid, w, &ci.captures(), site.bci, 0);
                let row = report.deopt_table.iter().find(|r| r.bci == site.bci);
                match (stopped, row) {
                    (Ok(Outcome::Stopped(want)), Some(row)) => {
                        assert_eq!(row.workitem, w);
                        let kinds: Vec<Kind> = site.frame.values().map(|(_, t)| t.kind()).collect();
                        let got: Vec<u64> = row
                            .values
                            .iter()
                            .zip(&kinds)
                            .map(|(&x, &k)| canon(k, x))
                            .collect();
                        let want: Vec<u64> = want
                            .iter()
                            .zip(&kinds)
                            .map(|(&x, &k)| canon(k, x))
                            .collect();
                        assert_eq!(
                            got, want,
                            "case {case} kernel {kname} site bci {} frame {:?}\n{text}",
                            site.bci, site.frame
                        );
                        frames_checked += 1;
                        per_tier[usize::from(optimized)] += 1;
                    }
                    // Neither reached the site (the workitem ended or threw
                    // before it).
                    (Ok(Outcome::Finished(_)) | Err(_), None) => {}
                    (s, r) => panic!(
                        "case {case} kernel {kname} site bci {}: interpreter {s:?}, compiled {r:?}\n{text}",
                        site.bci
                    ),
                }
                sites_checked += 1;
            }
        }
    }
    eprintln!(
        "{sites_checked} sites, {frames_checked} frames compared ({} quick tier, {} optimized)",
        per_tier[0], per_tier[1]
    );
    assert!(
        per_tier.iter().all(|&n| n > 80),
        "too few frames in a tier: {per_tier:?}"
    );
    assert!(
        frames_checked > 200,
        "only {frames_checked} frames compared"
    );
}
