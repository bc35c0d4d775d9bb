//! `kernel!` and `kernels!`: kernels written in Rust code, on the
//! interpreter and the CPU device, against the same loops in plain Rust.

use offload::{Device, OffloadError, Runtime, kernel, kernels, par_offload};

fn runtimes() -> Vec<Runtime> {
    [Device::Interpreter, Device::Cpu]
        .into_iter()
        .map(|d| Runtime::builder().device(d).workers(2).build().unwrap())
        .collect()
}

#[test]
fn a_closure_kernel_captures_its_free_variables() {
    for rt in runtimes() {
        let n = 5000usize;
        let xs: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.5).collect();
        let ys: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let x = rt.array(&xs).unwrap();
        let y = rt.array(&ys).unwrap();
        let a = 3.0f32;
        // Launched twice: the second launch reuses the compiled kernel.
        for _ in 0..2 {
            par_offload(0..n as i64, kernel!(move |i| y[i] = a * x[i] + y[i])).unwrap();
        }
        let got = rt.read(&y).unwrap();
        let want: Vec<f32> = (0..n).map(|i| a * xs[i] + (a * xs[i] + ys[i])).collect();
        assert_eq!(got, want, "{:?}", rt.device());
    }
}

#[test]
fn a_closure_kernel_with_loops_locals_and_an_i64_index() {
    for rt in runtimes() {
        let n = 64usize;
        let m = rt
            .array(&(0..n).map(|i| i as f64).collect::<Vec<_>>())
            .unwrap();
        let out = rt.new_array::<f64>(n).unwrap();
        let terms = 10;
        par_offload(
            0..n as i64,
            kernel!(move |i: i64| {
                let mut s = 0.0;
                for k in 0..terms {
                    if k % 2 == 0 {
                        s += m[i] * k as f64;
                    } else {
                        s -= 1.0;
                    }
                }
                out[i] = s;
            }),
        )
        .unwrap();
        let got = rt.read(&out).unwrap();
        for (i, g) in got.iter().enumerate() {
            let mut s = 0.0;
            for k in 0..10 {
                if k % 2 == 0 {
                    s += i as f64 * f64::from(k);
                } else {
                    s -= 1.0;
                }
            }
            assert_eq!(*g, s, "workitem {i}");
        }
    }
}

#[test]
fn a_type_error_in_a_closure_points_at_its_line_in_this_file() {
    let rt = Runtime::builder().device(Device::Cpu).build().unwrap();
    let out = rt.new_array::<f32>(4).unwrap();
    let scale = 2.0f32;
    let line = line!() + 1;
    let r = par_offload(0..4, kernel!(move |i| out[i] = scale * i));
    let Err(OffloadError::Load { rendered, .. }) = r else {
        panic!("expected a compile error, got {r:?}");
    };
    assert!(rendered.contains("tests/kernel_macro.rs"), "{rendered}");
    assert!(rendered.contains(&format!("{line} │")), "{rendered}");
    assert!(rendered.contains("scale * i"), "{rendered}");
    assert!(rendered.contains("expected f32"), "{rendered}");
}

#[test]
fn a_closure_that_captures_no_array_says_why_it_cannot_run() {
    let k = 3i32;
    let r = par_offload(
        0..4,
        kernel!(move |i| if i == k {
            throw!(IllegalState);
        }),
    );
    let Err(e) = r else {
        panic!("ran without a heap")
    };
    assert!(e.to_string().contains("captures no heap array"), "{e}");
}

#[test]
fn a_kernels_block_is_a_module_with_classes_and_functions() {
    let src = kernels! {
        struct Acc { total: i64 }

        fn weight(k: i64) -> i64 { k * k }

        #[kernel]
        fn tally(i: i64, acc: Acc, out: &mut [i64]) {
            atomic_add(&mut acc.total, weight(i));
            out[i] = weight(i);
        }
    };
    for rt in runtimes() {
        let m = src.load(&rt).unwrap();
        let acc = m.new_object("Acc").unwrap();
        let out = rt.new_array::<i64>(100).unwrap();
        par_offload(
            0..100,
            m.closure("tally", [(&acc).into(), (&out).into()]).unwrap(),
        )
        .unwrap();
        let want: i64 = (0..100).map(|k| k * k).sum();
        assert_eq!(rt.read(&out).unwrap()[9], 81);
        assert_eq!(m.get_field::<i64>(&acc, "total").unwrap(), want);
    }
}

#[test]
fn a_closure_over_arrays_of_two_runtimes_is_refused() {
    let (r1, r2) = (
        Runtime::builder().device(Device::Cpu).build().unwrap(),
        Runtime::builder().device(Device::Cpu).build().unwrap(),
    );
    let x = r1.array(&[1.0f32; 4]).unwrap();
    let y = r2.array(&[1.0f32; 4]).unwrap();
    let Err(e) = par_offload(0..4, kernel!(move |i| y[i] = x[i])) else {
        panic!("ran over two heaps")
    };
    assert!(e.to_string().contains("two different runtimes"), "{e}");
}

/// A runtime used with `kernel!` and `kernels!` is freed when the program
/// drops it: the sites' caches do not keep it (each round of a soak that
/// created, used and dropped runtimes kept ~10 MB, 3 threads and its id
/// before).
#[test]
fn a_runtime_used_with_the_macros_is_freed_when_dropped() {
    let src = kernels! {
        #[kernel]
        fn twice(i: i32, v: &mut [i32]) {
            v[i] = 2 * v[i];
        }
    };
    for device in [Device::Interpreter, Device::Cpu] {
        let mut ids = Vec::new();
        for round in 0..3 {
            let rt = Runtime::builder()
                .device(device)
                .workers(1)
                .build()
                .unwrap();
            let v = rt.array(&[1i32, 2, 3, 4]).unwrap();
            par_offload(0..4, kernel!(move |i| v[i] += 1)).unwrap();
            let m = src.load(&rt).unwrap();
            par_offload(0..4, m.closure("twice", [(&v).into()]).unwrap()).unwrap();
            assert_eq!(
                rt.read(&v).unwrap(),
                [4, 6, 8, 10],
                "{device:?}, round {round}"
            );
            ids.push(rt.id());
            drop((m, v, rt));
            // What is left of the runtime (its workers and compile thread)
            // winds down as it drops: give it a moment.
            let t = std::time::Instant::now();
            while Runtime::by_id(*ids.last().unwrap()).is_some()
                && t.elapsed() < std::time::Duration::from_secs(5)
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(
                Runtime::by_id(*ids.last().unwrap()).is_none(),
                "{device:?}, round {round}: the dropped runtime is still alive"
            );
        }
    }
}

/// A module launched and dropped takes its compiled code and kernel states
/// with it (20,000 launched modules kept ~860 MB on the CPU device before);
/// a `kernel!` site's module stays compiled while its runtime lives.
#[test]
fn a_dropped_module_releases_its_compiled_code() {
    for device in [Device::Interpreter, Device::Cpu] {
        let rt = Runtime::builder()
            .device(device)
            .workers(1)
            .build()
            .unwrap();
        let v = rt.array(&[0i32; 4]).unwrap();
        for k in 0..50 {
            let m = rt
                .load_source(
                    "add.ofk",
                    &format!("#[kernel]\nfn add(i: i32, v: &mut [i32]) {{ v[i] = v[i] + {k}; }}\n"),
                )
                .unwrap();
            par_offload(0..4, m.closure("add", [(&v).into()]).unwrap()).unwrap();
            assert_eq!(
                rt.kept_modules(),
                1,
                "{device:?}, module {k}: while it lives"
            );
        }
        rt.finish_compiles();
        assert_eq!(rt.kept_modules(), 0, "{device:?}: every module dropped");
        assert_eq!(rt.read(&v).unwrap(), [1225; 4]);
        // A kernel! site's module stays (launching it again compiles
        // nothing new).
        for _ in 0..3 {
            par_offload(0..4, kernel!(move |i| v[i] += 1)).unwrap();
            assert_eq!(rt.kept_modules(), 1, "{device:?}");
        }
        assert_eq!(rt.read(&v).unwrap(), [1228; 4]);
    }
}

#[test]
fn a_kernel_body_that_does_not_compile_is_shown_as_written() {
    let rt = Runtime::builder()
        .device(Device::Cpu)
        .workers(2)
        .build()
        .unwrap();
    let here = std::fs::read_to_string(file!()).unwrap();
    // The 1-based line and column of `what` in this file.
    let at = |what: &str| {
        let (i, l) = here
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains(what))
            .unwrap();
        (i + 1, l.find(what).unwrap() + 1, l)
    };
    let y = rt.new_array::<f32>(8).unwrap();
    let a = 2.0f32;
    let e = par_offload(0..8, kernel!(move |i| y[i] = a * y[i] + !false));
    let text = e.unwrap_err().to_string();
    let (line, call_col, src) = at("kernel!(move |i| y[i] = a * y[i] + !");
    let (_, err_col, _) = at("a * y[i] + !");
    // The error names the invocation (it began "tests/kernel_macro.rs does
    // not load"), points at the expression, and shows the line from
    // `kernel!` on (it showed the body after 60 spaces).
    let file = file!();
    assert!(
        text.starts_with(&format!(
            "kernel! at {file}:{line}:{call_col} does not load"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("{file}:{line}:{err_col}")), "{text}");
    let call = "kernel!(move |i| y[i] = a * y[i] + !false)";
    assert!(src.contains(call));
    assert!(
        text.contains(&format!("{line} │ {}{call}\n", " ".repeat(call_col - 1))),
        "{text}"
    );

    // An exception's trace names the Rust file, line and column.
    let z = rt.new_array::<i32>(8).unwrap();
    let r = par_offload(0..8, kernel!(move |i| z[i + 5] = 1));
    let Err(OffloadError::Exceptions(e)) = r else {
        panic!("expected exceptions");
    };
    let (line, col, _) = at("z[i + 5] = 1");
    assert!(
        e.to_string()
            .contains(&format!("at closure_at_{line} ({file}:{line}:{col}, bci ")),
        "{e}"
    );
}
