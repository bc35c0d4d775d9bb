//! Kernels for the tests of launches in flight, on one device or several
//! (`launch_async`, `gpu_share`, `gpu_devices`): `fill` spins `iters`
//! times per workitem and stores `i * k + iters` ([`want`]); `double`
//! stores twice what it reads; `grow_spin` allocates and spins; `grow`
//! allocates an array per workitem (a kernel that needs a GPU alone).

#![allow(dead_code)]

use offload::{Array, Device, Runtime};
use offload_heap::resident::CHUNK_BYTES;

pub const SRC: &str = "
#[kernel]
fn fill(i: i32, out: &mut [i64], iters: i32, k: i64) {
    let mut acc = 0i64;
    let mut s = 0;
    while s < iters {
        acc = acc + 1;
        s = s + 1;
    }
    out[i] = (i as i64) * k + acc;
}

#[kernel]
fn double(i: i32, from: &[i64], to: &mut [i64]) {
    to[i] = from[i] * 2;
}

#[kernel]
fn grow_spin(i: i32, out: &mut [i64], iters: i32) {
    let t = vec![0i64; 2];
    let mut s = 0;
    while s < iters {
        t[0] = t[0] + 1;
        s = s + 1;
    }
    out[i] = t[0];
}

#[kernel]
fn grow(i: i32, out: &mut [i64]) {
    let t = vec![0i64; 3];
    t[1] = (i as i64) * 7;
    out[i] = t[1] + (t.len() as i64);
}
";

/// What `fill` stores over `0..n`.
pub fn want(n: usize, iters: i64, k: i64) -> Vec<i64> {
    (0..n as i64).map(|i| i * k + iters).collect()
}

/// A deopt site in the middle of `fill`'s sites (its loop).
pub fn loop_site() -> u32 {
    let probe = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = probe.load_source("spin.ofk", SRC).unwrap();
    let k = m.program().verified().func_named("fill").unwrap();
    let sites = m.program().analysis(k).unwrap().sites.clone();
    sites[sites.len() / 2].bci
}

/// `n` i64s, then a spacer of a chunk: the next array made lies in other
/// chunks than this one.
pub fn apart(rt: &Runtime, n: usize) -> Array<i64> {
    let a = rt.new_array::<i64>(n).unwrap();
    std::mem::forget(rt.new_array::<i32>(CHUNK_BYTES / 4).unwrap());
    a
}
