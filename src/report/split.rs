//! The report of a launch split over devices (`crate::split`): a row per
//! device ([`SplitShare`]), and the parts' reports merged into the
//! launch's.

use super::{LaunchReport, Timings};
use std::collections::BTreeMap;
use std::time::Duration;

/// One device's share of a launch split over devices
/// ([`LaunchReport::split`]). The rows' workitems, and what an interrupt
/// left untaken, partition the launch's range.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitShare {
    /// The device: `cpu`, or `GPU k` (its number among the runtime's
    /// GPUs).
    pub device: String,
    /// Parts of the range it ran: sub-ranges it took one at a time, each
    /// a launch of its own on the device.
    pub parts: u64,
    /// Workitems of its parts.
    pub workitems: u64,
    /// Time it spent in its parts: the sum of their launches' wall times.
    pub busy: Duration,
    /// Of `busy`, the time its parts ran workitems: the sum of their
    /// [`crate::Timings::run`]. The rest (compiling, sending, launching,
    /// replaying) is the parts' fixed cost, which sizes the device's
    /// parts in later launches.
    pub run: Duration,
    /// Time from the end of its last part to the end of the last
    /// device's: how long it sat idle while the others finished (the
    /// launch's whole wall time when it ran no part).
    pub idle_tail: Duration,
    /// Bytes its parts moved to the device (0 on the CPU).
    pub to_device_bytes: u64,
    /// Bytes its parts moved back (0 on the CPU).
    pub to_host_bytes: u64,
    /// Deopts in its parts (the sum of their [`LaunchReport::deopts`]).
    pub deopts: u64,
    /// Its workitems per second as a share of the fastest device's, as
    /// the launch measured them last (1 for the fastest; 0 when not
    /// measured: no part, or only parts taken before the reference device
    /// finished its first, whose place against it is unknown). Parts of
    /// later launches of the kernel are sized by it.
    pub speed: f64,
    /// What a part costs it besides running workitems — launching,
    /// copies, replays, not compiling — as the launch measured it last (0
    /// when it ran no part). Parts of later launches are sized by it.
    pub part_cost: Duration,
}

/// One part's report, by the index of the device (in the split's order)
/// that ran it.
pub(crate) type Part = (usize, LaunchReport);

/// The launch's report from its parts': counters summed, deopts merged,
/// the deopt table in workitem order, and the phases of the device that
/// finished last (`last`), summed over its parts, with the rest of the
/// launch's `wall` time (starting, the merge) in `setup` — so that the
/// phases still add up to the total. `shares` are the devices' rows.
pub(crate) fn merge(
    mut base: LaunchReport,
    parts: Vec<Part>,
    shares: Vec<SplitShare>,
    last: usize,
    wall: Duration,
) -> LaunchReport {
    let mut workers: BTreeMap<usize, usize> = BTreeMap::new();
    let mut notes: Vec<String> = Vec::new();
    let mut gpus: Vec<String> = Vec::new();
    let mut t = Timings::default();
    base.launches = 0;
    for (d, p) in &parts {
        let w = workers.entry(*d).or_default();
        *w = (*w).max(p.workers);
        base.on_device += p.on_device;
        base.completed += p.completed;
        base.threw += p.threw;
        base.chunks += p.chunks;
        base.waits += p.waits;
        base.runs_beside += p.runs_beside;
        base.replayed += p.replayed;
        base.resumed += p.resumed;
        base.never_ran += p.never_ran;
        base.launches += p.launches;
        base.reentries += p.reentries;
        base.abandoned += p.abandoned;
        base.quick_workitems += p.quick_workitems;
        base.quick_tier |= p.quick_tier;
        base.interrupted |= p.interrupted;
        base.to_device_bytes += p.to_device_bytes;
        base.to_host_bytes += p.to_host_bytes;
        let a = &mut base.alloc;
        a.refills += p.alloc.refills;
        a.buffer_refills += p.alloc.buffer_refills;
        a.direct += p.alloc.direct;
        a.exhausted += p.alloc.exhausted;
        a.heap_grows += p.alloc.heap_grows;
        a.reclaimed += p.alloc.reclaimed;
        a.recycled += p.alloc.recycled;
        for (k, n) in &p.deopts {
            *base.deopts.entry(*k).or_default() += n;
        }
        for (k, n) in &p.site_deopts {
            *base.site_deopts.entry(*k).or_default() += n;
        }
        base.deopt_table.extend(p.deopt_table.iter().cloned());
        if base.version.is_none() && p.version.is_some() {
            base.version = p.version;
            base.speculations = p.speculations.clone();
        }
        if let Some(d) = p.dispatch {
            let m = base.dispatch.get_or_insert_with(Default::default);
            m.lookups += d.lookups;
            m.header_loads += d.header_loads;
        }
        if let Some(n) = &p.fallback
            && !notes.contains(n)
        {
            notes.push(n.clone());
        }
        if let Some(g) = &p.gpu
            && !gpus.contains(g)
        {
            gpus.push(g.clone());
        }
        if *d == last {
            t.compile += p.timings.compile;
            t.setup += p.timings.setup + p.timings.collect;
            t.run += p.timings.run;
            t.replay += p.timings.replay;
            t.teardown += p.timings.teardown;
        }
    }
    base.workers = workers.values().sum();
    base.deopt_table.sort_by_key(|r| r.workitem);
    base.deopt_table.truncate(LaunchReport::TABLE_ROWS);
    base.fallback = (!notes.is_empty()).then(|| notes.join("; "));
    base.gpu = (!gpus.is_empty()).then(|| gpus.join(", "));
    let inside = t.compile + t.setup + t.run + t.replay + t.teardown;
    t.setup += wall.saturating_sub(inside);
    t.total = t.compile + t.setup + t.run + t.replay + t.teardown;
    base.timings = t;
    base.split = shares;
    base
}

/// `split over cpu 40% (3 parts, idle 0.1 ms), GPU 0 60% (...)`: the
/// summary line's part for a split launch.
pub(crate) fn text(shares: &[SplitShare], total: u64) -> String {
    let rows: Vec<String> = shares
        .iter()
        .map(|s| {
            format!(
                "{} {} ({:.0}%, {} part{}, idle tail {:.3} ms)",
                s.device,
                s.workitems,
                if total == 0 {
                    0.0
                } else {
                    100.0 * s.workitems as f64 / total as f64
                },
                s.parts,
                if s.parts == 1 { "" } else { "s" },
                s.idle_tail.as_secs_f64() * 1e3
            )
        })
        .collect();
    format!("split over {}", rows.join(", "))
}
