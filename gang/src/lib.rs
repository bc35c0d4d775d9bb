//! The CPU device's launch team: `workers` slots run by the calling thread
//! (slot 0) and `workers - 1` helper threads, dispatched and joined in
//! microseconds.
//!
//! (And [`kept`]: threads kept between jobs, for launches in flight and the
//! source front end.)
//!
//! A launch on a thread pool pays to hand the work over: the caller
//! injects a job, a sleeping worker wakes (a futex wake, then the
//! scheduler), it spawns the slots, a second worker wakes to steal one,
//! and at the end the caller, asleep on a latch, is woken in turn. On a
//! 2-core machine that cost 15–40 µs per launch, with the second slot
//! starting 20–35 µs after the first — a third of saxpy's whole launch
//! over 2^20 elements. Here the caller runs slot 0 itself, helpers that
//! finished a job spin for a while ([`SPIN`]) before they park, so that
//! back-to-back launches find them awake, and the caller spins for the
//! others at the end before it parks (OpenMP runtimes do the same).
//!
//! One dispatch at a time holds the team: [`Gang::run`] answers [`Busy`]
//! while another thread's dispatch is in flight, so that a launch never
//! waits on another. A draining one may then run beside it
//! ([`Gang::run_beside`], `beside.rs`): its slot 0 on its own thread, its
//! other slots on helpers as they come free; one more at once is [`Busy`]
//! too (the caller then uses a thread pool).
//!
//! The protocol (model-checked under loom, `gang/tests/loom.rs`): the caller
//! stores the job, sets `pending` to the helpers' count and bumps
//! `generation` (release); a helper that sees a generation it has not run
//! (acquire) calls the job with its slot, then decrements `pending`
//! (release), and the last one unparks the caller, which returns once it
//! reads zero (acquire). The caller's next dispatch waits for that. A
//! helper claims its slot for the generation before it runs it; a
//! draining dispatch's caller, done with slot 0, claims the slots not yet
//! claimed and counts them off `pending` itself — so a skipped helper may
//! be several generations behind when it looks again. A claim raises the
//! slot's claimed generation and succeeds only if it was lower: a helper
//! runs only the newest dispatch, and only while it is in flight.

mod beside;
pub mod kept;
mod placement;
mod sync;

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::time::Duration;
use sync::{Arc, AtomicBool, AtomicU64, AtomicUsize, JoinHandle, Mutex, Ordering, thread};

/// How long a helper that finished a job, or a caller waiting for the
/// helpers, spins before it parks. Launches in a loop come back within
/// it (a launch's report and the caller's own work between launches take
/// microseconds); an idle runtime's helpers park after it, and cost
/// nothing.
pub const SPIN: Duration = Duration::from_micros(200);

/// What a dispatch runs: called once with each slot, `0..workers`.
pub type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// [`Gang::run`] found another thread's dispatch in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy;

impl std::fmt::Display for Busy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the launch team is running another launch")
    }
}

impl std::error::Error for Busy {}

/// The caller and its helpers.
pub struct Gang {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// Held by the thread whose dispatch is in flight.
    dispatching: Mutex<()>,
}

impl std::fmt::Debug for Gang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gang")
            .field("workers", &self.workers())
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// Bumped by each dispatch (and by the gang's drop, with `stop`).
    generation: AtomicU64,
    /// The current dispatch's job.
    job: Mutex<Option<job::JobRef>>,
    /// Helpers that have not yet returned from the current job (nor been
    /// skipped).
    pending: AtomicUsize,
    /// Per helper, the last generation its slot was claimed for: by the
    /// helper, to run it, or by a draining dispatch's caller, to skip it
    /// (whoever raises it to the generation first). Only ever raised
    /// (`fetch_max`): a helper held up after it read a generation must not
    /// claim it once a later one was claimed — a swap there let it run a
    /// newer dispatch's slot and take a second count off that dispatch's
    /// `pending`, and the caller waited forever (found by a profile run,
    /// modelled in `gang/tests/loom.rs`).
    claims: Vec<AtomicU64>,
    /// The thread whose dispatch is in flight: the last helper unparks it.
    waiter: Mutex<Option<thread::Thread>>,
    /// Helpers parked (or about to park): a dispatch that wakes one
    /// yields its core once, in case the wake-up put the helper there.
    parked: AtomicUsize,
    /// The core the dispatching thread was on (`usize::MAX`: unknown).
    caller_cpu: AtomicUsize,
    /// The first panic of a helper's slot in the current dispatch.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The dispatch beside the team's that is open now, if any.
    side: Mutex<Option<Arc<beside::Side>>>,
    /// Bumped when a dispatch beside opens: a helper that has not looked
    /// at the newest one wakes to take a slot of it.
    sides: AtomicU64,
    stop: AtomicBool,
    spin: Duration,
}

/// The job's address with its lifetime erased: the one unsafe part.
mod job {
    use super::Job;

    /// A job that [`super::Gang::run`] keeps alive while helpers call it.
    #[derive(Clone, Copy)]
    pub(crate) struct JobRef(*const Job<'static>);

    // SAFETY: the job is `Sync`, so calls from several threads at once are
    // sound; `JobRef::call`'s contract keeps the pointee alive.
    unsafe impl Send for JobRef {}

    impl JobRef {
        pub(crate) fn new(job: &Job<'_>) -> JobRef {
            let p: *const Job<'_> = job;
            // SAFETY: only the trait object's lifetime bound changes (the
            // two pointers have the same layout); `call`'s contract says
            // when it may be dereferenced.
            JobRef(unsafe { std::mem::transmute::<*const Job<'_>, *const Job<'static>>(p) })
        }

        /// Calls the job with `slot`.
        ///
        /// # Safety
        ///
        /// The job this was made from is alive: the dispatch that stored
        /// it has not returned. [`super::Gang::run`] returns only after
        /// every helper decremented `pending`, which each does after its
        /// last call; [`super::Gang::run_beside`] only after every helper
        /// that took a slot returned from it.
        pub(crate) unsafe fn call(self, slot: usize) {
            // SAFETY: the caller guarantees the pointee is alive; it is
            // `Sync`, so a shared call is sound.
            unsafe { (*self.0)(slot) }
        }
    }
}

impl Gang {
    /// A team of `workers` slots: `workers - 1` helper threads named by
    /// `name(slot)`, spinning for [`SPIN`] before they park.
    pub fn new(workers: usize, name: impl Fn(usize) -> String) -> std::io::Result<Gang> {
        Gang::with_spin(workers, name, SPIN)
    }

    /// [`Gang::new`] with another spin time (zero: park at once).
    pub fn with_spin(
        workers: usize,
        name: impl Fn(usize) -> String,
        spin: Duration,
    ) -> std::io::Result<Gang> {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
            pending: AtomicUsize::new(0),
            claims: (1..workers.max(1)).map(|_| AtomicU64::new(0)).collect(),
            waiter: Mutex::new(None),
            parked: AtomicUsize::new(0),
            caller_cpu: AtomicUsize::new(usize::MAX),
            panic: Mutex::new(None),
            side: Mutex::new(None),
            sides: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            spin,
        });
        let mut gang = Gang {
            shared,
            helpers: Vec::with_capacity(workers.saturating_sub(1)),
            dispatching: Mutex::new(()),
        };
        for slot in 1..workers.max(1) {
            let shared = Arc::clone(&gang.shared);
            // On an error, `gang`'s drop stops the helpers made so far.
            gang.helpers
                .push(spawn(name(slot), move || helper(&shared, slot))?);
        }
        Ok(gang)
    }

    /// Slots per dispatch: the caller and the helpers.
    pub fn workers(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Calls `job(slot)` once for each slot in `0..workers`, slot 0 on
    /// this thread and the others on the helpers, and returns when every
    /// call has. A panic in any slot is raised here, after all have
    /// returned. [`Busy`] (and nothing run) while another thread's
    /// dispatch is in flight.
    pub fn run(&self, job: &Job<'_>) -> Result<(), Busy> {
        self.dispatch(job, false)
    }

    /// [`Gang::run`] for a job whose slots drain shared work (each claims
    /// from a common queue until it is empty): once slot 0 has returned,
    /// a helper that has not yet started its slot does not start it — it
    /// would find nothing left, and waiting for it to wake (tens of
    /// microseconds after a park, longer on a busy machine) would cost a
    /// small launch more than its work. Every slot runs at most once;
    /// slot 0 always runs.
    pub fn run_draining(&self, job: &Job<'_>) -> Result<(), Busy> {
        self.dispatch(job, true)
    }

    /// For a draining job (as [`Gang::run_draining`]) while the team runs
    /// another thread's dispatch: calls `job(0)` on this thread at once and
    /// offers slots `1..workers` to the helpers, each taken by at most one
    /// as it comes free of the team's dispatch (or is idle); returns once
    /// slot 0 and every slot a helper took have returned. Slots no helper
    /// took by then are not run. A panic in any slot is raised here.
    /// [`Busy`] (and nothing run) while another dispatch beside is open,
    /// or when the team has no helpers.
    pub fn run_beside(&self, job: &Job<'_>) -> Result<(), Busy> {
        let shared = &*self.shared;
        if self.helpers.is_empty() {
            return Err(Busy);
        }
        let side = Arc::new(beside::Side::new(job::JobRef::new(job), self.workers()));
        {
            let mut open = lock(&shared.side);
            if open.is_some() {
                return Err(Busy);
            }
            *open = Some(Arc::clone(&side));
        }
        shared.sides.fetch_add(1, Ordering::Release);
        for h in &self.helpers {
            // A running helper keeps the token: its next park returns.
            h.thread().unpark();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        *lock(&shared.side) = None;
        raise(mine, side.close());
        Ok(())
    }

    fn dispatch(&self, job: &Job<'_>, draining: bool) -> Result<(), Busy> {
        let _dispatching = match self.dispatching.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return Err(Busy),
        };
        let shared = &*self.shared;
        let helpers = self.helpers.len();
        let mut generation = 0;
        if helpers > 0 {
            *lock(&shared.waiter) = Some(thread::current());
            let cpu = placement::current_cpu().unwrap_or(usize::MAX);
            shared.caller_cpu.store(cpu, Ordering::Relaxed);
            *lock(&shared.job) = Some(job::JobRef::new(job));
            shared.pending.store(helpers, Ordering::Relaxed);
            generation = shared.generation.fetch_add(1, Ordering::Release) + 1;
            for h in &self.helpers {
                // A running helper keeps the token for its next park,
                // which then returns at once: each park is in a loop.
                h.thread().unpark();
            }
            // A parked helper the wake-up put on this core runs now, and
            // moves away (`placement`). Helpers still spinning are on
            // cores of their own: no system call then. Only a hint to the
            // scheduler: loom's yield would force a switch to the helper
            // here and hide every schedule where the helper is slow.
            #[cfg(not(loom))]
            if shared.parked.load(Ordering::Relaxed) > 0 {
                thread::yield_now();
            }
        }
        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        if helpers > 0 {
            if draining {
                let skipped = shared
                    .claims
                    .iter()
                    .filter(|c| c.fetch_max(generation, Ordering::AcqRel) < generation)
                    .count();
                if skipped > 0 {
                    shared.pending.fetch_sub(skipped, Ordering::AcqRel);
                }
            }
            let done = || shared.pending.load(Ordering::Acquire) == 0;
            if !sync::spin_until(shared.spin, done) {
                while !done() {
                    thread::park();
                }
            }
            *lock(&shared.job) = None;
            // The last helper unparks the waiter under this lock: once it
            // is cleared here, no unpark from this dispatch can reach the
            // caller after `run` returns (std allows such a stray wake-up
            // of a later `park` of the caller's; loom's `join` does not).
            *lock(&shared.waiter) = None;
        }
        raise(mine, lock(&shared.panic).take());
        Ok(())
    }
}

impl Drop for Gang {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.generation.fetch_add(1, Ordering::Release);
        for h in self.helpers.drain(..) {
            h.thread().unpark();
            // A helper's panics are caught: its thread ends normally.
            let _ = h.join();
        }
    }
}

/// A helper: waits for each dispatch, runs its slot, reports; between
/// them, takes a slot of a dispatch beside the team's.
fn helper(shared: &Shared, slot: usize) {
    let (mut seen, mut looked) = (0, 0);
    loop {
        let fresh = || shared.generation.load(Ordering::Acquire) != seen;
        let wake = || fresh() || shared.sides.load(Ordering::Acquire) != looked;
        if !sync::spin_until(shared.spin, wake) {
            shared.parked.fetch_add(1, Ordering::Relaxed);
            while !wake() {
                thread::park();
            }
            shared.parked.fetch_sub(1, Ordering::Relaxed);
        }
        if !fresh() {
            // A dispatch beside opened (the team's own comes first).
            looked = shared.sides.load(Ordering::Acquire);
            let side = lock(&shared.side).clone();
            if let Some(side) = side {
                side.help();
            }
            continue;
        }
        seen = shared.generation.load(Ordering::Acquire);
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        if shared.claims[slot - 1].fetch_max(seen, Ordering::AcqRel) >= seen {
            // A draining dispatch's caller skipped this slot (and counted
            // it off `pending`): nothing to run, nothing to report. Or it
            // skipped a later one: this helper read `seen` and was held
            // up while its caller skipped it and went on to newer
            // dispatches; the newest is then `fresh` on the next turn.
            continue;
        }
        let job = *lock(&shared.job);
        let caller = shared.caller_cpu.load(Ordering::Relaxed);
        if caller != usize::MAX && placement::current_cpu() == Some(caller) {
            placement::leave_cpu(caller);
        }
        if let Some(job) = job {
            // SAFETY: the dispatch that stored `job` waits for this
            // helper's decrement of `pending` below before it returns.
            let ran = catch_unwind(AssertUnwindSafe(|| unsafe { job.call(slot) }));
            if let Err(p) = ran {
                lock(&shared.panic).get_or_insert(p);
            }
        }
        if shared.pending.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(t) = lock(&shared.waiter).as_ref()
        {
            t.unpark();
        }
    }
}

/// Raise the dispatcher's own panic (`mine`), else the first of a
/// helper's slots (`theirs`).
fn raise(mine: std::thread::Result<()>, theirs: Option<Box<dyn Any + Send>>) {
    if let Err(p) = mine {
        resume_unwind(p);
    }
    if let Some(p) = theirs {
        resume_unwind(p);
    }
}

/// A lock that shrugs off poisoning: nothing here panics while holding one.
fn lock<T>(m: &Mutex<T>) -> sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(not(loom))]
fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

#[cfg(loom)]
fn spawn(_name: String, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    Ok(loom::thread::spawn(f))
}
