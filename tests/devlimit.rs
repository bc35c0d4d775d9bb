//! Transcendentals across devices: the PTX backend hands sine and cosine of
//! huge arguments to the host (reason `DeviceLimit`). The CPU device takes
//! the same sites only when told to (fault injection), which exercises the
//! host side of that hand-over — the save record, the replay that re-executes
//! the instruction with libm — without a GPU. `tests/gpu.rs` runs the real
//! thing.

use offload::deopt::Reason;
use offload::{Device, Runtime, par_offload};
use offload_jit::Injection;

const TRIG: &str = include_str!("files/lower_math.obc");

/// Inputs: ordinary values, multiples of pi/2, and arguments beyond the
/// device's reduction (which the GPU hands to the host).
fn inputs(n: usize) -> (Vec<f64>, Vec<f32>) {
    let special = [1e7, -3e9, 1e300, f64::INFINITY, f64::NAN, 0.0, -0.0, 1e-310];
    let xs: Vec<f64> = (0..n)
        .map(|i| {
            if i % 5 == 4 {
                special[(i / 5) % special.len()]
            } else {
                (i as f64 - n as f64 / 2.0) * 0.37
            }
        })
        .collect();
    let xf: Vec<f32> = xs.iter().map(|&x| (x * 1.3) as f32).collect();
    (xs, xf)
}

fn expected(xs: &[f64], xf: &[f32]) -> (Vec<u64>, Vec<u32>) {
    let d = xs
        .iter()
        .map(|&x| libm::pow(libm::exp(libm::sin(x) + libm::cos(x)), libm::log(x.abs())))
        .map(canon64)
        .collect();
    let f = xf
        .iter()
        .map(|&x| {
            libm::powf(
                libm::expf(libm::sinf(x) * libm::cosf(x)),
                libm::logf(x.abs()),
            )
        })
        .map(canon32)
        .collect();
    (d, f)
}

fn canon64(x: f64) -> u64 {
    if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}
fn canon32(x: f32) -> u32 {
    if x.is_nan() {
        f32::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

fn run(rt: &Runtime, n: usize) -> offload::LaunchReport {
    let (xs, xf) = inputs(n);
    let m = rt.load("math.obc", TRIG).unwrap();
    let (a, out) = (rt.array(&xs).unwrap(), rt.new_array::<f64>(n).unwrap());
    let (b, outf) = (rt.array(&xf).unwrap(), rt.new_array::<f32>(n).unwrap());
    let c = m
        .closure(
            "trig",
            [(&a).into(), (&out).into(), (&b).into(), (&outf).into()],
        )
        .unwrap();
    let r = par_offload(0..n as i64, &c).unwrap();
    let (want_d, want_f) = expected(&xs, &xf);
    let got_d: Vec<u64> = rt.read(&out).unwrap().into_iter().map(canon64).collect();
    let got_f: Vec<u32> = rt.read(&outf).unwrap().into_iter().map(canon32).collect();
    for i in 0..n {
        assert_eq!(got_d[i], want_d[i], "f64 lane {i} (x = {:e})\n{r}", xs[i]);
        assert_eq!(got_f[i], want_f[i], "f32 lane {i} (x = {:e})\n{r}", xf[i]);
    }
    r
}

#[test]
fn device_limit_sites_exist_at_every_sine_and_cosine() {
    let rt = Runtime::builder()
        .device(Device::Interpreter)
        .build()
        .unwrap();
    let m = rt.load("math.obc", TRIG).unwrap();
    let prog = m.program();
    let f = prog.verified().func_named("trig").unwrap();
    let a = prog.analysis(f).unwrap();
    let meta = offload::deopt::DeoptMetadata::new(a, f, 1);
    let bcis: Vec<u32> = meta
        .sites
        .iter()
        .filter(|s| s.reasons.contains(&Reason::DeviceLimit))
        .map(|s| s.bci)
        .collect();
    assert_eq!(bcis, [8, 12, 27, 31], "sin/cos of f64 and f32");
}

#[test]
fn device_limit_deopts_replay_with_the_host_libm() {
    // Every third workitem hands each sine/cosine to the host in turn.
    for site in [8, 12, 27, 31] {
        let rt = Runtime::builder()
            .workers(2)
            .device(Device::Cpu)
            .inject(Injection {
                site_bci: site,
                modulus: 3,
                remainder: 1,
                reason: None,
            })
            .build()
            .unwrap();
        let n = 3000;
        let r = run(&rt, n);
        assert!(r.fallback.is_none(), "{r}");
        assert_eq!(r.replayed, (n / 3) as u64, "{r}");
        assert!(
            r.deopts.contains_key(&(site, Reason::DeviceLimit)),
            "{:?}",
            r.deopts
        );
    }
}

#[test]
fn the_cpu_device_never_takes_device_limit_sites_on_its_own() {
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .build()
        .unwrap();
    let r = run(&rt, 2000);
    assert_eq!((r.replayed, r.on_device), (0, 2000), "{r}");
}
