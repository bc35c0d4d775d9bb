//! The PTX math library, executed by the virtual GPU (`offload-vgpu`), against the host's
//! `libm` bit for bit: special values, every branch threshold in the source
//! (±a few ulps), and random inputs — uniform bit patterns and the ranges
//! kernels use. NaNs compare equal whatever their payload (the differential
//! suite canonicalizes them too).

use offload_jit::ptxlib::{self, trig_needs_host_f32, trig_needs_host_f64};

/// The math library as the virtual GPU parsed it, with typed calls.
struct Library(offload_vgpu::Module);

impl Library {
    fn parse(text: &str) -> Result<Library, offload_vgpu::Error> {
        offload_vgpu::parse(text).map(Library)
    }
    fn call(&self, name: &str, args: &[u64]) -> Result<u64, offload_vgpu::Error> {
        offload_vgpu::call(&self.0, name, args)
    }
    fn f64_1(&self, name: &str, x: f64) -> f64 {
        f64::from_bits(self.call(name, &[x.to_bits()]).expect("routine runs"))
    }
    fn f64_2(&self, name: &str, x: f64, y: f64) -> f64 {
        f64::from_bits(
            self.call(name, &[x.to_bits(), y.to_bits()])
                .expect("routine runs"),
        )
    }
    fn f32_1(&self, name: &str, x: f32) -> f32 {
        f32::from_bits(
            self.call(name, &[u64::from(x.to_bits())])
                .expect("routine runs") as u32,
        )
    }
    fn f32_2(&self, name: &str, x: f32, y: f32) -> f32 {
        let r = self.call(name, &[u64::from(x.to_bits()), u64::from(y.to_bits())]);
        f32::from_bits(r.expect("routine runs") as u32)
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

fn lib() -> Library {
    Library::parse(ptxlib::TEXT).expect("the library parses")
}

fn same64(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}
fn same32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Around each of these high words (f64) or bit patterns (f32): the value
/// itself, its neighbours, both signs.
fn around64(words: &[u32]) -> Vec<f64> {
    let mut v = Vec::new();
    for &w in words {
        let base = u64::from(w) << 32;
        for d in [0u64, 1, 2, 0xffff_ffff] {
            for b in [base.wrapping_add(d), base.wrapping_sub(d.min(base))] {
                v.push(f64::from_bits(b));
                v.push(-f64::from_bits(b));
            }
        }
    }
    v
}
fn around32(bits: &[u32]) -> Vec<f32> {
    let mut v = Vec::new();
    for &b in bits {
        for d in [0u32, 1, 2, 7] {
            for x in [b.wrapping_add(d), b.saturating_sub(d)] {
                v.push(f32::from_bits(x));
                v.push(-f32::from_bits(x));
            }
        }
    }
    v
}

fn specials64() -> Vec<f64> {
    vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.0,
        -2.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        f64::from_bits(1),
        -f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff),
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        std::f64::consts::PI,
        std::f64::consts::FRAC_PI_2,
        std::f64::consts::FRAC_PI_4,
        std::f64::consts::E,
        std::f64::consts::LN_2,
        f64::from_bits(0x4086_2e42_fefa_39ef),
        f64::from_bits(0xc086_232b_dd7a_bcd2),
        f64::from_bits(0xc087_4910_d52d_3051),
    ]
}

fn specials32() -> Vec<f32> {
    specials64().into_iter().map(|x| x as f32).collect()
}

fn inputs64(rng: &mut Rng, n: usize, thresholds: &[u32]) -> Vec<f64> {
    let mut v = specials64();
    v.extend(around64(thresholds));
    for _ in 0..n {
        v.push(f64::from_bits(rng.next()));
        v.push(rng.range(-10.0, 10.0));
        v.push(rng.range(-800.0, 800.0));
        v.push(rng.range(-1e7, 1e7));
        v.push(rng.range(0.0, 1e-300));
    }
    v
}

fn inputs32(rng: &mut Rng, n: usize, thresholds: &[u32]) -> Vec<f32> {
    let mut v = specials32();
    v.extend(around32(thresholds));
    for _ in 0..n {
        v.push(f32::from_bits(rng.next() as u32));
        v.push(rng.range(-10.0, 10.0) as f32);
        v.push(rng.range(-120.0, 120.0) as f32);
        v.push(rng.range(-1e9, 1e9) as f32);
        v.push(rng.range(0.0, 1e-37) as f32);
    }
    v
}

/// An f32 or f64 as the checks need it.
trait Float: Copy + std::fmt::LowerExp {
    fn same(self, other: Self) -> bool;
    fn bits(self) -> u64;
    /// Runs a one-argument routine of the library.
    fn call1(lib: &Library, name: &str, x: Self) -> Self;
}

impl Float for f64 {
    fn same(self, other: f64) -> bool {
        same64(self, other)
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn call1(lib: &Library, name: &str, x: f64) -> f64 {
        lib.f64_1(name, x)
    }
}

impl Float for f32 {
    fn same(self, other: f32) -> bool {
        same32(self, other)
    }
    fn bits(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn call1(lib: &Library, name: &str, x: f32) -> f32 {
        lib.f32_1(name, x)
    }
}

/// `name` against `reference` on every input not `skip`ped, bit for bit.
fn check1<T: Float>(name: &str, reference: fn(T) -> T, xs: &[T], skip: fn(T) -> bool) {
    let lib = lib();
    let mut bad = Vec::new();
    let mut n = 0;
    for &x in xs {
        if skip(x) {
            continue;
        }
        n += 1;
        let (got, want) = (T::call1(&lib, name, x), reference(x));
        if !got.same(want) && bad.len() < 8 {
            bad.push(format!(
                "{name}({x:e} = {:#x}) = {got:e}, libm {want:e}",
                x.bits()
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(n > 1000, "{name}: only {n} inputs checked");
}

const N: usize = 20_000;

#[test]
fn exp_f64() {
    let xs = inputs64(
        &mut Rng(1),
        N,
        &[
            0x4086232b, 0x3fd62e42, 0x3ff0a2b2, 0x3e300000, 0x40862e42, 0x40874910,
        ],
    );
    check1("offload_f64_exp", libm::exp, &xs, |_| false);
}

#[test]
fn exp_f32() {
    let xs = inputs32(
        &mut Rng(2),
        N,
        &[
            0x42aeac50, 0x42b17218, 0x42cff1b5, 0x3eb17218, 0x3f851592, 0x39000000,
        ],
    );
    check1("offload_f32_exp", libm::expf, &xs, |_| false);
}

#[test]
fn log_f64() {
    let mut xs = inputs64(
        &mut Rng(3),
        N,
        &[0x00100000, 0x3ff00000, 0x7ff00000, 0x3fe6a09e],
    );
    let mut rng = Rng(33);
    xs.extend((0..N).map(|_| rng.range(0.5, 2.0)));
    check1("offload_f64_log", libm::log, &xs, |_| false);
}

#[test]
fn log_f32() {
    let mut xs = inputs32(
        &mut Rng(4),
        N,
        &[0x00800000, 0x3f800000, 0x7f800000, 0x3f3504f3],
    );
    let mut rng = Rng(44);
    xs.extend((0..N).map(|_| rng.range(0.5, 2.0) as f32));
    check1("offload_f32_log", libm::logf, &xs, |_| false);
}

const TRIG64: &[u32] = &[
    0x3fe921fb, 0x3e500000, 0x3e46a09e, 0x00100000, 0x400f6a7a, 0x4002d97c, 0x401c463b, 0x4015fdbc,
    0x4012d97c, 0x401921fb, 0x413921fb, 0x3ff921fb, 0x400921fb, 0x7ff00000,
];

#[test]
fn sin_cos_f64() {
    let mut xs = inputs64(&mut Rng(5), N, TRIG64);
    // Multiples of pi/2 exercise the cancellation (medium) paths.
    xs.extend((1..2000).map(|k| k as f64 * std::f64::consts::FRAC_PI_2));
    let lib = lib();
    let mut n = 0;
    for &x in &xs {
        if trig_needs_host_f64(x) {
            continue;
        }
        n += 1;
        let got = f64::from_bits(lib.call("offload_f64_sincos", &[x.to_bits(), 0]).unwrap());
        assert!(
            same64(got, libm::sin(x)),
            "sin({x:e}) = {got:e}, libm {:e}",
            libm::sin(x)
        );
        let got = f64::from_bits(lib.call("offload_f64_sincos", &[x.to_bits(), 1]).unwrap());
        assert!(
            same64(got, libm::cos(x)),
            "cos({x:e}) = {got:e}, libm {:e}",
            libm::cos(x)
        );
    }
    assert!(n > 50_000, "{n}");
}

const TRIG32: &[u32] = &[
    0x3f490fda, 0x39800000, 0x00800000, 0x407b53d1, 0x4016cbe3, 0x40e231d5, 0x40afeddf, 0x4dc90fdb,
    0x7f800000,
];

#[test]
fn sin_f32() {
    let mut xs = inputs32(&mut Rng(6), N, TRIG32);
    xs.extend((1..2000).map(|k| (k as f64 * std::f64::consts::FRAC_PI_2) as f32));
    check1("offload_f32_sin", libm::sinf, &xs, trig_needs_host_f32);
}

#[test]
fn cos_f32() {
    let mut xs = inputs32(&mut Rng(7), N, TRIG32);
    xs.extend((1..2000).map(|k| (k as f64 * std::f64::consts::FRAC_PI_2) as f32));
    check1("offload_f32_cos", libm::cosf, &xs, trig_needs_host_f32);
}

#[test]
fn trig_host_thresholds_are_where_the_reduction_changes() {
    // Just below: the device path; at the threshold: the host.
    assert!(!trig_needs_host_f64(f64::from_bits(
        ptxlib::TRIG_HOST_F64.to_bits() - 1
    )));
    assert!(trig_needs_host_f64(-ptxlib::TRIG_HOST_F64));
    assert!(!trig_needs_host_f64(f64::INFINITY) && !trig_needs_host_f64(f64::NAN));
    assert!(!trig_needs_host_f32(f32::from_bits(
        ptxlib::TRIG_HOST_F32.to_bits() - 1
    )));
    assert!(trig_needs_host_f32(ptxlib::TRIG_HOST_F32));
}

/// Exponents that hit pow's special cases: integers (odd and even), halves,
/// ±1, ±2, ±inf, NaN, huge, tiny, and the integer-test boundaries.
fn exponents(rng: &mut Rng) -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        1.5,
        1e10,
        -1e10,
        2f64.powi(31),
        2f64.powi(31) + 1.0,
        2f64.powi(53),
        2f64.powi(53) + 2.0,
        2f64.powi(64) * 1.5,
        1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MIN_POSITIVE,
        2f64.powi(24) + 1.0,
        2f64.powi(27) + 3.0,
        1e-5,
        0.3333333333333333,
    ];
    for _ in 0..40 {
        v.push((rng.range(-60.0, 60.0)).round());
        v.push(rng.range(-30.0, 30.0));
        v.push(rng.range(-1500.0, 1500.0));
        v.push(f64::from_bits(rng.next()));
    }
    v
}

fn bases(rng: &mut Rng) -> Vec<f64> {
    let mut v = specials64();
    v.extend([
        1.0 + 1e-9,
        1.0 - 1e-9,
        1.0000001,
        0.9999999,
        -8.0,
        -0.125,
        10.0,
        1e-310,
    ]);
    for _ in 0..60 {
        v.push(rng.range(0.0, 4.0));
        v.push(rng.range(-4.0, 0.0));
        v.push(rng.range(0.0, 1e6));
        v.push(f64::from_bits(rng.next()));
        v.push(f64::from_bits(rng.next() >> 1));
    }
    v
}

#[test]
fn pow_f64() {
    let lib = lib();
    let mut rng = Rng(8);
    let (xs, ys) = (bases(&mut rng), exponents(&mut rng));
    let mut bad = Vec::new();
    for &x in &xs {
        for &y in &ys {
            let (got, want) = (lib.f64_2("offload_f64_pow", x, y), libm::pow(x, y));
            if !same64(got, want) && bad.len() < 8 {
                bad.push(format!("pow({x:e}, {y:e}) = {got:e}, libm {want:e}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(xs.len() * ys.len() > 40_000);
}

#[test]
fn pow_f32() {
    let lib = lib();
    let mut rng = Rng(9);
    let xs: Vec<f32> = bases(&mut rng).into_iter().map(|x| x as f32).collect();
    let mut ys: Vec<f32> = exponents(&mut rng).into_iter().map(|y| y as f32).collect();
    ys.extend([
        2f32.powi(24),
        2f32.powi(24) + 2.0,
        2f32.powi(27) + 8.0,
        127.5,
    ]);
    let mut bad = Vec::new();
    for &x in &xs {
        for &y in &ys {
            let (got, want) = (lib.f32_2("offload_f32_pow", x, y), libm::powf(x, y));
            if !same32(got, want) && bad.len() < 8 {
                bad.push(format!("powf({x:e}, {y:e}) = {got:e}, libm {want:e}"));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
