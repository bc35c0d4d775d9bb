//! The demo (`offload demo`): every example kernel through the public API,
//! each result checked against the native Rust version of the same kernel
//! ([`crate::reference`]), with timings.

use crate::kernels::{example, load_example};
use crate::reference as native;
use offload::{Array, Closure, OffloadError, Runtime, par_offload};
use std::time::{Duration, Instant};

/// One demo line.
#[derive(Clone, Debug)]
pub struct DemoResult {
    /// The kernel.
    pub kernel: &'static str,
    /// Workitems launched.
    pub workitems: u64,
    /// Launch time.
    pub time: Duration,
    /// Whether the result matched the native version.
    pub ok: bool,
    /// What was checked.
    pub detail: String,
    /// For the launch that deopts: its report and its deopt table.
    pub deopts: Option<String>,
}

/// Problem sizes: `scale` 1 is the demo; tests use smaller ones.
#[derive(Copy, Clone, Debug)]
pub struct Sizes {
    /// Divides every problem size.
    pub shrink: usize,
}

fn row(
    kernel: &'static str,
    workitems: u64,
    time: Duration,
    ok: bool,
    detail: String,
) -> DemoResult {
    DemoResult {
        kernel,
        workitems,
        time,
        ok,
        detail,
        deopts: None,
    }
}

/// Run every example on `rt` and check each against native Rust.
pub fn run(rt: &Runtime, sizes: Sizes) -> Result<Vec<DemoResult>, OffloadError> {
    let s = sizes.shrink.max(1);
    let mut out = Vec::new();

    // saxpy
    let n = 1_000_000 / s;
    let mut r = native::Rng::new(1);
    let x: Vec<f32> = (0..n).map(|_| r.f32_in(-1.0, 1.0)).collect();
    let y0: Vec<f32> = (0..n).map(|_| r.f32_in(-1.0, 1.0)).collect();
    let m = rt.load("saxpy.obc", example("saxpy.obc"))?;
    let (xa, ya) = (rt.array(&x)?, rt.array(&y0)?);
    let c = m.closure("saxpy", [2.5f32.into(), (&xa).into(), (&ya).into()])?;
    let t = Instant::now();
    par_offload(0..n as i64, &c)?;
    let time = t.elapsed();
    let mut want = y0.clone();
    native::saxpy(2.5, &x, &mut want);
    out.push(row(
        "saxpy",
        n as u64,
        time,
        rt.read(&ya)? == want,
        format!("{n} elements, bit-exact"),
    ));

    // mandelbrot
    let (w, h, it) = (512 / s.min(8) as i32, 512 / s.min(8) as i32, 256);
    let m = rt.load("mandelbrot.obc", example("mandelbrot.obc"))?;
    let img = rt.new_array::<i32>((w * h) as usize)?;
    let c = m.closure("mandelbrot", [w.into(), h.into(), it.into(), (&img).into()])?;
    let t = Instant::now();
    par_offload(0..i64::from(w * h), &c)?;
    let time = t.elapsed();
    let mut want = vec![0; (w * h) as usize];
    native::mandelbrot(w, h, it, &mut want);
    let got = rt.read(&img)?;
    let inside = got.iter().filter(|&&v| v == it).count();
    out.push(row(
        "mandelbrot",
        (w * h) as u64,
        time,
        got == want,
        format!("{w}x{h}, {inside} pixels inside"),
    ));

    // nbody
    let nb = 1024 / s.min(8);
    let mut bodies = native::Bodies::random(nb, 3);
    let (c, arrs) = nbody_closure(rt, &bodies)?;
    let t = Instant::now();
    par_offload(0..nb as i64, &c)?;
    let time = t.elapsed();
    native::nbody(&mut bodies, 0.01, 0.01);
    let ok = rt.read(&arrs[4])? == bodies.vx
        && rt.read(&arrs[5])? == bodies.vy
        && rt.read(&arrs[6])? == bodies.vz;
    out.push(row(
        "nbody",
        nb as u64,
        time,
        ok,
        format!("{nb} bodies, one step, bit-exact"),
    ));

    // blackscholes
    let no = 200_000 / s;
    let (sp, st, ty) = native::options(no, 4);
    let (c, ca, pa) = blackscholes_closure(rt, &sp, &st, &ty)?;
    let t = Instant::now();
    par_offload(0..no as i64, &c)?;
    let time = t.elapsed();
    let (mut wc, mut wp) = (vec![0.0; no], vec![0.0; no]);
    native::blackscholes(0.02, 0.3, &sp, &st, &ty, &mut wc, &mut wp);
    out.push(row(
        "blackscholes",
        no as u64,
        time,
        rt.read(&ca)? == wc && rt.read(&pa)? == wp,
        format!("{no} options, bit-exact"),
    ));

    // matmul
    let nm = 192 / s.min(4);
    let mut r = native::Rng::new(5);
    let a: Vec<f32> = (0..nm * nm).map(|_| r.f32_in(-1.0, 1.0)).collect();
    let b: Vec<f32> = (0..nm * nm).map(|_| r.f32_in(-1.0, 1.0)).collect();
    let m = rt.load("matmul.obc", example("matmul.obc"))?;
    let (aa, ba, cc) = (rt.array(&a)?, rt.array(&b)?, rt.new_array::<f32>(nm * nm)?);
    let c = m.closure(
        "matmul",
        [(nm as i32).into(), (&aa).into(), (&ba).into(), (&cc).into()],
    )?;
    let t = Instant::now();
    par_offload(0..(nm * nm) as i64, &c)?;
    let time = t.elapsed();
    let mut want = vec![0.0; nm * nm];
    native::matmul(nm, &a, &b, &mut want);
    out.push(row(
        "matmul",
        (nm * nm) as u64,
        time,
        rt.read(&cc)? == want,
        format!("{nm}x{nm}, bit-exact"),
    ));

    // histogram
    let nh = 1_000_000 / s;
    let mut r = native::Rng::new(6);
    let data: Vec<i32> = (0..nh).map(|_| r.next_u64() as i32).collect();
    let m = rt.load("histogram.obc", example("histogram.obc"))?;
    let (da, bins) = (rt.array(&data)?, rt.new_array::<i32>(256)?);
    let c = m.closure("histogram", [(&da).into(), (&bins).into()])?;
    let t = Instant::now();
    par_offload(0..nh as i64, &c)?;
    let time = t.elapsed();
    let mut want = vec![0; 256];
    native::histogram(&data, &mut want);
    let got = rt.read(&bins)?;
    let total: i64 = got.iter().map(|&b| i64::from(b)).sum();
    out.push(row(
        "histogram",
        nh as u64,
        time,
        got == want,
        format!("{nh} values into 256 bins (atomics), total {total}"),
    ));

    // alloc
    let na = 20_000 / s;
    let per = 50;
    let m = rt.load("alloc.obc", example("alloc.obc"))?;
    let oa = rt.new_array::<f64>(na)?;
    let c = m.closure("alloc_vectors", [per.into(), (&oa).into()])?;
    let t = Instant::now();
    let rep = par_offload(0..na as i64, &c)?;
    let time = t.elapsed();
    let want: Vec<f64> = (0..na as i64)
        .map(|i| native::alloc_vectors_one(i, per))
        .collect();
    out.push(row(
        "alloc_vectors",
        na as u64,
        time,
        rt.read(&oa)? == want,
        format!(
            "{} objects, {} TLAB refills, {} heap growths",
            na as u64 * (2 * per as u64 + 1),
            rep.alloc.refills,
            rep.alloc.heap_grows
        ),
    ));

    // linked list
    let nl = 20_000 / s;
    let m = rt.load("linkedlist.obc", example("linkedlist.obc"))?;
    let la = rt.new_array::<i64>(nl)?;
    let c = m.closure("linked_list", [100i32.into(), (&la).into()])?;
    let t = Instant::now();
    par_offload(0..nl as i64, &c)?;
    let time = t.elapsed();
    let want: Vec<i64> = (0..nl as i64)
        .map(|i| native::linked_list_one(i, 100))
        .collect();
    out.push(row(
        "linked_list",
        nl as u64,
        time,
        rt.read(&la)? == want,
        format!("{nl} lists of 100 nodes"),
    ));

    // shapes
    let ns = 300_000 / s;
    let m = rt.load("shapes.obc", example("shapes.obc"))?;
    let sa = rt.new_array::<f64>(ns)?;
    let c = m.closure("shape_areas", [(&sa).into()])?;
    let t = Instant::now();
    par_offload(0..ns as i64, &c)?;
    let time = t.elapsed();
    let want: Vec<f64> = (0..ns as i64).map(native::shape_area).collect();
    out.push(row(
        "shape_areas",
        ns as u64,
        time,
        rt.read(&sa)? == want,
        format!("{ns} shapes, virtual area()"),
    ));

    // throws
    let nt = 100_000 / s;
    let a: Vec<i32> = (0..nt as i32)
        .map(|j| if j % 1000 == 7 { -j } else { j + 1 })
        .collect();
    let b: Vec<i32> = (0..nt as i32)
        .map(|j| if j % 250 == 3 { 0 } else { j % 13 + 1 })
        .collect();
    let m = rt.load("throws.obc", example("throws.obc"))?;
    let (aa, ba, oa) = (rt.array(&a)?, rt.array(&b)?, rt.new_array::<i32>(nt)?);
    let c = m.closure("checked_div", [(&aa).into(), (&ba).into(), (&oa).into()])?;
    let t = Instant::now();
    let result = par_offload(0..nt as i64, &c);
    let result = result.map_err(|e| match e {
        OffloadError::Exceptions(mut x) => {
            // The demo shows the first rows of the deopt table only.
            x.report.deopt_table.truncate(8);
            OffloadError::Exceptions(x)
        }
        e => e,
    });
    let time = t.elapsed();
    let bad: Vec<usize> = (0..nt).filter(|&j| a[j] < 0 || b[j] == 0).collect();
    let got = rt.read(&oa)?;
    let others_ok = (0..nt)
        .filter(|j| !bad.contains(j))
        .all(|j| got[j] == a[j] / b[j]);
    let mut deopts = None;
    let (ok, detail) = match &result {
        Err(OffloadError::Exceptions(e)) => (
            others_ok && e.count == bad.len() as u64 && e.first.workitem == Some(bad[0] as i64),
            format!(
                "{} of {nt} threw as expected; first: {} in workitem {}",
                e.count,
                e.first.kind.name(),
                bad[0]
            ),
        ),
        Ok(r) => (false, format!("expected exceptions, but none threw: {r}")),
        Err(e) => (
            false,
            format!("expected exceptions, got another error: {e}"),
        ),
    };
    if let Err(OffloadError::Exceptions(e)) = &result {
        let r = &e.report;
        let by: Vec<String> = r
            .deopts
            .iter()
            .map(|((bci, why), n)| format!("{n} {} at bci {bci}", why.name()))
            .collect();
        deopts = Some(format!(
            "checked_div on {}: {} workitems completed on the device, {} deopted and were replayed on the host ({}), {} slot re-entries, {} never-ran workitems rerun
{}",
            r.device.name(),
            r.on_device,
            r.replayed,
            by.join(", "),
            r.reentries,
            r.never_ran,
            r.deopt_table_text()
        ));
    }
    let mut last = row("checked_div", nt as u64, time, ok, detail);
    last.deopts = deopts;
    out.push(last);
    Ok(out)
}

/// The demo as a table.
pub fn table(rows: &[DemoResult]) -> String {
    let mut t = offload::table::new(["kernel", "workitems", "ms", "check", "detail"]);
    for r in rows {
        t.add_row([
            r.kernel.to_string(),
            r.workitems.to_string(),
            format!("{:.2}", r.time.as_secs_f64() * 1e3),
            if r.ok { "ok" } else { "FAILED" }.to_string(),
            r.detail.clone(),
        ]);
    }
    offload::table::right(&mut t, &[1, 2]);
    offload::table::text(&t)
}

/// The `nbody` example (one step, dt = eps2 = 0.01) over `bodies`: the
/// closure and its arrays in [`native::Bodies::columns`] order (the
/// velocities, indices 4..7, are what it writes).
pub fn nbody_closure(
    rt: &Runtime,
    bodies: &native::Bodies,
) -> Result<(Closure, Vec<Array<f32>>), OffloadError> {
    nbody_closure_from(rt, "nbody.obc", bodies)
}

/// [`nbody_closure`] from the example `file` (`nbody.obc` or `nbody.ofk`).
pub fn nbody_closure_from(
    rt: &Runtime,
    file: &str,
    bodies: &native::Bodies,
) -> Result<(Closure, Vec<Array<f32>>), OffloadError> {
    let m = load_example(rt, file)?;
    let arrays = bodies
        .columns()
        .into_iter()
        .map(|v| rt.array(v))
        .collect::<Result<Vec<_>, _>>()?;
    let mut args: Vec<offload::Arg> = vec![
        (bodies.px.len() as i32).into(),
        0.01f32.into(),
        0.01f32.into(),
    ];
    args.extend(arrays.iter().map(offload::Arg::from));
    Ok((m.closure("nbody", args)?, arrays))
}

/// The `blackscholes` example over options `(s, x, t)` at r = 0.02 and
/// v = 0.3: the closure and its `call` and `put` output arrays.
pub fn blackscholes_closure(
    rt: &Runtime,
    s: &[f32],
    x: &[f32],
    t: &[f32],
) -> Result<(Closure, Array<f32>, Array<f32>), OffloadError> {
    blackscholes_closure_from(rt, "blackscholes.obc", s, x, t)
}

/// [`blackscholes_closure`] from the example `file`.
pub fn blackscholes_closure_from(
    rt: &Runtime,
    file: &str,
    s: &[f32],
    x: &[f32],
    t: &[f32],
) -> Result<(Closure, Array<f32>, Array<f32>), OffloadError> {
    let m = load_example(rt, file)?;
    let (sa, xa, ta) = (rt.array(s)?, rt.array(x)?, rt.array(t)?);
    let (call, put) = (rt.new_array::<f32>(s.len())?, rt.new_array::<f32>(s.len())?);
    let c = m.closure(
        "blackscholes",
        [
            0.02f32.into(),
            0.3f32.into(),
            (&sa).into(),
            (&xa).into(),
            (&ta).into(),
            (&call).into(),
            (&put).into(),
        ],
    )?;
    Ok((c, call, put))
}
