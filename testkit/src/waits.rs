//! `offload bench --device cuda`, safepoints on the GPU: a launch of the
//! `spin` example while a host thread raises safepoints every 20 ms or
//! every 2 ms, with the slots waiting in place at their polls
//! (`RuntimeBuilder::gpu_wait_in_place(true)`, the default) or leaving the
//! grid and being resumed by a relaunch (`false`), against the same
//! launch without safepoints. Each row gives the launch's time, the
//! safepoints it passed and their median time-to-safepoint, relaunches,
//! bytes moved each way and — on the virtual GPU, whose times say nothing
//! about a GPU's — the PTX instructions executed, which do.

use crate::vgpu_counters;
use offload::diagnostics::bytes_text;
use offload::{Device, LaunchReport, OffloadError, Runtime, par_offload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One measured launch.
#[derive(Clone, Debug)]
pub struct WaitRow {
    /// How safepoints were raised (`none`, `every 20 ms`, ...).
    pub safepoints: String,
    /// `wait in place` or `leave`.
    pub slots: &'static str,
    /// The launch's wall time.
    pub time: Duration,
    /// Median time-to-safepoint of those (as `Runtime::safepoint` reports).
    pub tts: Option<Duration>,
    /// The launch's report.
    pub report: LaunchReport,
    /// PTX instructions the virtual GPU executed for the launch.
    pub instructions: Option<u64>,
}

/// The rows, on a runtime like `rt` (its GPU; fresh runtimes per row).
pub fn run(rt: &Runtime, shrink: usize) -> Result<Vec<WaitRow>, OffloadError> {
    let virt = rt.gpu_is_virtual();
    let (n, iters) = if virt {
        (6_000 / shrink.clamp(1, 6), 300)
    } else {
        (400_000 / shrink.max(1), 20_000)
    };
    let mut rows = Vec::new();
    for (every, label) in [
        (None, "none".to_string()),
        (Some(Duration::from_millis(20)), "every 20 ms".to_string()),
        (Some(Duration::from_millis(2)), "every 2 ms".to_string()),
    ] {
        for wait in [true, false] {
            if every.is_none() && !wait {
                continue;
            }
            rows.push(one(n, iters, every, wait, label.clone())?);
        }
    }
    Ok(rows)
}

fn one(
    n: usize,
    iters: i32,
    every: Option<Duration>,
    wait: bool,
    safepoints: String,
) -> Result<WaitRow, OffloadError> {
    let rt = Runtime::builder()
        .device(Device::Cuda)
        .strict(true)
        .gpu_wait_in_place(wait)
        .build()?;
    let m = rt.load("spin.obc", crate::kernels::SPIN_KERNEL)?;
    let out = rt.new_array::<i64>(n)?;
    let c = m.closure("spin", [iters.into(), (&out).into()])?;
    // Compile and load before measuring (on an array of its own: `spin`
    // adds to its cell).
    let warm = rt.new_array::<i64>(1)?;
    par_offload(0..1, &m.closure("spin", [iters.into(), (&warm).into()])?)?;
    let done = AtomicBool::new(false);
    let before = vgpu_counters::now();
    let (report, tts) = std::thread::scope(|sc| {
        let raiser = sc.spawn(|| {
            let mut tts = Vec::new();
            let Some(every) = every else {
                return tts;
            };
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(every);
                if done.load(Ordering::Acquire) {
                    break;
                }
                tts.push(rt.safepoint(|_| ()).1);
            }
            tts
        });
        let r = par_offload(0..n as i64, &c);
        done.store(true, Ordering::Release);
        (r, raiser.join().unwrap_or_default())
    });
    let report = report?;
    let instructions = match (before, vgpu_counters::now()) {
        (Some(a), Some(b)) => Some(b.instructions - a.instructions),
        _ => None,
    };
    if let Some(i) = rt.read(&out)?.iter().position(|&x| x != i64::from(iters)) {
        return Err(OffloadError::Setup(format!(
            "spin: workitem {i} counted to {}, not {iters}",
            rt.read(&out)?[i]
        )));
    }
    let mut sorted = tts.clone();
    sorted.sort();
    Ok(WaitRow {
        safepoints,
        slots: if wait { "wait in place" } else { "leave" },
        time: report.timings.total,
        tts: sorted.get(sorted.len() / 2).copied(),
        report,
        instructions,
    })
}

impl WaitRow {
    /// One JSON object.
    pub fn json(&self) -> String {
        serde_json::json!({
            "bench": "spin under host safepoints",
            "safepoints": self.safepoints,
            "slots": self.slots,
            "launch_ns": self.time.as_nanos() as u64,
            "safepoints_passed": self.report.safepoints,
            "waits": self.report.waits,
            "median_tts_ns": self.tts.map(|d| d.as_nanos() as u64),
            "launches": self.report.launches,
            "to_device_bytes": self.report.to_device_bytes,
            "to_host_bytes": self.report.to_host_bytes,
            "ptx_instructions": self.instructions,
        })
        .to_string()
    }
}

/// The rows as a table.
pub fn table(rows: &[WaitRow]) -> String {
    let mut t = offload::table::new([
        "spin, host safepoints",
        "slots",
        "launch ms",
        "safepoints",
        "median TTS µs",
        "launches",
        "to the device",
        "back",
        "PTX instructions",
    ]);
    for r in rows {
        t.add_row([
            r.safepoints.clone(),
            r.slots.to_string(),
            format!("{:.1}", r.time.as_secs_f64() * 1e3),
            r.report.safepoints.to_string(),
            r.tts
                .map_or("-".into(), |d| format!("{:.0}", d.as_secs_f64() * 1e6)),
            r.report.launches.to_string(),
            bytes_text(r.report.to_device_bytes),
            bytes_text(r.report.to_host_bytes),
            r.instructions.map_or("-".into(), |i| i.to_string()),
        ]);
    }
    offload::table::right(&mut t, &[2, 3, 4, 5, 6, 7, 8]);
    offload::table::text(&t)
}
