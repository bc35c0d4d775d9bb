//! The policy experiments' output files: a CSV of every launch and an SVG
//! plot of launch times (`offload experiment --csv F --svg F`); the
//! workloads and their runs are `offload_testkit::experiment`'s.

use super::experiment::{Config, RunResult, has_phase, ms, reasons_text, steady};
use offload::adaptive::decision_name;
use std::time::Duration;

/// One CSV row: a launch of one run.
#[derive(serde::Serialize)]
struct CsvRow<'a> {
    workload: &'a str,
    policy: &'a str,
    run: usize,
    launch: u32,
    warmup: bool,
    device: &'a str,
    version: Option<u32>,
    time_ms: f64,
    cumulative_ms: f64,
    on_device: u64,
    replayed: u64,
    deopts: String,
    decision: String,
}

/// Per launch of every run, as CSV (through the csv crate: fields that
/// need quoting are quoted): `workload, policy, run, launch, warmup,
/// device, version, time_ms, cumulative_ms, on_device, replayed, deopts,
/// decision`. Runs and launches are numbered from 1; `version` is empty
/// for a launch on the interpreter; `cumulative_ms` counts every launch of
/// the run, warm-up included.
pub fn csv(results: &[RunResult]) -> Result<String, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    for r in results {
        for (k, run) in r.runs.iter().enumerate() {
            let mut cum = Duration::ZERO;
            for l in run {
                cum += l.time;
                w.serialize(CsvRow {
                    workload: &r.workload,
                    policy: &r.policy,
                    run: k + 1,
                    launch: l.launch,
                    warmup: l.warmup,
                    device: l.device.name(),
                    version: l.version,
                    time_ms: ms(l.time),
                    cumulative_ms: ms(cum),
                    on_device: l.on_device,
                    replayed: l.replayed,
                    deopts: reasons_text(&l.deopts),
                    decision: l
                        .decision
                        .as_ref()
                        .map_or("-".to_string(), |d| decision_name(&d.decided.decision)),
                })
                .map_err(|e| format!("CSV: {e}"))?;
            }
        }
    }
    let bytes = w.into_inner().map_err(|e| format!("CSV: {e}"))?;
    String::from_utf8(bytes).map_err(|e| format!("CSV: {e}"))
}

/// An SVG plot of cumulative time per policy across launches, one panel
/// per workload: the median run of each policy, from the first launch
/// after the warm-up (so that the interpreter's warm-up does not dwarf the
/// rest); a circle where a recompiled version first ran, and a dashed line
/// at the launch where the workload's inputs change. The legend sits above
/// the curves, in space kept free for it.
pub fn svg(results: &[RunResult], cfg: &Config, path: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;
    let mut workloads: Vec<&str> = Vec::new();
    for r in results {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let cols = workloads.len().clamp(1, 3);
    let rows = workloads.len().div_ceil(cols).max(1);
    let root = SVGBackend::new(path, (480 * cols as u32, 400 * rows as u32)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let panels = root.split_evenly((rows, cols));
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK];
    let first = cfg.warmup + 1;
    for (w, panel) in workloads.iter().zip(panels.iter()) {
        let runs: Vec<&RunResult> = results.iter().filter(|r| r.workload == *w).collect();
        let last = runs
            .iter()
            .map(|r| r.launches.len())
            .max()
            .unwrap_or(1)
            .max(first as usize) as u32;
        let curve_top = runs
            .iter()
            .map(|r| ms(steady(r.median_run())))
            .fold(0.0f64, f64::max)
            .max(1e-3);
        // Room above the curves for the legend (a line per policy).
        let top = curve_top * (1.15 + 0.09 * runs.len() as f64);
        let mut chart = ChartBuilder::on(panel)
            .caption(
                format!("{w}: cumulative time after the warm-up"),
                ("sans-serif", 16),
            )
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(52)
            .build_cartesian_2d(first - 1..last, 0f64..top)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("launch")
            .y_desc("ms")
            .draw()
            .map_err(|e| err(&e))?;
        if has_phase(w) {
            let x = cfg.phase_launch();
            chart
                .draw_series(DashedLineSeries::new(
                    [(x, 0.0), (x, curve_top * 1.05)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(|e| err(&e))?
                .label(format!("inputs change (launch {x})"))
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], BLACK));
        }
        for (i, r) in runs.iter().enumerate() {
            let color = colors[i % colors.len()];
            let mut cum = 0.0;
            let mut prev = None;
            let mut points = vec![(first - 1, 0.0)];
            let mut recompiled = Vec::new();
            for l in r.median_run().iter().filter(|l| !l.warmup) {
                cum += ms(l.time);
                points.push((l.launch, cum));
                if prev.is_some_and(|p: Option<u32>| p != l.version) && l.version.is_some() {
                    recompiled.push((l.launch, cum));
                }
                prev = Some(l.version);
            }
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(format!(
                    "{} ({} recompile{})",
                    r.policy,
                    recompiled.len(),
                    if recompiled.len() == 1 { "" } else { "s" }
                ))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
            chart
                .draw_series(
                    recompiled
                        .into_iter()
                        .map(|p| Circle::new(p, 5, color.stroke_width(2))),
                )
                .map_err(|e| err(&e))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE.mix(0.9))
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::experiment::LaunchRow;
    use offload::Device;
    use offload::deopt::Reason;
    use std::collections::BTreeMap;

    #[test]
    fn csv_rows_round_trip_with_names_that_need_quoting() {
        let row = LaunchRow {
            launch: 1,
            warmup: true,
            time: Duration::from_micros(1500),
            device: Device::Interpreter,
            version: None,
            on_device: 0,
            replayed: 3,
            deopts: BTreeMap::from([(Reason::NullCheck, 2), (Reason::Safepoint, 1)]),
            decision: None,
        };
        let r = RunResult {
            workload: "a,\"quoted\"\nworkload".into(),
            policy: "p".into(),
            launches: vec![row.clone()],
            recompiles: 0,
            runs: vec![vec![row.clone()], vec![row]],
            runs_agree: true,
            digest: 0,
            matches_interpreter: None,
            fallback: None,
        };
        let text = csv(&[r]).unwrap();
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let recs: Vec<csv::StringRecord> = rd.records().map(Result::unwrap).collect();
        assert_eq!(recs.len(), 2, "{text}");
        assert_eq!(&recs[0][0], "a,\"quoted\"\nworkload");
        assert_eq!((&recs[0][2], &recs[1][2]), ("1", "2"), "runs count from 1");
        assert_eq!(&recs[0][3], "1");
        assert_eq!(&recs[0][4], "true");
        assert_eq!(&recs[0][6], "", "no version on the interpreter");
        assert_eq!(recs[0][7].parse::<f64>().unwrap(), 1.5);
        assert_eq!(&recs[0][11], "null:2 safepoint:1");
    }
}
