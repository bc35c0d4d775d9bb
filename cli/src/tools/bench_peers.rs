//! `offload bench --serve`: the offload side of `scripts/bench-peers`, which
//! times the bench's kernels in Numba and here **by turns** — a few runs of
//! Numba, a few of offload, a few of native rayon, again — so that a change
//! in the machine's load weighs on each alike. The script sends one JSON
//! request per line on standard input; each gets one JSON reply per line:
//!
//! - `{"op": "setup", "kernel": K, "n": N}`: build kernel `K` (`saxpy`,
//!   `mandelbrot`, `nbody`, `matmul`, `blackscholes`, or `dot`, a
//!   reduction) at size `N` (its workitems: elements, pixels, bodies,
//!   matrix side, options, elements), launch it
//!   once, wait for its optimized tier, and check one launch against the
//!   native Rust reference bit for bit. Reply `{"ok": true, "check": "ok",
//!   "workitems": W, "bytes": B}` (`bytes`: what one launch must read and
//!   write at least, for bandwidth figures; 0 where compute dominates).
//! - `{"op": "time", "kernel": K, "n": N, "what": "offload" | "rayon",
//!   "reps": R, "warm": W}`: `W` untimed runs (default 0: a turn's first
//!   run wakes the threads the other contenders' turns left asleep), then
//!   `R` timed runs of the set-up kernel, or of its native rayon version;
//!   reply `{"ok": true, "ns": [t1, ..., tR]}`.
//! - `{"op": "copy", "n": N, "reps": R, "warm": W}`: `W` untimed runs (as
//!   for `time`), then `R` timed runs of a plain
//!   parallel streaming copy of `N` `f32`s on the runtime's workers (the
//!   machine's memory bandwidth); reply as for `time`. The script counts
//!   `12 N` bytes per run, what the memory system moves: the source read,
//!   the destination's lines read for ownership (write-allocate), and
//!   written — as saxpy's `12 N` are `x` and `y` read and `y` written.
//!
//! An error is `{"ok": false, "error": TEXT}`; the server goes on.

use crate::tools::reference as native;
use offload::{Closure, Combine, OffloadError, Runtime, par_offload};
use rayon::prelude::*;
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::time::Instant;

/// Elements between the streaming copy's source and destination.
const COPY_GAP: usize = 16 << 10;

/// One request.
#[derive(Deserialize)]
struct Request {
    op: String,
    #[serde(default)]
    kernel: String,
    n: usize,
    #[serde(default)]
    what: String,
    #[serde(default = "one")]
    reps: usize,
    #[serde(default)]
    warm: usize,
}

fn one() -> usize {
    1
}

/// A set-up kernel: its launch and its native version, each run once per
/// call.
struct Case {
    offload: Box<dyn FnMut() -> Result<(), OffloadError>>,
    rayon: Box<dyn FnMut()>,
}

/// Answer requests from `input` on `out` until the input ends.
pub fn serve(rt: &Runtime, input: impl BufRead, mut out: impl Write) -> std::io::Result<()> {
    let mut cases: HashMap<(String, usize), Case> = HashMap::new();
    // The streaming copy's buffers, by size.
    let mut copies: HashMap<usize, Vec<f32>> = HashMap::new();
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Err(format!("bad request `{line}`: {e}")),
            Ok(r) => answer(rt, &r, &mut cases, &mut copies),
        };
        let v = match reply {
            Ok(v) => v,
            Err(e) => serde_json::json!({"ok": false, "error": e}),
        };
        writeln!(out, "{v}")?;
        out.flush()?;
    }
    Ok(())
}

fn answer(
    rt: &Runtime,
    r: &Request,
    cases: &mut HashMap<(String, usize), Case>,
    copies: &mut HashMap<usize, Vec<f32>>,
) -> Result<serde_json::Value, String> {
    let times = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<Vec<u64>, String> {
        for _ in 0..r.warm {
            f()?;
        }
        let mut ns = Vec::with_capacity(r.reps);
        for _ in 0..r.reps {
            let t = Instant::now();
            f()?;
            ns.push(t.elapsed().as_nanos() as u64);
        }
        Ok(ns)
    };
    match r.op.as_str() {
        "setup" => {
            let (case, check, workitems, bytes) = setup(rt, &r.kernel, r.n)?;
            cases.insert((r.kernel.clone(), r.n), case);
            Ok(
                serde_json::json!({"ok": true, "check": check, "workitems": workitems, "bytes": bytes}),
            )
        }
        "time" => {
            let c = cases
                .get_mut(&(r.kernel.clone(), r.n))
                .ok_or_else(|| format!("`{}` at {} was not set up", r.kernel, r.n))?;
            let ns = match r.what.as_str() {
                "offload" => times(&mut || (c.offload)().map_err(|e| e.to_string()))?,
                "rayon" => times(&mut || {
                    (c.rayon)();
                    Ok(())
                })?,
                w => return Err(format!("unknown `what`: `{w}` (offload or rayon)")),
            };
            Ok(serde_json::json!({"ok": true, "ns": ns}))
        }
        "copy" => {
            // One buffer, the destination 64 KiB past the source's end: two
            // buffers allocated one after the other lie a page apart, and
            // streams that close run at half speed or less on the machines
            // measured (see `offload_heap::alloc::COLOUR_GAP_BYTES`).
            let buf = copies
                .entry(r.n)
                .or_insert_with(|| vec![1.0f32; 2 * r.n + COPY_GAP]);
            let (src, rest) = buf.split_at_mut(r.n + COPY_GAP);
            let (src, dst) = (&src[..r.n], &mut rest[..r.n]);
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(rt.workers())
                .build()
                .map_err(|e| e.to_string())?;
            let chunk = r.n.div_ceil(rt.workers() * 8).max(1 << 14);
            let mut copy = || {
                pool.install(|| {
                    dst.par_chunks_mut(chunk)
                        .zip(src.par_chunks(chunk))
                        .for_each(|(d, s)| {
                            // STREAM's scale, `d = k s` with `k` 1 unknown to
                            // the compiler: an element-wise loop (a
                            // `copy_from_slice` becomes `memcpy`, whose
                            // non-temporal stores ran at 0.6x the loop's
                            // speed here).
                            let k = std::hint::black_box(1.0f32);
                            for (d, s) in d.iter_mut().zip(s) {
                                *d = k * *s;
                            }
                        });
                });
                Ok(())
            };
            copy()?;
            let ns = times(&mut copy)?;
            Ok(serde_json::json!({"ok": true, "ns": ns}))
        }
        op => Err(format!("unknown op `{op}` (setup, time or copy)")),
    }
}

/// Kernel `kernel` at size `n`: the case, the check's verdict, its
/// workitems and the bytes one launch moves at least.
fn setup(rt: &Runtime, kernel: &str, n: usize) -> Result<(Case, String, usize, u64), String> {
    let e = |e: OffloadError| e.to_string();
    let launch = |c: Closure, items: usize| move || par_offload(0..items as i64, &c).map(|_| ());
    let mismatch =
        |what: &str| format!("{kernel} at {n}: offload's {what} differs from native Rust's");
    match kernel {
        "saxpy" => {
            let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
            let y0 = vec![1.0f32; n];
            let m = rt
                .load("saxpy.obc", crate::tools::kernels::example("saxpy.obc"))
                .map_err(e)?;
            let (xa, ya) = (rt.array(&x).map_err(e)?, rt.array(&y0).map_err(e)?);
            let c = m
                .closure("saxpy", [2.0f32.into(), (&xa).into(), (&ya).into()])
                .map_err(e)?;
            par_offload(0..n as i64, &c).map_err(e)?;
            let mut want = y0.clone();
            native::saxpy_par(2.0, &x, &mut want);
            if !same(&rt.read(&ya).map_err(e)?, &want) {
                return Err(mismatch("y"));
            }
            warm(rt, &c, n)?;
            let mut y = y0;
            let case = Case {
                offload: Box::new(launch(c, n)),
                rayon: Box::new(move || native::saxpy_par(2.0, &x, &mut y)),
            };
            Ok((case, "ok".into(), n, 12 * n as u64))
        }
        "dot" => {
            // A reduction: `par_reduce` of `dot.ofk`, checked bit for bit
            // against the combine tree; rayon's `sum` adds in another order.
            let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 1000) as f32 * 1e-3).collect();
            let y: Vec<f32> = (0..n).map(|i| ((i * 13) % 777) as f32 * 1e-3).collect();
            let m = rt
                .load_source("dot.ofk", include_str!("../../../examples/kernels/dot.ofk"))
                .map_err(e)?;
            let (xa, ya) = (rt.array(&x).map_err(e)?, rt.array(&y).map_err(e)?);
            let c = m.closure("dot", [(&xa).into(), (&ya).into()]).map_err(e)?;
            let got = rt
                .par_reduce::<f32>(0..n as i64, &c, Combine::Sum)
                .map_err(e)?
                .value;
            if got.to_bits() != native::dot_tree(&x, &y).to_bits() {
                return Err(mismatch("sum"));
            }
            rt.finish_compiles();
            let rt2 = rt.clone();
            let case = Case {
                offload: Box::new(move || {
                    rt2.par_reduce::<f32>(0..n as i64, &c, Combine::Sum)
                        .map(|_| ())
                }),
                rayon: Box::new(move || {
                    std::hint::black_box(native::dot_par(&x, &y));
                }),
            };
            Ok((case, "ok".into(), n, 8 * n as u64))
        }
        "mandelbrot" => {
            let (w, it) = ((n as f64).sqrt() as i32, 256);
            let px = (w * w) as usize;
            let m = rt
                .load(
                    "mandelbrot.obc",
                    crate::tools::kernels::example("mandelbrot.obc"),
                )
                .map_err(e)?;
            let img = rt.new_array::<i32>(px).map_err(e)?;
            let c = m
                .closure("mandelbrot", [w.into(), w.into(), it.into(), (&img).into()])
                .map_err(e)?;
            par_offload(0..px as i64, &c).map_err(e)?;
            let mut want = vec![0; px];
            native::mandelbrot_par(w, w, it, &mut want);
            if rt.read(&img).map_err(e)? != want {
                return Err(mismatch("image"));
            }
            warm(rt, &c, px)?;
            let case = Case {
                offload: Box::new(launch(c, px)),
                rayon: Box::new(move || native::mandelbrot_par(w, w, it, &mut want)),
            };
            Ok((case, "ok".into(), px, 0))
        }
        "nbody" => {
            let bodies = native::Bodies::random(n, 3);
            let (c, arrays) = crate::tools::demo::nbody_closure(rt, &bodies).map_err(e)?;
            par_offload(0..n as i64, &c).map_err(e)?;
            let mut want = bodies.clone();
            native::nbody_par(&mut want, 0.01, 0.01);
            if !same(&rt.read(&arrays[4]).map_err(e)?, &want.vx) {
                return Err(mismatch("vx"));
            }
            warm(rt, &c, n)?;
            let mut p = bodies;
            let case = Case {
                offload: Box::new(launch(c, n)),
                rayon: Box::new(move || native::nbody_par(&mut p, 0.01, 0.01)),
            };
            Ok((case, "ok".into(), n, 0))
        }
        "matmul" => {
            let a: Vec<f32> = (0..n * n).map(|i| (i % 17) as f32).collect();
            let b: Vec<f32> = (0..n * n).map(|i| (i % 13) as f32).collect();
            let m = rt
                .load("matmul.obc", crate::tools::kernels::example("matmul.obc"))
                .map_err(e)?;
            let (aa, ba) = (rt.array(&a).map_err(e)?, rt.array(&b).map_err(e)?);
            let ca = rt.new_array::<f32>(n * n).map_err(e)?;
            let c = m
                .closure(
                    "matmul",
                    [(n as i32).into(), (&aa).into(), (&ba).into(), (&ca).into()],
                )
                .map_err(e)?;
            par_offload(0..(n * n) as i64, &c).map_err(e)?;
            let mut want = vec![0.0; n * n];
            native::matmul_par(n, &a, &b, &mut want);
            if !same(&rt.read(&ca).map_err(e)?, &want) {
                return Err(mismatch("c"));
            }
            warm(rt, &c, n * n)?;
            let case = Case {
                offload: Box::new(launch(c, n * n)),
                rayon: Box::new(move || native::matmul_par(n, &a, &b, &mut want)),
            };
            Ok((case, "ok".into(), n * n, 0))
        }
        "blackscholes" => {
            let (s, x, t) = native::options(n, 4);
            let (c, call, _) =
                crate::tools::demo::blackscholes_closure(rt, &s, &x, &t).map_err(e)?;
            par_offload(0..n as i64, &c).map_err(e)?;
            let (mut wc, mut wp) = (vec![0.0; n], vec![0.0; n]);
            native::blackscholes_par(0.02, 0.3, &s, &x, &t, &mut wc, &mut wp);
            if !same(&rt.read(&call).map_err(e)?, &wc) {
                return Err(mismatch("call prices"));
            }
            warm(rt, &c, n)?;
            let case = Case {
                offload: Box::new(launch(c, n)),
                rayon: Box::new(move || {
                    native::blackscholes_par(0.02, 0.3, &s, &x, &t, &mut wc, &mut wp);
                }),
            };
            Ok((case, "ok".into(), n, 0))
        }
        k => Err(format!(
            "unknown kernel `{k}` (saxpy, mandelbrot, nbody, matmul, blackscholes)"
        )),
    }
}

/// Launch once more and wait for the optimized tier.
fn warm(rt: &Runtime, c: &Closure, items: usize) -> Result<(), String> {
    par_offload(0..items as i64, c).map_err(|e| e.to_string())?;
    rt.finish_compiles();
    Ok(())
}

/// Bit for bit.
fn same(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(rt: &Runtime, lines: &str) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        serve(rt, lines.as_bytes(), &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn every_kernel_sets_up_checks_and_times_by_request() {
        let rt = Runtime::builder().workers(2).build().unwrap();
        let mut req = String::new();
        for (k, n) in [
            ("saxpy", 4096),
            ("mandelbrot", 1024),
            ("nbody", 64),
            ("matmul", 16),
            ("blackscholes", 1000),
            ("dot", 5000),
        ] {
            req += &format!("{{\"op\":\"setup\",\"kernel\":\"{k}\",\"n\":{n}}}\n");
            for what in ["offload", "rayon"] {
                req += &format!(
                    "{{\"op\":\"time\",\"kernel\":\"{k}\",\"n\":{n},\"what\":\"{what}\",\"reps\":3}}\n"
                );
            }
        }
        req += "{\"op\":\"copy\",\"n\":100000,\"reps\":2,\"warm\":1}\n";
        let got = ask(&rt, &req);
        assert_eq!(got.len(), 6 * 3 + 1);
        for (i, v) in got.iter().enumerate() {
            assert_eq!(v["ok"], true, "reply {i}: {v}");
            if i % 3 == 0 && i < 18 {
                assert_eq!(v["check"], "ok", "{v}");
            } else {
                let ns = v["ns"].as_array().unwrap();
                assert!(
                    !ns.is_empty() && ns.iter().all(|t| t.as_u64().unwrap() > 0),
                    "{v}"
                );
            }
        }
        assert_eq!(got[0]["bytes"], 12 * 4096);
        assert_eq!(got[3]["workitems"], 1024);
        assert_eq!(got[9]["workitems"], 16 * 16);
        assert_eq!(got[15]["bytes"], 8 * 5000);
    }

    #[test]
    fn bad_requests_get_errors_that_say_what_was_wrong() {
        let rt = Runtime::builder().workers(1).build().unwrap();
        let got = ask(
            &rt,
            "not json\n{\"op\":\"setup\",\"kernel\":\"fft\",\"n\":8}\n\
             {\"op\":\"time\",\"kernel\":\"saxpy\",\"n\":8,\"what\":\"offload\"}\n\
             {\"op\":\"launch\",\"n\":1}\n",
        );
        let errors: Vec<&str> = got.iter().map(|v| v["error"].as_str().unwrap()).collect();
        assert!(
            errors[0].starts_with("bad request `not json`"),
            "{}",
            errors[0]
        );
        assert!(errors[1].contains("unknown kernel `fft`"), "{}", errors[1]);
        assert!(errors[2].contains("was not set up"), "{}", errors[2]);
        assert!(errors[3].contains("unknown op `launch`"), "{}", errors[3]);
    }
}
