//! Replaying deopt records, and the accounting of what became of them, for
//! every device.
//!
//! A device hands each record it reads from its save area — `(workitem,
//! site, reason)` and the saved values — to a [`Replayer`], which resumes
//! the workitem in an interpreter from the site's frame state (each site's
//! frames are resolved once, on its first record), and then to
//! [`Replays::replayed`]; a record an interrupt cut off goes to
//! [`Replays::abandoned`] instead, and is dropped. The CPU device keeps a
//! `Replays` per slot (its workers replay as their slots fill) and merges
//! them; the CUDA device one per launch (the host replays after each grid).
//! [`Replays::finish`] writes the counts, the deopt tables and the first
//! exception into the [`LaunchReport`].

use crate::error::KernelExceptions;
use crate::error::OffloadError;
use crate::report::{DeoptAction, DeoptRow, LaunchReport};
use offload_deopt::{DeoptMetadata, Reason};
use offload_heap::{Allocator, Heap};
use offload_host_interp::{
    Collector, Control, Exception, Interpreter, Program, ResumeError, ResumePlan,
};
use offload_ir::ExceptionKind;
use offload_ir::SiteId;
use std::collections::BTreeMap;

/// A record's header: the workitem, its site and why it stopped.
pub(crate) type Header = (i64, SiteId, Reason);

/// Which records a device may resume after an allocation failure: not one
/// whose workitem failed at the same site again after it was resumed for
/// that — the interpreter, which collects and waits for room, finishes it.
/// Resumed again, it could fail for ever (a GPU's fresh eden can fill up
/// the same way; on the CPU, a collection before each batch of replays
/// retires the TLAB its refill filled, and its next refill can fail too).
#[derive(Debug, Default)]
pub(crate) struct AllocResumes(Vec<Option<(i64, SiteId)>>);

impl AllocResumes {
    /// Whether record `r` (numbered from 0 for its owner), with header
    /// `h`, may be resumed; notes an allocation failure resumed.
    pub(crate) fn may_resume(&mut self, r: usize, h: Header) -> bool {
        if self.0.len() <= r {
            self.0.resize(r + 1, None);
        }
        let failed = h.2 == Reason::AllocationFailure;
        if failed && self.0[r] == Some((h.0, h.1)) {
            return false;
        }
        self.0[r] = failed.then_some((h.0, h.1));
        true
    }
}

/// What resuming one record gave: the workitem's end (or its exception),
/// or why it could not be resumed.
pub(crate) type Resumed = Result<Result<Option<u64>, Box<Exception>>, Box<ResumeError>>;

/// Resumes records of one kernel version on one worker: an interpreter,
/// made on the first record, and each site's frames, resolved on its first.
pub(crate) struct Replayer<'a> {
    prog: &'a Program,
    heap: &'a Heap,
    alloc: &'a Allocator<'a>,
    control: &'a Control,
    worker: usize,
    epoch: u64,
    gc: &'a dyn Collector,
    interp: Option<Interpreter<'a>>,
    plans: Vec<Option<ResumePlan>>,
}

impl<'a> Replayer<'a> {
    /// A replayer for records of the version `meta` describes, on `worker`,
    /// serving the launch whose interrupt ticket is `epoch`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        prog: &'a Program,
        heap: &'a Heap,
        alloc: &'a Allocator<'a>,
        control: &'a Control,
        worker: usize,
        epoch: u64,
        gc: &'a dyn Collector,
        meta: &DeoptMetadata,
    ) -> Replayer<'a> {
        Replayer {
            prog,
            heap,
            alloc,
            control,
            worker,
            epoch,
            gc,
            interp: None,
            plans: vec![None; meta.sites.len()],
        }
    }

    /// Resume the record `(workitem, site, _)` with `values`. Returns what
    /// became of it, and whether an interrupt stopped it part-way (then
    /// the record counts as abandoned, whatever the result says).
    #[inline]
    pub(crate) fn resume(
        &mut self,
        meta: &DeoptMetadata,
        (workitem, site, _): Header,
        values: &[u64],
    ) -> (Resumed, bool) {
        let it = self.interp.get_or_insert_with(|| {
            let mut it = Interpreter::new(self.prog, self.heap, self.alloc, self.worker);
            it.set_control(self.control, self.epoch);
            it.set_collector(self.gc);
            it
        });
        let res = match self.plans.get_mut(site.0 as usize) {
            Some(Some(plan)) => it.resume_planned(plan, workitem, values),
            Some(empty) => match it.resume_plan(meta, site) {
                Ok(plan) => it.resume_planned(empty.insert(plan), workitem, values),
                Err(e) => Err(Box::new(e)),
            },
            // A site the metadata does not have (`read_into` checks the ids,
            // so only a corrupt record): `resume_plan` says which.
            None => match it.resume_plan(meta, site) {
                Ok(plan) => it.resume_planned(&plan, workitem, values),
                Err(e) => Err(Box::new(e)),
            },
        };
        self.control.workitem_ended();
        (res, it.take_interrupted())
    }

    /// Whether a replay stored a reference to an object of this launch
    /// into an older object (the interpreter's write barrier).
    pub(crate) fn escaped(&self) -> bool {
        self.interp.as_ref().is_some_and(Interpreter::escaped)
    }
}

/// Counts by site id and reason.
#[derive(Default)]
struct PerSite(Vec<[u64; Reason::ALL.len()]>);

impl PerSite {
    #[inline]
    fn add(&mut self, site: SiteId, reason: Reason, n: u64) {
        let i = site.0 as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, [0; Reason::ALL.len()]);
        }
        self.0[i][reason.code() as usize] += n;
    }

    /// Every non-zero count, by site and reason.
    fn iter(&self) -> impl Iterator<Item = (SiteId, Reason, u64)> + '_ {
        self.0.iter().enumerate().flat_map(|(i, by)| {
            Reason::ALL
                .iter()
                .zip(by)
                .filter(|&(_, &n)| n > 0)
                .map(move |(&r, &n)| (SiteId(i as u32), r, n))
        })
    }
}

/// What became of a launch's deopt records: replayed (to their end or an
/// exception) or abandoned by an interrupt, by site and reason, with the
/// first rows of the deopt table.
#[derive(Default)]
pub(crate) struct Replays {
    /// Records replayed, by site id and reason code (a count per record
    /// costs an index, not a map insertion: replay is the hot path of a
    /// launch that deopts often).
    replayed_at: PerSite,
    /// Records an interrupt dropped, by site id and reason code.
    abandoned_at: PerSite,
    /// Records the device resumed itself, by site id and reason code.
    resumed_at: PerSite,
    /// Records the device resumed ([`LaunchReport::resumed`]).
    pub(crate) resumed: u64,
    /// Workitems replayed to their end or their exception.
    pub(crate) replayed: u64,
    /// Workitems an interrupt stopped part-way.
    pub(crate) abandoned: u64,
    /// Rows of the lowest workitems seen: at most twice
    /// [`LaunchReport::TABLE_ROWS`], cut back to that many lowest when full.
    table: Vec<DeoptRow>,
    /// Once the table has been cut: the highest workitem it kept (a row
    /// above it can never be among the lowest).
    table_cutoff: Option<i64>,
    /// The replays' exceptions.
    pub(crate) thrown: Thrown,
    /// The values replayed workitems of a reducing kernel returned, with
    /// their workitems.
    pub(crate) values: Vec<(i64, u64)>,
}

impl Replays {
    /// Account for one record an interrupt dropped.
    pub(crate) fn abandoned(&mut self, meta: &DeoptMetadata, h: Header, values: &[u64]) {
        self.abandoned_at.add(h.1, h.2, 1);
        self.abandoned += 1;
        self.row(meta, h, DeoptAction::Interrupted, values);
    }

    /// Account for one record the device resumed itself.
    pub(crate) fn resumed_on_device(&mut self, meta: &DeoptMetadata, h: Header, values: &[u64]) {
        self.resumed_at.add(h.1, h.2, 1);
        self.resumed += 1;
        self.row(meta, h, DeoptAction::Resumed, values);
    }

    /// Account for one replayed record; an error if it could not be
    /// resumed at all (its site or values do not match the metadata).
    #[inline]
    pub(crate) fn replayed(
        &mut self,
        meta: &DeoptMetadata,
        h: Header,
        values: &[u64],
        res: Resumed,
    ) -> Result<(), OffloadError> {
        let action = match res {
            Ok(Ok(value)) => {
                if let Some(v) = value {
                    self.values.push((h.0, v));
                }
                DeoptAction::Replayed
            }
            Ok(Err(e)) => {
                self.thrown.add(*e);
                DeoptAction::ReplayedThrew
            }
            Err(source) => {
                return Err(OffloadError::Resume {
                    workitem: h.0,
                    source,
                });
            }
        };
        self.replayed_at.add(h.1, h.2, 1);
        self.replayed += 1;
        self.row(meta, h, action, values);
        Ok(())
    }

    /// An account for the records of the version `meta` describes (room
    /// for each of its sites made at once).
    pub(crate) fn new(meta: &DeoptMetadata) -> Replays {
        let n = meta.sites.len();
        Replays {
            replayed_at: PerSite(vec![[0; Reason::ALL.len()]; n]),
            abandoned_at: PerSite(vec![[0; Reason::ALL.len()]; n]),
            resumed_at: PerSite(vec![[0; Reason::ALL.len()]; n]),
            ..Replays::default()
        }
    }

    /// Account for one resumed record: abandoned when an interrupt
    /// stopped it, replayed otherwise.
    #[inline]
    pub(crate) fn resumed(
        &mut self,
        meta: &DeoptMetadata,
        h: Header,
        values: &[u64],
        (res, stopped): (Resumed, bool),
    ) -> Result<(), OffloadError> {
        if stopped {
            self.abandoned(meta, h, values);
            Ok(())
        } else {
            self.replayed(meta, h, values, res)
        }
    }

    /// Keep the row of record `h` if its workitem may be among the
    /// [`LaunchReport::TABLE_ROWS`] lowest of the launch (records arrive in
    /// no order: slots deopt out of order and the save area is drained as
    /// it fills, so the first rows added are not the first workitems).
    fn row(&mut self, meta: &DeoptMetadata, h: Header, action: DeoptAction, values: &[u64]) {
        if self.table_cutoff.is_none_or(|c| h.0 < c) {
            if self.table.len() == 2 * LaunchReport::TABLE_ROWS {
                self.cut_table();
                if self.table_cutoff.is_some_and(|c| h.0 >= c) {
                    return;
                }
            }
            self.table.push(DeoptRow {
                workitem: h.0,
                action,
                bci: meta.site(h.1).map_or(u32::MAX, |s| s.bci),
                reason: h.2,
                site: Some(h.1),
                values: values.to_vec(),
                saved: Vec::new(),
            });
        }
    }

    /// Cut the table to its [`LaunchReport::TABLE_ROWS`] lowest
    /// workitems (stable: rows of one workitem keep their order).
    fn cut_table(&mut self) {
        self.table.sort_by_key(|r| r.workitem);
        self.table.truncate(LaunchReport::TABLE_ROWS);
        if self.table.len() == LaunchReport::TABLE_ROWS {
            self.table_cutoff = self.table.last().map(|r| r.workitem);
        }
    }

    /// Both accounts together.
    pub(crate) fn merge(mut self, other: Replays) -> Replays {
        for (site, reason, n) in other.replayed_at.iter() {
            self.replayed_at.add(site, reason, n);
        }
        for (site, reason, n) in other.abandoned_at.iter() {
            self.abandoned_at.add(site, reason, n);
        }
        for (site, reason, n) in other.resumed_at.iter() {
            self.resumed_at.add(site, reason, n);
        }
        self.resumed += other.resumed;
        self.replayed += other.replayed;
        self.values.extend(other.values);
        self.abandoned += other.abandoned;
        self.table.extend(other.table);
        self.cut_table();
        self.thrown = self.thrown.merge(other.thrown);
        self
    }

    /// Write the account into `report` (of a launch of the version `meta`
    /// describes, of `prog`): `replayed`, `abandoned`, `resumed`, the deopt
    /// counts — `deopts` by site bytecode index counts replayed, resumed
    /// and abandoned records, `site_deopts` (what recompilation policies
    /// see) replayed and resumed ones — and the deopt table, sorted by
    /// workitem, with its
    /// values named. Returns the exceptions, for [`Thrown::finish`].
    pub(crate) fn finish(
        mut self,
        prog: &Program,
        meta: &DeoptMetadata,
        report: &mut LaunchReport,
    ) -> Thrown {
        let ran = || self.replayed_at.iter().chain(self.resumed_at.iter());
        for (site, reason, n) in ran().chain(self.abandoned_at.iter()) {
            let bci = meta.site(site).map_or(u32::MAX, |s| s.bci);
            *report.deopts.entry((bci, reason)).or_insert(0) += n;
        }
        for (site, reason, n) in ran() {
            *report.site_deopts.entry((site, reason)).or_insert(0) += n;
        }
        report.replayed += self.replayed;
        report.resumed += self.resumed;
        report.abandoned += self.abandoned;
        self.cut_table();
        crate::report::name_saved(prog, meta, &mut self.table);
        report.deopt_table = self.table;
        self.thrown
    }
}

/// Exceptions of a part of the range: bounded however many workitems throw.
#[derive(Default)]
pub(crate) struct Thrown {
    first: Option<Exception>,
    pub(crate) count: u64,
    by_kind: BTreeMap<ExceptionKind, u64>,
    lowest: Vec<i64>,
}

impl Thrown {
    pub(crate) fn add(&mut self, e: Exception) {
        let w = e.workitem.unwrap_or(i64::MAX);
        self.count += 1;
        *self.by_kind.entry(e.kind).or_default() += 1;
        self.note(w);
        if self
            .first
            .as_ref()
            .is_none_or(|f| f.workitem.unwrap_or(i64::MAX) > w)
        {
            self.first = Some(e);
        }
    }

    fn note(&mut self, w: i64) {
        let at = self.lowest.partition_point(|&x| x < w);
        if at < KernelExceptions::LISTED {
            self.lowest.insert(at, w);
            self.lowest.truncate(KernelExceptions::LISTED);
        }
    }

    pub(crate) fn merge(mut self, other: Thrown) -> Thrown {
        self.count += other.count;
        for (k, n) in other.by_kind {
            *self.by_kind.entry(k).or_default() += n;
        }
        for w in other.lowest {
            self.note(w);
        }
        if let Some(o) = other.first
            && self.first.as_ref().is_none_or(|f| f.workitem > o.workitem)
        {
            self.first = Some(o);
        }
        self
    }
}

impl Thrown {
    /// The launch's result: the report, or the exceptions with the report.
    /// Whether an interrupt cut the launch short is derived here, for every
    /// device: only what it actually stopped counts (one that came after
    /// the last workitem changed nothing).
    ///
    /// Sets `threw` and `completed` (`completed + threw == on_device +
    /// replayed`: every workitem that ran to its end ran to it with or
    /// without an exception).
    pub(crate) fn finish(self, mut report: LaunchReport) -> Result<LaunchReport, OffloadError> {
        report.threw = self.count;
        report.completed = report.on_device + report.replayed - self.count;
        report.interrupted = report.abandoned > 0 || report.not_started() > 0;
        if report.interrupted {
            return Err(OffloadError::Interrupted(Box::new(report)));
        }
        match self.first {
            None => Ok(report),
            Some(first) => Err(OffloadError::Exceptions(Box::new(KernelExceptions {
                first,
                count: self.count,
                by_kind: self.by_kind,
                workitems: self.lowest,
                report,
            }))),
        }
    }
}
