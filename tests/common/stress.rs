//! The exactly-once stress case shared by the CPU and CUDA device tests:
//! `demo::STRESS_KERNEL` under a random mix of forced deopts, injected
//! safepoints and refill failures, and the checks that every workitem ran
//! its body exactly once.

use offload::{LaunchReport, Runtime, RuntimeBuilder, par_offload};
use offload_jit::Injection;
use offload_testkit::reference::Rng;

/// The deopt sites (bytecode indices) of `kernel`, a module whose kernel
/// is `stress` (`STRESS_KERNEL`, `SPLIT_STRESS_KERNEL`).
pub fn sites(rt: &Runtime, kernel: &str) -> Vec<u32> {
    let m = rt.load("stress.obc", kernel).unwrap();
    let kid = m.program().verified().func_named("stress").unwrap();
    m.program()
        .analysis(kid)
        .unwrap()
        .sites
        .iter()
        .map(|s| s.bci)
        .collect()
}

/// Adds, each with probability 2/3, forced deopts at a random site,
/// injected safepoints, and refill failures (`refills` picks `first` and
/// `every`); returns the builder and what was added, in words.
pub fn random_faults(
    rng: &mut Rng,
    mut b: RuntimeBuilder,
    sites: &[u32],
    refills: impl FnOnce(&mut Rng) -> (u64, u64),
) -> (RuntimeBuilder, Vec<String>) {
    let mut what = Vec::new();
    if rng.below(3) > 0 {
        let site_bci = sites[rng.below(sites.len() as u64) as usize];
        let modulus = 1 + rng.below(40) as i64;
        b = b.inject(Injection {
            site_bci,
            modulus,
            remainder: rng.below(modulus as u64) as i64,
            reason: None,
        });
        what.push(format!("deopts at {site_bci} mod {modulus}"));
    }
    if rng.below(3) > 0 {
        let every = 1 + rng.below(30);
        let seed = rng.below(2).eq(&0).then(|| rng.next_u64());
        b = b.inject_safepoints(every, seed);
        what.push(format!("safepoints every {every} seed {seed:?}"));
    }
    if rng.below(3) > 0 {
        let (first, every) = refills(rng);
        b = b.fail_refills(first, every);
        what.push(format!("refills fail from {first} every {every}"));
    }
    (b, what)
}

/// Runs `m` rounds of the stress kernel over `0..n` on `rt` and checks
/// exactly-once: every cell is `m`, the atomic counter `n * m`, every
/// workitem completed, and the heap holds exactly the arrays made.
pub fn run(rt: &Runtime, n: usize, m: i32, what: &[String]) -> LaunchReport {
    let mm = rt
        .load("stress.obc", offload_testkit::kernels::STRESS_KERNEL)
        .unwrap();
    let out = rt.new_array::<i32>(n).unwrap();
    let counter = rt.new_array::<i64>(1).unwrap();
    let r = par_offload(
        0..n as i64,
        mm.closure("stress", [m.into(), (&out).into(), (&counter).into()])
            .unwrap(),
    )
    .unwrap();
    assert!(r.fallback.is_none(), "{what:?}: {r}");
    let got = rt.read(&out).unwrap();
    let bad: Vec<usize> = (0..n).filter(|&i| got[i] != m).take(5).collect();
    assert!(bad.is_empty(), "{what:?}: cells {bad:?} wrong\n{r}");
    assert_eq!(
        rt.read(&counter).unwrap(),
        [n as i64 * i64::from(m)],
        "{what:?}"
    );
    assert_eq!(r.completed, n as u64, "{what:?}");
    check_report(&r, &format!("{what:?}"));
    let st = rt.verify_heap(&[&mm]).unwrap();
    assert_eq!(st.arrays, (n as u64) * m as u64 + 2, "{what:?}");
    r
}

/// What every launch report must satisfy: its counts partition the range
/// (`on_device + replayed + abandoned + not_started == workitems`, and
/// `completed + threw == on_device + replayed`), never-ran workitems are
/// counted at most once each, and its time's parts add up to its total.
pub fn check_report(r: &LaunchReport, what: &str) {
    let n = r.workitems();
    assert_eq!(
        r.on_device + r.replayed + r.abandoned + r.not_started(),
        n,
        "{what}: the counts do not partition the range\n{r}"
    );
    assert!(
        r.on_device + r.replayed + r.abandoned <= n,
        "{what}: more workitems ran than the range holds\n{r}"
    );
    assert_eq!(
        r.completed + r.threw,
        r.on_device + r.replayed,
        "{what}: completed and threw are not the workitems that ran\n{r}"
    );
    assert!(
        r.never_ran <= r.on_device + r.replayed,
        "{what}: never-ran counted a workitem twice ({} > {})\n{r}",
        r.never_ran,
        r.on_device + r.replayed
    );
    let t = &r.timings;
    let sum: std::time::Duration = t.parts().iter().map(|p| p.1).sum();
    assert_eq!(sum, t.total, "{what}: the time's parts do not add up\n{r}");
}

/// Runs the `spin` example (`iters` back-edge polls per workitem) over
/// `0..n` on `rt`, built with `inject_safepoints(every, Some(seed))`, and
/// checks that its stops come at the rate asked for: each poll fires with
/// probability 1/`every`; a workitem the device resumes after a stop goes
/// on polling (it stops Binomial(`iters`, 1/`every`) times), one the
/// interpreter replays stops at the first poll that fires.
pub fn check_safepoint_rate(rt: &Runtime, n: i64, every: u64, seed: u64) -> LaunchReport {
    let iters = 10;
    let m = rt
        .load("spin.obc", include_str!("../../examples/kernels/spin.obc"))
        .unwrap();
    let out = rt.new_array::<i32>(n as usize).unwrap();
    let r = par_offload(
        0..n,
        m.closure("spin", [iters.into(), (&out).into()]).unwrap(),
    )
    .unwrap();
    assert!(rt.read(&out).unwrap().iter().all(|&v| v == iters));
    check_report(&r, "random safepoints");
    let p = 1.0 / every as f64;
    let polls = f64::from(iters);
    // Each of a workitem's `iters` back-edge polls stops it with
    // probability p. Resumed on the device, it goes on polling: its stops
    // are Binomial(iters, p). Replayed, it stops at most once.
    let (got, want, var) = if r.resumed > 0 {
        assert_eq!(r.replayed, 0, "every stop is resumed on the device\n{r}");
        (
            r.resumed as f64 / n as f64,
            polls * p,
            polls * p * (1.0 - p),
        )
    } else {
        let want = 1.0 - (1.0 - p).powf(polls);
        (r.replayed as f64 / n as f64, want, want * (1.0 - want))
    };
    let sigma = (var / n as f64).sqrt();
    assert!(
        (got - want).abs() < 6.0 * sigma + 0.01,
        "every {every} seed {seed}: {got:.4} stops per workitem, expected about {want:.4}\n{r}"
    );
    r
}
