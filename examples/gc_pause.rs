//! The collector's figures for BENCHMARKS.md: pause against live data
//! (1, 10, 100 MiB live, as much garbage again), and an allocation-heavy
//! kernel whose garbage escapes the nursery run with a maximum heap of
//! twice its live data against an unlimited one.
//!
//! `cargo run --release --example gc_pause`

use offload::{Arg, Device, Runtime};
use std::time::{Duration, Instant};

const NODES: &str = include_str!("gc/nodes.obc");
/// Bytes a node and its array take (24 + 88).
const NODE_BYTES: usize = 112;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("pause against live data (median of 5; as much garbage as live data each time):");
    for mib in [1usize, 10, 100] {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .max_heap(1 << 30)
            .gc(offload::GcPolicy {
                trigger: 0.0,
                ..offload::GcPolicy::default()
            })
            .build()?;
        let m = rt.load("nodes.obc", NODES)?;
        let n = mib * (1 << 20) / NODE_BYTES;
        let live = m.new_ref_array("Node", n)?;
        let c = m.closure("fill", [Arg::from(&live)])?;
        rt.par_offload(0..n as i64, &c)?;
        drop(c);
        let mut live = live;
        for moving in [false, true] {
            let mut pauses = Vec::new();
            let mut marks = Vec::new();
            for _ in 0..5 {
                // As much garbage as live data: above the live data (which
                // stays in place), or below a fresh copy of it (which all
                // slides down).
                let dead = m.new_ref_array("Node", n)?;
                let c = m.closure("fill", [Arg::from(&dead)])?;
                rt.par_offload(0..n as i64, &c)?;
                drop(c);
                drop(dead);
                if moving {
                    let fresh = m.new_ref_array("Node", n)?;
                    let c = m.closure("fill", [Arg::from(&fresh)])?;
                    rt.par_offload(0..n as i64, &c)?;
                    live = fresh;
                }
                let t = Instant::now();
                let st = rt.collect()?;
                pauses.push(t.elapsed());
                marks.push(st.mark);
            }
            let st = rt.last_collection().expect("collected");
            println!(
                "  {mib:>3} MiB live, {} ({} objects, {:.1} MiB after of which {:.1} KiB padding, {:.1} MiB moved): pause {:.1} ms (mark {:.1} ms), {:.1} ms per 100 MiB live",
                if moving { "all moving" } else { "in place  " },
                st.live_objects,
                st.after as f64 / (1 << 20) as f64,
                st.padding as f64 / 1024.0,
                st.moved as f64 / (1 << 20) as f64,
                median(pauses.clone()).as_secs_f64() * 1e3,
                median(marks).as_secs_f64() * 1e3,
                median(pauses).as_secs_f64() * 1e3 * 100.0 / (st.after as f64 / (1 << 20) as f64)
            );
        }
        drop(live);
    }

    println!(
        "allocation-heavy kernel, garbage escaping the nursery (20 M workitems, ~2.2 GiB allocated):"
    );
    let ring_len = 100_000; // ~11 MiB live
    let run = |max: usize| -> Result<(Duration, offload::GcSummary), Box<dyn std::error::Error>> {
        let rt = Runtime::builder()
            .device(Device::Cpu)
            .initial_heap(max.min(64 << 20))
            .max_heap(max)
            .build()?;
        let m = rt.load("nodes.obc", NODES)?;
        let ring = m.new_ref_array("Node", ring_len)?;
        let c = m.closure("churn", [Arg::from(&ring), Arg::I32(ring_len as i32)])?;
        rt.par_offload(0..100_000, &c)?; // compile and warm up
        rt.finish_compiles();
        let t = Instant::now();
        let r = rt.par_offload(0..20_000_000, &c)?;
        Ok((t.elapsed(), r.gc))
    };
    let live = ring_len * NODE_BYTES + 8 * ring_len;
    let mut small = Vec::new();
    let mut big = Vec::new();
    let mut gc_small = None;
    for _ in 0..3 {
        let (t, g) = run((2 * live).max(4 << 20))?;
        small.push(t);
        gc_small = Some(g);
        big.push(run(8 << 30)?.0);
    }
    let (s, b) = (median(small), median(big));
    println!(
        "  max heap 2x live ({:.1} MiB): {:.0} ms ({}); unlimited (8 GiB): {:.0} ms; ratio {:.2}",
        (2 * live) as f64 / (1 << 20) as f64,
        s.as_secs_f64() * 1e3,
        gc_small.expect("ran"),
        b.as_secs_f64() * 1e3,
        s.as_secs_f64() / b.as_secs_f64()
    );
    Ok(())
}
