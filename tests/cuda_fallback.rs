//! The CUDA device's selection and fallback, on any machine: without a
//! usable GPU, `Runtime::new()` runs on the CPU device and says why, a
//! forced CUDA device does the same, and strict mode refuses instead. With
//! a GPU, the runtime picks CUDA and reports no fallback; with offload's
//! virtual GPU on the library path (`scripts/gpu-tests --virtual`), it
//! picks CUDA and notes that the GPU is a simulation.

use offload::{Device, Runtime};

fn driver_present() -> bool {
    // The probe the runtime makes first: can libcuda be loaded?
    // SAFETY: only tries to load the driver library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

#[test]
fn the_default_runtime_reports_where_it_runs() {
    let rt = Runtime::new().unwrap();
    match rt.device() {
        Device::Cuda => {
            let gpu = rt.gpu().expect("a CUDA runtime names its GPU");
            assert!(gpu.contains("sm_"), "{gpu}");
            // offload's virtual GPU says what it is; hardware needs no note.
            if gpu.contains("virtual") {
                let note = rt.fallback().expect("a virtual GPU is noted");
                assert!(
                    note.contains("virtual GPU") && note.contains("not hardware"),
                    "{note}"
                );
            } else {
                assert!(rt.fallback().is_none());
            }
        }
        Device::Cpu => {
            let why = rt
                .fallback()
                .expect("a CPU runtime by default must say why");
            assert!(why.contains("CUDA") && why.contains("CPU device"), "{why}");
            assert!(rt.gpu().is_none());
        }
        Device::Interpreter => panic!("the default is never the interpreter"),
    }
    if !driver_present() {
        assert_eq!(rt.device(), Device::Cpu);
        assert!(rt.fallback().unwrap().contains("no CUDA driver"));
    }
}

#[test]
fn strict_mode_makes_the_fallback_an_error() {
    let forced = Runtime::builder().device(Device::Cuda).build().unwrap();
    let strict = Runtime::builder().device(Device::Cuda).strict(true).build();
    if forced.device() == Device::Cuda {
        assert!(strict.is_ok());
        return;
    }
    let why = forced.fallback().unwrap();
    assert!(
        why.starts_with("the requested CUDA device is unavailable"),
        "{why}"
    );
    let err = strict.unwrap_err().to_string();
    assert!(err.contains("strict mode") && err.contains("CUDA"), "{err}");
    // A fallen-back runtime still runs kernels, on the CPU device.
    let m = forced
        .load(
            "k.obc",
            "kernel k(i: i64, out: i64[]) {\n load out\n load i\n i64.to_i32\n load i\n i64.astore\n ret\n}\n",
        )
        .unwrap();
    let out = forced.new_array::<i64>(100).unwrap();
    let c = m.closure("k", [(&out).into()]).unwrap();
    let rep = forced.par_offload(0..100, &c).unwrap();
    assert_eq!(rep.device, Device::Cpu);
    assert_eq!(forced.read(&out).unwrap(), (0..100).collect::<Vec<i64>>());
    // Devices chosen explicitly never fall back.
    for d in [Device::Cpu, Device::Interpreter] {
        let rt = Runtime::builder().device(d).strict(true).build().unwrap();
        assert_eq!(rt.device(), d);
        assert!(rt.fallback().is_none());
    }
}
