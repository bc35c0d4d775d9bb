//! The runtime's side of garbage collection: when a collection runs, what
//! its roots are, and what it reports. The algorithm (a parallel-marking
//! sliding mark-compact of the whole heap) is `offload_heap::gc`.
//!
//! # When
//!
//! Always at a safepoint ([`offload_host_interp::Control`]): every running
//! worker of every launch is parked at a poll, every allocator's TLABs are
//! retired, and nothing touches the heap but the collector.
//!
//! * **Eden exhausted during a launch**, on any device: the refiller
//!   publishes FAILED, compiled code deopts with `AllocationFailure`, and
//!   the interpreter that resumes the workitem (or runs it, on the
//!   interpreter device) finds eden exhausted too and asks for a
//!   collection ([`offload_host_interp::Collector`]) as a running worker;
//!   the launch then goes on (its slots' TLABs are reset). On the CUDA
//!   device the device eden's exhaustion ends the kernel, and its replays
//!   collect on the host between relaunches.
//! * **Between launches**, when the heap has grown past
//!   [`GcPolicy::trigger`] times the live data the last collection left
//!   (and past the initial heap size): a launch collects before it starts.
//! * **On request**: [`crate::Runtime::collect`], the REPL's `:gc`.
//! * A host allocation ([`crate::Runtime::new_array`] and the like) that
//!   finds the heap full collects and tries once more.
//!
//! `OutOfMemory` is thrown only when an allocation still fails after a
//! collection of its own and, while other workers run, after waiting for
//! them to make progress (what they hold may die): the waiter collects
//! again and allocates inside that collection's safepoint, so workitems
//! that each fit the heap alone run one after another instead of failing
//! for having run at the same time (`offload_host_interp::room`). When
//! every running worker waits, one collects alone; if that makes no room,
//! what fills the heap lives on, and until the next launch allocations that
//! find no room fail at once.
//!
//! # Roots
//!
//! * every handle a user holds ([`Root`], in the runtime's table);
//! * of each launch in flight ([`LaunchRoots`]): its captured references,
//!   and every reference slot of every record in its save area (the deopt
//!   metadata's `ref_words`);
//! * the frames of every interpreter parked at the safepoint (replays in
//!   progress, the interpreter device's workitems), and of the one that
//!   asked for the collection: the verifier's types at each frame's
//!   bytecode index say which slots are references.
//!
//! The runtime's own tables hold no references: profiles count classes by
//! id, compiled code embeds no heap address, and class shapes are data.
//!
//! Every other reference a thread holds between safepoints is a bare
//! [`offload_heap::Ref`] valid only until the next collection (what
//! `Module::element` returns, say): a host API call holds off collections
//! while it runs (it is a running worker of [`offload_host_interp::Control`]).

mod handles;
mod launch;

pub use handles::Root;
pub(crate) use handles::RootTable;
pub(crate) use launch::{LaunchGuard, LaunchRoots};

use crate::error::OffloadError;
use crate::report::GcSummary;
use offload_heap::{ClassShape, GcStats, Heap, Roots};
use offload_host_interp::{Control, Parked};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// When the runtime collects besides on exhaustion and on request
/// ([`crate::RuntimeBuilder::gc`]).
///
/// ```
/// use offload::{GcPolicy, Runtime};
///
/// // Collect before a launch once the heap holds 4x the live data.
/// let rt = Runtime::builder()
///     .gc(GcPolicy { trigger: 4.0, ..GcPolicy::default() })
///     .build()?;
/// drop(rt.new_array::<f64>(1 << 20)?);
/// let st = rt.collect()?;
/// assert!(st.freed() >= 8 << 20);
/// assert_eq!(rt.gc_totals().collections, 1);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct GcPolicy {
    /// Collect before a launch once the heap in use is this many times the
    /// live data the last collection left (and more than the initial heap
    /// size). 0 turns these collections off.
    pub trigger: f64,
    /// Stress (tests): every `stress`-th TLAB refill of a launch finds eden
    /// exhausted, so that the launch collects as if the heap were full.
    /// 0: off; at least 2 otherwise (with 1 no refill would ever succeed).
    pub stress: u64,
    /// Stress (tests): collect before each batch of replays (a CPU slot's
    /// full records, a GPU kernel's), so that the records' references move
    /// between their deopt and their replay.
    pub collect_before_replays: bool,
    /// Verify the heap after every collection (an error names the first
    /// bad object); on by default in debug builds.
    pub verify: bool,
}

impl Default for GcPolicy {
    fn default() -> Self {
        GcPolicy {
            trigger: 2.0,
            stress: 0,
            collect_before_replays: false,
            verify: cfg!(debug_assertions),
        }
    }
}

/// The collector's state in a runtime: what it needs to know, the roots it
/// does not find at the safepoint itself, and what it has done.
#[derive(Debug)]
pub(crate) struct Collector {
    pub(crate) policy: GcPolicy,
    /// The shapes of every class loaded into the runtime, by global class
    /// id (ids are handed out in load order and never reused): the
    /// collector and the heap verifier know the class of every object,
    /// including objects of a module the caller no longer holds (a REPL
    /// redefinition). Its length is the next module's class base.
    pub(crate) shapes: Mutex<Vec<ClassShape>>,
    /// Every handle's root.
    pub(crate) handles: RootTable,
    /// The launches in flight.
    launches: launch::Registry,
    /// The workers that mark: as many as the runtime has, in a pool of
    /// their own (the runtime's workers are parked at the safepoint).
    pool: OnceLock<Result<rayon::ThreadPool, String>>,
    workers: usize,
    /// Everything collected so far.
    totals: Mutex<GcSummary>,
    /// The last collection's figures.
    last: Mutex<Option<GcStats>>,
    /// Bytes in use after the last collection (the live data then).
    live_after: std::sync::atomic::AtomicU64,
    /// Whether a worker that waited for room until every running worker
    /// waited, then collected, still found too little free for its
    /// allocation: the heap is full of data that lives on, and until a
    /// launch starts again allocations that find no room fail at once
    /// (`OnExhausted::no_room`) rather than each waiting and collecting.
    full: std::sync::atomic::AtomicBool,
}

/// The roots of one collection: the handle table, the launches in flight,
/// and the parked workers' frames.
struct AllRoots<'a, 'p> {
    handles: &'a RootTable,
    launches: &'a [&'a LaunchRoots<'a>],
    parked: &'a mut Parked<'p>,
}

/// The roots, handed to the collector's pool for the duration of one
/// collection.
struct SendRoots<'r>(&'r mut dyn Roots);

// SAFETY: the collecting thread (and `pool.install` under it) receives
// this while the calling thread blocks until it returns; the roots (the
// handle table behind its mutex, the launches' atomics, the parked
// workers' frames, which their owners do not touch while parked) are used
// by that one thread only, for the length of the call.
unsafe impl Send for SendRoots<'_> {}

impl Roots for AllRoots<'_, '_> {
    fn visit(&mut self, f: &mut dyn FnMut(&mut u32)) {
        self.handles.visit(f);
        for l in self.launches {
            l.visit(f);
        }
        self.parked.visit(f);
    }
}

impl Collector {
    pub(crate) fn new(policy: GcPolicy, workers: usize) -> Collector {
        Collector {
            policy,
            shapes: Mutex::new(Vec::new()),
            handles: RootTable::default(),
            launches: launch::Registry::default(),
            pool: OnceLock::new(),
            workers,
            totals: Mutex::new(GcSummary::default()),
            last: Mutex::new(None),
            live_after: std::sync::atomic::AtomicU64::new(0),
            full: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Register a launch's roots for as long as the guard lives.
    pub(crate) fn launch<'a>(&'a self, roots: &'a LaunchRoots<'a>) -> LaunchGuard<'a> {
        self.full.store(false, std::sync::atomic::Ordering::Relaxed);
        self.launches.register(roots)
    }

    /// Everything collected so far.
    pub(crate) fn totals(&self) -> GcSummary {
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Collections that ran so far.
    pub(crate) fn collections(&self) -> u64 {
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .collections
    }

    /// The last collection's figures.
    pub(crate) fn last(&self) -> Option<GcStats> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether the heap has grown enough since the last collection that a
    /// launch should collect before it starts ([`GcPolicy::trigger`]).
    pub(crate) fn due(&self, heap: &Heap) -> bool {
        if self.policy.trigger <= 0.0 {
            return false;
        }
        let used = heap.used();
        let live = self
            .live_after
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1);
        used > heap.config().initial as u64 && used as f64 >= self.policy.trigger * live as f64
    }

    /// Under [`GcPolicy::collect_before_replays`], collect from a running
    /// worker about to replay records (they are roots in its launch's save
    /// area). A failed collection is the launch's error.
    pub(crate) fn before_replays(
        &self,
        heap: &Heap,
        control: &Control,
    ) -> Result<(), OffloadError> {
        if self.policy.collect_before_replays {
            self.collect_here(heap, control)?;
        }
        Ok(())
    }

    /// Collect from a running worker that holds no references of its own
    /// (its launch's are registered): at once, or by parking in another
    /// worker's safepoint already in progress.
    pub(crate) fn collect_here(&self, heap: &Heap, control: &Control) -> Result<(), OffloadError> {
        let mut none = |_: &mut dyn FnMut(&mut u32)| {};
        match self.collect_from_worker(heap, control, &mut none) {
            Some(r) => r.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Whether a collection could make room for an allocation that found
    /// eden exhausted: it can free at most what was allocated since the
    /// last one, so unless that is at least a sixteenth of the maximum
    /// heap the allocation fails with `OutOfMemory` without collecting —
    /// a launch whose live data fills the heap throws at once for each
    /// workitem that allocates, instead of collecting each time (always
    /// worth it under stress, whose exhaustion is made up).
    pub(crate) fn worth_collecting(&self, heap: &Heap) -> bool {
        let live = self.live_after.load(std::sync::atomic::Ordering::Relaxed);
        self.policy.stress > 0
            || self.totals().collections == 0
            || heap.used().saturating_sub(live) >= heap.config().max as u64 / 16
    }

    /// Collect now, from a thread that is not a running worker (the host,
    /// between launches or during them): bring every launch to a
    /// safepoint, collect, and let them go on.
    pub(crate) fn collect(&self, heap: &Heap, control: &Control) -> Result<GcStats, OffloadError> {
        let (r, tts) = control.safepoint_with(|parked| self.collect_stopped(heap, parked));
        self.account(r, tts)
    }

    /// Collect now, from a running worker (an interpreter or a host call
    /// whose allocation found the heap full), with `own` among the roots.
    /// `None` when another safepoint was in progress: this worker parked in
    /// it (a collection may have run) and should try again.
    pub(crate) fn collect_from_worker(
        &self,
        heap: &Heap,
        control: &Control,
        own: &mut dyn Roots,
    ) -> Option<Result<GcStats, OffloadError>> {
        self.collect_then(heap, control, own, || ())
            .map(|r| r.map(|(st, ())| st))
    }

    /// [`Collector::collect_from_worker`], then `then()` inside the same
    /// safepoint (every other worker still parked).
    pub(crate) fn collect_then<T>(
        &self,
        heap: &Heap,
        control: &Control,
        own: &mut dyn Roots,
        then: impl FnOnce() -> T,
    ) -> Option<Result<(GcStats, T), OffloadError>> {
        let (r, tts) = control.safepoint_from_worker(own, |parked| {
            self.collect_stopped(heap, parked).map(|st| (st, then()))
        })?;
        Some(r.and_then(|(st, t)| Ok((self.account(Ok(st), tts)?, t))))
    }

    fn account(
        &self,
        r: Result<GcStats, OffloadError>,
        tts: Duration,
    ) -> Result<GcStats, OffloadError> {
        let mut st = r?;
        st.to_safepoint = tts;
        self.totals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(&st);
        self.live_after
            .store(st.after, std::sync::atomic::Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(st.clone());
        Ok(st)
    }

    /// The collection itself, with every worker stopped.
    fn collect_stopped(
        &self,
        heap: &Heap,
        parked: &mut Parked<'_>,
    ) -> Result<GcStats, OffloadError> {
        let shapes = self
            .shapes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let pool = self
            .pool
            .get_or_init(|| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(self.workers.max(1))
                    .thread_name(|i| format!("offload-gc-{i}"))
                    .build()
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| {
                OffloadError::Setup(format!("cannot start the collector's workers: {e}"))
            })?;
        self.launches.with_all(|launches| {
            for a in launches.iter().filter_map(|l| l.alloc) {
                a.retire_for_collection();
            }
            let mut roots = AllRoots {
                handles: &self.handles,
                launches,
                parked,
            };
            let roots = SendRoots(&mut roots);
            let shapes_ref = &shapes;
            // On a thread of its own: a runtime worker that waited in
            // `install` would run other jobs of its pool meanwhile — a
            // slot of this launch, which would wait for this safepoint.
            let st = std::thread::scope(|sc| {
                sc.spawn(move || {
                    pool.install(move || {
                        let whole = roots;
                        let roots = whole.0;
                        // SAFETY: every worker is parked at this safepoint
                        // (the caller's `Control` brought them there) and
                        // host calls are running workers too, so nothing
                        // else touches the heap; every launch in flight is
                        // registered and its TLABs were retired just
                        // above; every reference held outside the heap is
                        // a root shown by `roots` (the module docs list
                        // them).
                        unsafe { heap.collect(shapes_ref, roots) }
                    })
                })
                .join()
            })
            .unwrap_or_else(|_| {
                Err(offload_heap::HeapError::Corrupt {
                    at: 0,
                    what: "the collector panicked".into(),
                })
            });
            for a in launches.iter().filter_map(|l| l.alloc) {
                a.reset_after_collection();
            }
            let st = st.map_err(|e| OffloadError::Setup(format!("collection failed: {e}")))?;
            if self.policy.verify {
                heap.verify(|g| shapes.get(g as usize).cloned())
                    .map_err(|e| {
                        OffloadError::Setup(format!("the heap is corrupt after a collection: {e}"))
                    })?;
            }
            Ok(st)
        })
    }
}

/// What an interpreter of a launch calls when eden is exhausted.
pub(crate) struct OnExhausted<'a> {
    pub(crate) gc: &'a Collector,
    pub(crate) heap: &'a Heap,
    pub(crate) control: &'a Control,
}

impl offload_host_interp::Collector for OnExhausted<'_> {
    fn collect(&self, own: &mut dyn Roots) -> bool {
        if !self.gc.worth_collecting(self.heap) {
            return false;
        }
        match self.gc.collect_from_worker(self.heap, self.control, own) {
            // Another worker's safepoint: it may have collected.
            None => true,
            Some(Ok(_)) => true,
            // A collection that failed leaves the heap as it was: the
            // allocation fails with `OutOfMemory`, and the error text
            // says why in the next explicit collection.
            Some(Err(_)) => false,
        }
    }

    fn no_room(
        &self,
        own: &mut dyn Roots,
        alloc: &mut dyn FnMut() -> Option<u32>,
    ) -> offload_host_interp::AfterWait {
        use offload_host_interp::{AfterWait, Room};
        use std::sync::atomic::Ordering::Relaxed;
        if self.gc.full.load(Relaxed) {
            return AfterWait::OutOfMemory;
        }
        // A waiter's collections take at most a fifth of the time: the
        // next comes no sooner than four times the last one's pause.
        let pause = self
            .gc
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(Duration::ZERO, GcStats::pause);
        let not_before = std::time::Instant::now() + pause * 4;
        let room = self.control.wait_for_room(own, not_before);
        if room == Room::Parked {
            return AfterWait::Retry;
        }
        // Collect, and allocate in the same safepoint: no other worker can
        // take the room first.
        let made = self.gc.collect_then(self.heap, self.control, own, alloc);
        match made {
            Some(Ok((_, Some(at)))) => AfterWait::Allocated(at),
            // Alone, nothing else can free anything: what fills the heap
            // lives on, and until the next launch starts, allocations that
            // find no room fail at once.
            Some(Ok((_, None))) if room == Room::Alone => {
                self.gc.full.store(true, Relaxed);
                AfterWait::OutOfMemory
            }
            // A failed collection leaves the heap as it was (see above).
            Some(Err(_)) if room == Room::Alone => AfterWait::OutOfMemory,
            // Another worker's safepoint came first, or others may still
            // free something: wait again.
            _ => AfterWait::Retry,
        }
    }
}
