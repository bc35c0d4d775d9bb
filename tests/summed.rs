//! Arrays a launch sums into (`Closure::summed`, a histogram as a
//! reduction of small arrays) on the CPU device (both tiers) and the
//! interpreter: exact counts under injected deopts, safepoints and
//! collections, launches in flight, and `kernel!` captures
//! (`tests/common/summed.rs`).

use offload::{Device, Runtime, kernel, par_offload};
use offload_jit::Injection;

#[path = "common/summed.rs"]
mod summed;

#[test]
fn histograms_are_exact_on_every_cpu_device() {
    for (device, tiered, workers) in [
        (Device::Cpu, true, 2),
        (Device::Cpu, false, 3),
        (Device::Interpreter, true, 2),
    ] {
        let rt = Runtime::builder()
            .device(device)
            .workers(workers)
            .tiered(tiered)
            .build()
            .unwrap();
        let what = format!("{}, tiered {tiered}, {workers} workers", device.name());
        summed::check(&rt, 60_000, &what);
    }
}

#[test]
fn each_slot_adds_to_its_own_copy() {
    // Three workers and 60,000 workitems: three copies, one per slot; the
    // kernel's `atomic_add` returns the slot's partial count, which never
    // exceeds what that slot ran, and the counts add up whatever the
    // split.
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(3)
        .build()
        .unwrap();
    let m = rt
        .load_source(
            "partial.ofk",
            "#[kernel]
            fn partial(i: i64, bins: &mut [i64], seen: &mut [i64]) {
                let mut x = i;
                for k in 0..300 { x = x * 31 + k; }
                seen[i] = atomic_add(&mut bins[0], 1) + (x & 0);
            }",
        )
        .unwrap();
    let n = 60_000usize;
    let bins = rt.new_array::<i64>(1).unwrap();
    let seen = rt.new_array::<i64>(n).unwrap();
    let c = m
        .closure("partial", [(&bins).into(), (&seen).into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    par_offload(0..n as i64, &c).unwrap();
    assert_eq!(rt.read(&bins).unwrap(), vec![n as i64]);
    // Old values are per copy: copy `c` gave 0, 1, …, its count - 1, so
    // value `v` occurs once per copy that counted past it — at most three
    // times, and no more often than `v - 1` (however the slots split the
    // range: a slot that started late may have run nothing).
    let seen = rt.read(&seen).unwrap();
    let mut times = vec![0usize; n];
    for v in seen {
        times[v as usize] += 1;
    }
    assert!(times[0] >= 1 && times[0] <= 3, "{}", times[0]);
    assert!(times.windows(2).all(|w| w[1] <= w[0]), "not per copy");
    assert_eq!(times.iter().sum::<usize>(), n);
    // Slowed down so that every slot runs some: more than one copy
    // counted (an array added to directly would have given n - 1).
    assert!(times[n - 1] == 0, "one copy counted everything");
}

#[test]
fn deopted_workitems_add_once() {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = probe.load_source("summed.ofk", summed::SRC).unwrap();
    let k = m.program().verified().func_named("weighted").unwrap();
    let sites = m.program().analysis(k).unwrap().sites.clone();
    for (tiered, records, site) in [
        (false, 1, sites[0].bci),
        (true, 4, sites[sites.len() / 2].bci),
        (false, 3, sites[sites.len() - 1].bci),
    ] {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .workers(2)
            .tiered(tiered)
            .deopt_records(records)
            .inject(Injection {
                site_bci: site,
                modulus: 7,
                remainder: 3,
                reason: None,
            })
            .build()
            .unwrap();
        let what = format!("site {site}, tiered {tiered}, {records} records");
        let r = weighted(&rt, 40_000, &what);
        assert!(r.replayed + r.resumed >= 40_000 / 7, "{what}: {r}");
    }
}

#[test]
fn workitems_stopped_at_safepoints_add_once() {
    for (tiered, seed) in [(false, None), (true, Some(17)), (false, Some(3))] {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .workers(2)
            .tiered(tiered)
            .inject_safepoints(5, seed)
            .build()
            .unwrap();
        let what = format!("tiered {tiered}, seed {seed:?}");
        let r = weighted(&rt, 40_000, &what);
        assert!(r.replayed + r.resumed > 0, "{what}: {r}");
    }
}

/// The `weighted` histogram over `n` workitems on `rt`, checked; its report.
fn weighted(rt: &Runtime, n: usize, what: &str) -> offload::LaunchReport {
    let m = rt.load_source("summed.ofk", summed::SRC).unwrap();
    let d = summed::data(n, 5);
    let data = rt.array(&d).unwrap();
    let old: Vec<i64> = (0..64).map(|k| k * k).collect();
    let bins = rt.array(&old).unwrap();
    let c = m
        .closure("weighted", [(&data).into(), (&bins).into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    assert_eq!(
        rt.read(&bins).unwrap(),
        summed::weighted(&d, &old),
        "{what}: {r}"
    );
    r
}

#[test]
fn the_copies_survive_collections_during_their_launch() {
    for device in [Device::Cpu, Device::Interpreter] {
        // 128 bytes of garbage per workitem in an 8 MiB heap.
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .reclaim(false)
            .max_heap(8 << 20)
            .build()
            .unwrap();
        let m = rt.load_source("summed.ofk", summed::SRC).unwrap();
        let n: i64 = 200_000;
        let bins = rt.array(&[7i64; 7]).unwrap();
        let c = m
            .closure("churn", [(&bins).into()])
            .unwrap()
            .summed("bins")
            .unwrap();
        let r = par_offload(0..n, &c).unwrap();
        assert!(r.gc.collections >= 2, "{device:?}: {r}");
        let mut want = [7i64; 7];
        for i in 0..n {
            want[(i % 7) as usize] += i;
        }
        assert_eq!(rt.read(&bins).unwrap(), want, "{device:?}");
        rt.verify_heap(&[&m]).unwrap();
    }
}

#[test]
fn a_kernel_closure_sums_into_a_summed_capture() {
    let rt = Runtime::builder().workers(2).build().unwrap();
    let n = 50_000usize;
    let d = summed::data(n, 3);
    let data = rt.array(&d).unwrap();
    let counts = rt.new_array::<i32>(100).unwrap();
    let bins = counts.summed();
    par_offload(
        0..n as i64,
        kernel!(move |i| {
            atomic_add(&mut bins[data[i] % bins.len()], 1);
        }),
    )
    .unwrap();
    assert_eq!(rt.read(&counts).unwrap(), summed::counted(&d, &[0; 100]));
    // A summed capture the body reads is refused, naming it.
    let e = kernel!(move |i| bins[i] = 1).unwrap_err().to_string();
    assert!(e.contains("`bins` cannot be summed into"), "{e}");
}

#[test]
fn summed_launches_in_flight_agree_with_launches_in_turn() {
    for inject in [false, true] {
        let mut b = Runtime::builder().device(Device::Cpu).workers(2);
        if inject {
            b = b.inject_safepoints(7, Some(5));
        }
        let rt = b.build().unwrap();
        let m = rt.load_source("summed.ofk", summed::SRC).unwrap();
        let n = 30_000usize;
        let d = summed::data(n, 9);
        let data = rt.array(&d).unwrap();
        let (b1, b2) = (
            rt.new_array::<i32>(64).unwrap(),
            rt.new_array::<i32>(64).unwrap(),
        );
        let h1 = m
            .closure("hist", [(&data).into(), (&b1).into()])
            .unwrap()
            .summed("bins")
            .unwrap();
        let h2 = m
            .closure("hist", [(&data).into(), (&b2).into()])
            .unwrap()
            .summed("bins")
            .unwrap();
        // Two independent launches, then one that adds to the first's
        // array again (ordered after it).
        let l1 = rt.launch(0..n as i64, &h1).unwrap();
        let l2 = rt.launch(0..n as i64, &h2).unwrap();
        let l3 = rt.launch(0..n as i64, &h1).unwrap();
        rt.collect().unwrap();
        for l in [l1, l2, l3] {
            l.wait().unwrap();
        }
        let once = summed::counted(&d, &[0; 64]);
        assert_eq!(rt.read(&b2).unwrap(), once, "injected {inject}");
        assert_eq!(
            rt.read(&b1).unwrap(),
            summed::counted(&d, &once),
            "injected {inject}"
        );
    }
}

#[test]
fn a_reducing_kernel_can_sum_into_an_array_too() {
    for device in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder()
            .device(device)
            .workers(2)
            .build()
            .unwrap();
        let m = rt
            .load_source(
                "both.ofk",
                "#[kernel]
                fn both(i: i64, bins: &mut [i32]) -> i64 {
                    atomic_add(&mut bins[(i % 4) as i32], 1);
                    i
                }",
            )
            .unwrap();
        let bins = rt.new_array::<i32>(4).unwrap();
        let c = m
            .closure("both", [(&bins).into()])
            .unwrap()
            .summed("bins")
            .unwrap();
        let n = 100_003i64;
        let r = rt
            .par_reduce::<i64>(0..n, &c, offload::Combine::Sum)
            .unwrap();
        assert_eq!(r.value, n * (n - 1) / 2, "{device:?}");
        assert_eq!(
            rt.read(&bins).unwrap(),
            vec![25_001, 25_001, 25_001, 25_000],
            "{device:?}"
        );
    }
}
