//! Arrays a launch sums into (`Closure::summed`), checked against Rust on
//! one runtime (any device): histograms exact with the array's old
//! contents kept, `i32` and `i64` bins, a 2-D range, and the refusals.

#![allow(dead_code)]

use offload::{OffloadError, Runtime};

pub const SRC: &str = r#"
#[kernel]
fn hist(i: i64, data: &[i32], bins: &mut [i32]) {
    atomic_add(&mut bins[data[i] % bins.len()], 1);
}

#[kernel]
fn weighted(i: i64, data: &[i32], bins: &mut [i64]) {
    let mut k = 0;
    while k < 3 {
        atomic_add(&mut bins[(data[i] + k) % bins.len()], i * 1000003);
        k += 1;
    }
}

#[kernel]
fn churn(i: i64, bins: &mut [i64]) {
    let mut a = vec![0i64; 12];
    a[i % 12] = i;
    atomic_add(&mut bins[(i % 7) as i32], a[i % 12]);
}

#[kernel]
fn grid((i, j): (i64, i64), bins: &mut [i32], w: i64) {
    atomic_add(&mut bins[((i * w + j) % 5) as i32], 1);
}

#[kernel]
fn reads(i: i64, bins: &mut [i32]) {
    bins[i] = bins[i] + 1;
}

#[kernel]
fn floats(i: i64, bins: &mut [f32]) {
    bins[0] = 1.0;
}
"#;

/// Pseudo-random bin choices, skewed so that a few bins take most.
pub fn data(n: usize, seed: u32) -> Vec<i32> {
    (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed).wrapping_mul(2_654_435_761) >> 8;
            if h.is_multiple_of(4) {
                (h % 1000) as i32
            } else {
                (h % 3) as i32
            }
        })
        .collect()
}

/// A histogram of `data` into `bins` bins on top of `old`, as Rust counts.
pub fn counted(data: &[i32], old: &[i32]) -> Vec<i32> {
    let mut b = old.to_vec();
    let n = b.len() as i32;
    for &d in data {
        b[(d % n) as usize] += 1;
    }
    b
}

/// The `weighted` kernel's bins over `data` on top of `old`, as Rust sums.
pub fn weighted(data: &[i32], old: &[i64]) -> Vec<i64> {
    let mut b = old.to_vec();
    let n = b.len() as i32;
    for (i, &d) in data.iter().enumerate() {
        for k in 0..3 {
            let at = ((d + k) % n) as usize;
            b[at] = b[at].wrapping_add(i as i64 * 1_000_003);
        }
    }
    b
}

/// Every check on `rt`; `what` names the runtime in failures. `n` is the
/// histogram's length (large enough for several copies per array).
pub fn check(rt: &Runtime, n: usize, what: &str) {
    let m = rt.load_source("summed.ofk", SRC).unwrap();
    let d = data(n, 11);
    let data = rt.array(&d).unwrap();
    // 256 bins with old counts that must survive.
    let old: Vec<i32> = (0..256).map(|k| k * 3 - 100).collect();
    let bins = rt.array(&old).unwrap();
    let hist = m
        .closure("hist", [(&data).into(), (&bins).into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    assert_eq!(hist.summed_captures(), &[1]);
    let r = offload::par_offload(0..n as i64, &hist).unwrap();
    assert_eq!(r.completed, n as u64, "{what}: {r}");
    assert_eq!(rt.read(&bins).unwrap(), counted(&d, &old), "{what}: hist");
    // Launched again: the copies are new, the counts add.
    offload::par_offload(0..n as i64, &hist).unwrap();
    let twice = counted(&d, &counted(&d, &old));
    assert_eq!(rt.read(&bins).unwrap(), twice, "{what}: hist twice");
    // The same closure without summing: the same counts.
    let plain = m.closure("hist", [(&data).into(), (&bins).into()]).unwrap();
    offload::par_offload(0..n as i64, &plain).unwrap();
    assert_eq!(
        rt.read(&bins).unwrap(),
        counted(&d, &twice),
        "{what}: not summed"
    );
    // i64 bins, three updates per workitem in a loop, on a sub-range.
    let old64: Vec<i64> = (0..17).map(|k| i64::MAX - k).collect();
    let wbins = rt.array(&old64).unwrap();
    let w = m
        .closure("weighted", [(&data).into(), (&wbins).into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    offload::par_offload(5..n as i64, &w).unwrap();
    let mut want = weighted(&d, &old64);
    // Workitems 0..5 did not run: take their additions back out.
    for (i, &x) in d.iter().enumerate().take(5) {
        for k in 0..3 {
            let at = ((x + k) % 17) as usize;
            want[at] = want[at].wrapping_sub(i as i64 * 1_000_003);
        }
    }
    assert_eq!(rt.read(&wbins).unwrap(), want, "{what}: weighted");
    // A 2-D range.
    let five = rt.new_array::<i32>(5).unwrap();
    let g = m
        .closure("grid", [(&five).into(), 300i64.into()])
        .unwrap()
        .summed("bins")
        .unwrap();
    offload::par_offload((0..200i64, 0..300i64), &g).unwrap();
    assert_eq!(rt.read(&five).unwrap(), vec![12_000; 5], "{what}: 2-D");
    refusals(rt, &m);
}

/// The closures a launch cannot sum into, with errors that say why.
pub fn refusals(rt: &Runtime, m: &offload::Module) {
    let a = rt.new_array::<i32>(4).unwrap();
    let f = rt.new_array::<f32>(4).unwrap();
    let msg = |e: OffloadError| e.to_string();
    let e = msg(m
        .closure("reads", [(&a).into()])
        .unwrap()
        .summed("bins")
        .unwrap_err());
    assert!(
        e.contains("`bins` cannot be summed into")
            && e.contains("reads an element at line")
            && e.contains("only `atomic_add`"),
        "{e}"
    );
    let e = msg(m
        .closure("floats", [(&f).into()])
        .unwrap()
        .summed("bins")
        .unwrap_err());
    assert!(e.contains("not an array of `i32` or `i64`"), "{e}");
    let e = msg(m
        .closure("reads", [(&a).into()])
        .unwrap()
        .summed("bons")
        .unwrap_err());
    assert!(e.contains("no capture `bons`") && e.contains("bins"), "{e}");
}
