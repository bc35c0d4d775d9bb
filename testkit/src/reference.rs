//! Native Rust versions of the example kernels, written to perform the same
//! floating-point operations in the same order as the bytecode (and to call
//! the same `libm` functions), so the interpreter's results must match them
//! bit for bit. Each has a sequential and a rayon version; the demo checks
//! against them and the benchmarks use them as baselines.

use rayon::prelude::*;
use std::sync::atomic::{AtomicI32, Ordering};

/// A small deterministic generator for inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// Uniform in `[lo, hi)`.
    pub fn f32_in(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32)
    }
    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// `y[i] = a * x[i] + y[i]`.
pub fn saxpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// Parallel [`saxpy`].
pub fn saxpy_par(a: f32, x: &[f32], y: &mut [f32]) {
    y.par_iter_mut().zip(x).for_each(|(y, &x)| *y += a * x);
}

/// Iterations of pixel `p` (see `mandelbrot.obc`).
pub fn mandel_pixel(p: i32, w: i32, h: i32, max_iter: i32) -> i32 {
    let cx = ((p % w) as f32 * 3.0) / w as f32 + -2.0;
    let cy = ((p / w) as f32 * 3.0) / h as f32 + -1.5;
    let (mut zx, mut zy) = (0.0f32, 0.0f32);
    let mut n = 0;
    while n < max_iter {
        if zx * zx + zy * zy > 4.0 {
            break;
        }
        let t = zx * zx - zy * zy + cx;
        zy = 2.0 * zx * zy + cy;
        zx = t;
        n += 1;
    }
    n
}

/// Every pixel, sequentially.
pub fn mandelbrot(w: i32, h: i32, max_iter: i32, out: &mut [i32]) {
    for (p, o) in out.iter_mut().enumerate() {
        *o = mandel_pixel(p as i32, w, h, max_iter);
    }
}

/// Every pixel, in parallel.
pub fn mandelbrot_par(w: i32, h: i32, max_iter: i32, out: &mut [i32]) {
    out.par_iter_mut()
        .enumerate()
        .for_each(|(p, o)| *o = mandel_pixel(p as i32, w, h, max_iter));
}

/// Bodies for [`nbody`]: positions, masses, velocities.
#[derive(Clone, Debug, PartialEq)]
pub struct Bodies {
    /// x positions.
    pub px: Vec<f32>,
    /// y positions.
    pub py: Vec<f32>,
    /// z positions.
    pub pz: Vec<f32>,
    /// masses.
    pub m: Vec<f32>,
    /// x velocities.
    pub vx: Vec<f32>,
    /// y velocities.
    pub vy: Vec<f32>,
    /// z velocities.
    pub vz: Vec<f32>,
}

impl Bodies {
    /// `n` random bodies.
    pub fn random(n: usize, seed: u64) -> Bodies {
        let mut r = Rng::new(seed);
        let mut v = |lo, hi| (0..n).map(|_| r.f32_in(lo, hi)).collect::<Vec<_>>();
        Bodies {
            px: v(-1.0, 1.0),
            py: v(-1.0, 1.0),
            pz: v(-1.0, 1.0),
            m: v(0.5, 1.5),
            vx: v(-0.1, 0.1),
            vy: v(-0.1, 0.1),
            vz: v(-0.1, 0.1),
        }
    }

    /// The columns in the `nbody` kernel's argument order: px, py, pz, m,
    /// vx, vy, vz.
    pub fn columns(&self) -> [&Vec<f32>; 7] {
        [
            &self.px, &self.py, &self.pz, &self.m, &self.vx, &self.vy, &self.vz,
        ]
    }
}

fn nbody_accel(b: usize, p: &Bodies, eps2: f32) -> (f32, f32, f32) {
    let (mut ax, mut ay, mut az) = (0.0f32, 0.0f32, 0.0f32);
    for j in 0..p.px.len() {
        let dx = p.px[j] - p.px[b];
        let dy = p.py[j] - p.py[b];
        let dz = p.pz[j] - p.pz[b];
        let s = dx * dx + dy * dy + dz * dz + eps2;
        let s = p.m[j] / (s * s.sqrt());
        ax += dx * s;
        ay += dy * s;
        az += dz * s;
    }
    (ax, ay, az)
}

fn kick(p: &mut Bodies, b: usize, dt: f32, (ax, ay, az): (f32, f32, f32)) {
    p.vx[b] += dt * ax;
    p.vy[b] += dt * ay;
    p.vz[b] += dt * az;
}

/// One velocity kick of every body (see `nbody.obc`).
pub fn nbody(p: &mut Bodies, dt: f32, eps2: f32) {
    for b in 0..p.px.len() {
        let a = nbody_accel(b, p, eps2);
        kick(p, b, dt, a);
    }
}

/// Parallel [`nbody`].
pub fn nbody_par(p: &mut Bodies, dt: f32, eps2: f32) {
    let acc: Vec<(f32, f32, f32)> = (0..p.px.len())
        .into_par_iter()
        .map(|b| nbody_accel(b, p, eps2))
        .collect();
    for (b, a) in acc.into_iter().enumerate() {
        kick(p, b, dt, a);
    }
}

/// The cumulative normal distribution of `blackscholes.obc`. The constants
/// are written exactly as in the `.obc` file, so both round them the same way.
#[allow(clippy::excessive_precision)]
pub fn cnd(d: f32) -> f32 {
    let k = 1.0f32 / (1.0f32 + 0.2316419f32 * d.abs());
    let poly =
        ((((k * 1.330274429f32 + -1.821255978f32) * k + 1.781477937f32) * k + -0.356563782f32) * k
            + 0.31938153f32)
            * k;
    let w = 1.0f32 - poly * 0.3989422804f32 * libm::expf(d * d * -0.5f32);
    if d < 0.0 { 1.0 - w } else { w }
}

/// Call and put price of one option.
pub fn black_scholes_one(r: f32, v: f32, s: f32, x: f32, t: f32) -> (f32, f32) {
    let sqt = t.sqrt();
    let d1 = (libm::logf(s / x) + (v * v * 0.5 + r) * t) / (v * sqt);
    let d2 = d1 - v * sqt;
    let disc = x * libm::expf(-r * t);
    let call = s * cnd(d1) - disc * cnd(d2);
    let put = disc * (1.0 - cnd(d2)) - s * (1.0 - cnd(d1));
    (call, put)
}

/// Options for [`blackscholes`]: spot, strike, years.
pub fn options(n: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut r = Rng::new(seed);
    let s = (0..n).map(|_| r.f32_in(10.0, 100.0)).collect();
    let x = (0..n).map(|_| r.f32_in(10.0, 100.0)).collect();
    let t = (0..n).map(|_| r.f32_in(0.2, 2.0)).collect();
    (s, x, t)
}

/// Price every option.
pub fn blackscholes(
    r: f32,
    v: f32,
    s: &[f32],
    x: &[f32],
    t: &[f32],
    call: &mut [f32],
    put: &mut [f32],
) {
    for j in 0..s.len() {
        (call[j], put[j]) = black_scholes_one(r, v, s[j], x[j], t[j]);
    }
}

/// Parallel [`blackscholes`].
pub fn blackscholes_par(
    r: f32,
    v: f32,
    s: &[f32],
    x: &[f32],
    t: &[f32],
    call: &mut [f32],
    put: &mut [f32],
) {
    call.par_iter_mut()
        .zip(put.par_iter_mut())
        .enumerate()
        .for_each(|(j, (c, p))| (*c, *p) = black_scholes_one(r, v, s[j], x[j], t[j]));
}

fn matmul_one(i: usize, n: usize, a: &[f32], b: &[f32]) -> f32 {
    let (row, col) = (i / n, i % n);
    let mut acc = 0.0f32;
    for k in 0..n {
        acc += a[row * n + k] * b[k * n + col];
    }
    acc
}

/// Naive `c = a * b` for `n x n` matrices.
pub fn matmul(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    for (i, c) in c.iter_mut().enumerate() {
        *c = matmul_one(i, n, a, b);
    }
}

/// Parallel [`matmul`].
pub fn matmul_par(n: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    c.par_iter_mut()
        .enumerate()
        .for_each(|(i, c)| *c = matmul_one(i, n, a, b));
}

/// The dot product of `x` and `y` as rayon sums it (`par_iter().map().sum()`:
/// its split into tasks, and so its float result, varies between runs).
pub fn dot_par(x: &[f32], y: &[f32]) -> f32 {
    x.par_iter().zip(y).map(|(a, b)| a * b).sum()
}

/// [`histogram`] as rayon makes it best: a private histogram per task,
/// added up. `bins` is not a constant to the compiler (the kernel's
/// `% bins.len()` is a division too).
pub fn histogram_per_task(data: &[i32], bins: usize) -> Vec<i32> {
    let nb = std::hint::black_box(bins);
    data.par_iter()
        .fold(
            || vec![0i32; bins],
            |mut h, &x| {
                h[bin_of(x, nb)] += 1;
                h
            },
        )
        .reduce(
            || vec![0i32; bins],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        )
}

/// The dot product of `x` and `y` summed in offload's combine tree
/// ([`combine_tree`]).
pub fn dot_tree(x: &[f32], y: &[f32]) -> f32 {
    let products: Vec<f32> = x.iter().zip(y).map(|(a, b)| a * b).collect();
    combine_tree(&products, &|a, b| a + b).unwrap_or(0.0)
}

/// The root of offload's combine tree over `v` (`offload_abi::reduce`),
/// written out from its definition: pairwise over the positions, a node
/// with no right half taking its left half's value; `None` for no values.
pub fn combine_tree<T: Copy>(v: &[T], f: &impl Fn(T, T) -> T) -> Option<T> {
    fn node<T: Copy>(v: &[T], lo: usize, size: usize, f: &impl Fn(T, T) -> T) -> Option<T> {
        if lo >= v.len() {
            return None;
        }
        if size == 1 {
            return Some(v[lo]);
        }
        let l = node(v, lo, size / 2, f);
        match (l, node(v, lo + size / 2, size / 2, f)) {
            (Some(a), Some(b)) => Some(f(a, b)),
            (a, _) => a,
        }
    }
    node(v, 0, v.len().next_power_of_two(), f)
}

/// One step of `heat.ofk` (the five-point stencil over the interior of
/// an `h` × `w` grid) into `u`, rows in parallel; the border keeps `t`'s.
pub fn heat_par(t: &[f32], u: &mut [f32], h: usize, w: usize) {
    u.par_chunks_mut(w).enumerate().for_each(|(i, row)| {
        if i == 0 || i == h - 1 {
            row.copy_from_slice(&t[i * w..(i + 1) * w]);
            return;
        }
        row[0] = t[i * w];
        row[w - 1] = t[i * w + w - 1];
        for (j, x) in row.iter_mut().enumerate().take(w - 1).skip(1) {
            let c = i * w + j;
            *x = t[c] + 0.1 * (t[c - 1] + t[c + 1] + t[c - w] + t[c + w] - 4.0 * t[c]);
        }
    });
}

/// The bin of a value in `histogram.obc`.
pub fn bin_of(x: i32, nbins: usize) -> usize {
    ((x & 0x7fff_ffff) % nbins as i32) as usize
}

/// Histogram of `data` into `bins`.
pub fn histogram(data: &[i32], bins: &mut [i32]) {
    let n = bins.len();
    for &x in data {
        bins[bin_of(x, n)] += 1;
    }
}

/// Parallel [`histogram`] with atomic bins.
pub fn histogram_par(data: &[i32], nbins: usize) -> Vec<i32> {
    let bins: Vec<AtomicI32> = (0..nbins).map(|_| AtomicI32::new(0)).collect();
    data.par_iter().for_each(|&x| {
        bins[bin_of(x, nbins)].fetch_add(1, Ordering::Relaxed);
    });
    bins.into_iter().map(AtomicI32::into_inner).collect()
}

/// A heap-allocated vector, as `alloc.obc`'s `Vec3`.
#[derive(Debug)]
pub struct Vec3 {
    x: f64,
    y: f64,
    z: f64,
}

/// Workitem `i` of `alloc.obc`, allocating every `Vec3` with `Box::new`.
pub fn alloc_vectors_one(i: i64, n: i32) -> f64 {
    let mut sum = std::hint::black_box(Box::new(Vec3 {
        x: 0.0,
        y: 0.0,
        z: 0.0,
    }));
    for k in 0..n {
        let v = std::hint::black_box(Box::new(Vec3 {
            x: i as f64 + f64::from(k),
            y: f64::from(k),
            z: 1.0,
        }));
        sum = std::hint::black_box(Box::new(Vec3 {
            x: sum.x + v.x,
            y: sum.y + v.y,
            z: sum.z + v.z,
        }));
    }
    (sum.x * sum.x + sum.y * sum.y + sum.z * sum.z).sqrt()
}

/// Workitem `i` of `alloc.obc` with a per-thread bump allocator instead of
/// `Box::new` (the allocation pattern of a TLAB).
pub fn alloc_vectors_bump(i: i64, n: i32, arena: &mut Vec<Vec3>) -> f64 {
    arena.clear();
    arena.push(Vec3 {
        x: 0.0,
        y: 0.0,
        z: 0.0,
    });
    let mut sum = 0;
    for k in 0..n {
        arena.push(Vec3 {
            x: i as f64 + f64::from(k),
            y: f64::from(k),
            z: 1.0,
        });
        let v = arena.len() - 1;
        let s = Vec3 {
            x: arena[sum].x + arena[v].x,
            y: arena[sum].y + arena[v].y,
            z: arena[sum].z + arena[v].z,
        };
        arena.push(s);
        sum = arena.len() - 1;
        std::hint::black_box(&arena[sum]);
    }
    let s = &arena[sum];
    (s.x * s.x + s.y * s.y + s.z * s.z).sqrt()
}

/// A list node, as `linkedlist.obc`'s `Node`.
#[derive(Debug)]
pub struct Node {
    value: i64,
    next: Option<Box<Node>>,
}

/// Workitem `i` of `linkedlist.obc` with `Box` nodes.
pub fn linked_list_one(i: i64, n: i32) -> i64 {
    let mut head: Option<Box<Node>> = None;
    for k in 0..n {
        head = Some(std::hint::black_box(Box::new(Node {
            value: i + i64::from(k),
            next: head,
        })));
    }
    let mut sum = 0i64;
    let mut cur = &head;
    while let Some(node) = cur {
        sum = sum.wrapping_add(node.value);
        cur = &node.next;
    }
    // Drop iteratively so long lists do not overflow the stack.
    while let Some(mut node) = head {
        head = node.next.take();
    }
    sum
}

/// Area of shape `i` of `shapes.obc`.
pub fn shape_area(i: i64) -> f64 {
    let k = i as i32;
    let size = f64::from(k % 7 + 1);
    match k % 3 {
        0 => std::f64::consts::PI * (size * size),
        1 => size * 2.0,
        _ => size * size,
    }
}

/// The allocation benchmark kernel (`offload::tools::bench::LIST_KERNEL`): each
/// workitem `i` builds a list of `n` nodes with values `i + k` and sums it.
pub fn list_sum_expected(i: i64, n: i32) -> i64 {
    (0..i64::from(n)).map(|k| i + k).sum()
}

struct BoxNode {
    val: i64,
    next: Option<Box<BoxNode>>,
}

/// The list kernel in native Rust with `Box::new` per node (and the frees
/// when each list is dropped), in parallel with rayon.
pub fn list_sum_box_par(n: i32, out: &mut [i64]) {
    out.par_iter_mut().enumerate().for_each(|(i, o)| {
        let mut head: Option<Box<BoxNode>> = None;
        for k in 0..i64::from(n) {
            head = Some(Box::new(BoxNode {
                val: i as i64 + k,
                next: head,
            }));
        }
        let mut s = 0;
        let mut at = head.as_deref();
        while let Some(nd) = at {
            s += nd.val;
            at = nd.next.as_deref();
        }
        *o = s;
        // Drop iteratively (a long list would overflow the stack).
        while let Some(mut nd) = head {
            head = nd.next.take();
        }
    });
}

/// The list kernel in native Rust with a per-thread bump allocator: nodes
/// are appended to the thread's arena (never freed until the run ends) and
/// linked by index.
pub fn list_sum_bump_par(n: i32, out: &mut [i64]) {
    out.par_iter_mut().enumerate().for_each_init(
        || Vec::<(i64, u32)>::with_capacity(1 << 16),
        |arena, (i, o)| {
            let mut head = u32::MAX;
            for k in 0..i64::from(n) {
                arena.push((i as i64 + k, head));
                head = (arena.len() - 1) as u32;
            }
            let mut s = 0;
            while head != u32::MAX {
                let (v, next) = arena[head as usize];
                s += v;
                head = next;
            }
            *o = s;
        },
    );
}
