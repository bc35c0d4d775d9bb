//! The control word and the safepoint rendezvous of one runtime, for
//! every device: [`Control`].
//!
//! Each launch of compiled code registers its own control word
//! ([`Control::register_waiting`], a [`LaunchWord`] while registered):
//! a safepoint request sets the word's stop (or wait) bits —
//! `offload_abi::control` defines them — so the launch's slots leave (or
//! wait) at their next poll, and the host threads running a launch
//! ([`Control::enter`]) park at theirs ([`Control::poll`]). The
//! interpreter polls at every taken back-edge, at every call and before
//! every workitem, and parks with its frames intact, so nothing is lost or
//! redone (compiled devices deoptimize at the poll instead, or wait in
//! place; the interpreter can simply wait, as HotSpot's interpreter does).
//! The requester's operation runs once every running worker is parked,
//! then all of them continue. Interrupts ([`Control::interrupt`],
//! [`Control::interrupt_launch`]) are safepoints after which the
//! interrupted launches stop.

use offload_heap::Roots;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) requested: bool,
    pub(crate) running: usize,
    parked: usize,
    /// Running workers waiting for room in the heap ([`crate::room`]).
    pub(crate) room_waiters: usize,
    /// Bumped when a worker leaves the running set or ends a workitem
    /// while some wait for room: what they wait for.
    pub(crate) progress: u64,
    /// Launches interrupted on their own ([`Control::interrupt_launch`])
    /// and not yet finished, by launch number.
    targeted: Vec<u32>,
    /// The control words of compiled launches in flight.
    words: Vec<LaunchWord>,
    /// The safepoint in progress moves objects (a collection): slots that
    /// hold references must stop, not wait.
    moving: bool,
    next_word: u64,
    /// The roots of the workers parked now with references of their own
    /// (an interpreter's frames), for the safepoint's operation.
    parked_roots: Vec<RootsPtr>,
}

/// The control word of a compiled launch in flight, as registered.
#[derive(Debug)]
pub struct LaunchWord {
    /// Its registration's number.
    id: u64,
    /// The word its slots poll.
    word: Arc<AtomicU32>,
    /// The bits that ask its slots to stop.
    stop_bits: u32,
    /// The bits that ask them to wait in place (0: they cannot; they
    /// stop).
    wait_bits: u32,
}

/// A parked worker's roots: a pointer to what it passed to
/// [`Control::poll_with`], valid while it is parked.
struct RootsPtr(*mut (dyn Roots + 'static));

// SAFETY: the pointer is only dereferenced by a safepoint's operation while
// its owner is parked (blocked in `park`, touching nothing it points to),
// and the owner removes it before it returns; see `Parked`.
unsafe impl Send for RootsPtr {}

impl std::fmt::Debug for RootsPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RootsPtr")
    }
}

/// The roots of every worker parked at a safepoint, for its operation
/// ([`Control::safepoint_with`]): visiting them visits each worker's.
pub struct Parked<'a> {
    ptrs: Vec<*mut (dyn Roots + 'static)>,
    /// The caller's own roots ([`Control::safepoint_from_worker`]).
    own: Option<&'a mut dyn Roots>,
}

impl std::fmt::Debug for Parked<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Parked({} roots)", self.len())
    }
}

impl Parked<'_> {
    /// How many workers' roots there are (the caller's included).
    pub fn len(&self) -> usize {
        self.ptrs.len() + usize::from(self.own.is_some())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Roots for Parked<'_> {
    fn visit(&mut self, f: &mut dyn FnMut(&mut u32)) {
        for &p in &self.ptrs {
            // SAFETY: `p` was registered by a worker that is parked until
            // this safepoint ends (the operation holding this `Parked`
            // runs before that), so it points to live roots nothing else
            // touches now; each worker registers its own, so no two
            // pointers alias.
            unsafe { (*p).visit(f) };
        }
        if let Some(own) = self.own.as_mut() {
            own.visit(f);
        }
    }
}

/// The control word and the rendezvous of one runtime's workers.
#[derive(Debug, Default)]
pub struct Control {
    pub(crate) requested: AtomicBool,
    state: Mutex<State>,
    pub(crate) cv: Condvar,
    safepoints: AtomicU64,
    /// Bumped by each [`Control::interrupt`]; a launch remembers the value
    /// it started under and stops once it changes.
    interrupts: AtomicU64,
    /// How many launches are interrupted on their own now (`State::targeted`
    /// is only looked at when this is not zero).
    targeted: AtomicU64,
    /// The next launch's number.
    launches: AtomicU64,
    /// `State::room_waiters`, read without the lock by workers that end a
    /// workitem ([`Control::workitem_ended`]).
    pub(crate) room_waiters: AtomicUsize,
}

/// Unregisters a control word when dropped.
#[derive(Debug)]
pub struct Registered<'a> {
    control: &'a Control,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.control.lock().words.retain(|w| w.id != self.id);
    }
}

/// Leaves the running set when dropped.
#[derive(Debug)]
pub struct Running<'a>(&'a Control);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut st = self.0.lock();
        st.running -= 1;
        // Only a safepoint's requester, and workers waiting for room in the
        // heap, wait for `running` to fall (while `requested` holds, or
        // `room_waiters` counts them; set under this lock): a wake-up for
        // nobody would be a system call per slot per launch.
        if st.room_waiters > 0 {
            st.progress += 1;
            self.0.cv.notify_all();
        } else if st.requested {
            self.0.cv.notify_all();
        }
    }
}

impl Control {
    /// No safepoint requested, no worker running.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A worker starts running workitems (waiting first if a safepoint is in
    /// progress). It leaves the running set when the guard drops.
    pub fn enter(&self) -> Running<'_> {
        let mut st = self.lock();
        while st.requested {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.running += 1;
        Running(self)
    }

    /// Run `f` out of the running set, for a running worker that must
    /// block on something other than a safepoint (another launch's end,
    /// say): safepoints go on without it meanwhile, and it returns once no
    /// safepoint is in progress, counted as running again. The worker must
    /// hold no reference a collection would have to update while `f` runs
    /// (what it holds in registered roots is updated as usual).
    pub fn outside<R>(&self, f: impl FnOnce() -> R) -> R {
        {
            let mut st = self.lock();
            st.running -= 1;
            if st.requested || st.room_waiters > 0 {
                st.progress += 1;
                self.cv.notify_all();
            }
        }
        let r = f();
        let mut st = self.lock();
        while st.requested {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.running += 1;
        r
    }

    /// Register the control word of a compiled launch: while it is
    /// registered, a safepoint request sets `stop_bits` in it (at once if one
    /// is already in progress), so its slots leave at their next poll, and
    /// clears them when the safepoint ends. The
    /// slots themselves count as running (see [`Control::enter`]) until they
    /// return.
    pub fn register(&self, word: &Arc<AtomicU32>, stop_bits: u32) -> Registered<'_> {
        self.register_waiting(word, stop_bits, 0)
    }

    /// [`Control::register`] for slots that can also wait in place at their
    /// poll: a safepoint that moves no object ([`Control::safepoint`], not
    /// a collection) sets `wait_bits` instead of `stop_bits` (0: never).
    /// The launch that registered the word parks for its slots once they
    /// all wait.
    pub fn register_waiting(
        &self,
        word: &Arc<AtomicU32>,
        stop_bits: u32,
        wait_bits: u32,
    ) -> Registered<'_> {
        let mut st = self.lock();
        let id = st.next_word;
        st.next_word += 1;
        if st.requested {
            word.fetch_or(
                Self::bits(st.moving, stop_bits, wait_bits),
                Ordering::SeqCst,
            );
        }
        st.words.push(LaunchWord {
            id,
            word: word.clone(),
            stop_bits,
            wait_bits,
        });
        Registered { control: self, id }
    }

    /// The bits a safepoint sets in a registered word.
    fn bits(moving: bool, stop: u32, wait: u32) -> u32 {
        if moving || wait == 0 { stop } else { wait }
    }

    /// The poll: one relaxed load unless a safepoint is requested. Returns
    /// whether the worker parked (only then can an interrupt have arrived
    /// that a running worker must notice: see [`Control::interrupt`]).
    #[inline]
    pub fn poll(&self) -> bool {
        if self.requested.load(Ordering::Relaxed) {
            self.park()
        } else {
            false
        }
    }

    /// The poll of a worker that holds references of its own (an
    /// interpreter's frames): parked, it shows them to the safepoint's
    /// operation (a collection reads and updates them). Otherwise as
    /// [`Control::poll`].
    #[inline]
    pub fn poll_with(&self, roots: &mut dyn Roots) -> bool {
        if self.requested.load(Ordering::Relaxed) {
            self.park_with(Some(roots))
        } else {
            false
        }
    }

    #[cold]
    fn park(&self) -> bool {
        self.park_with(None)
    }

    #[cold]
    pub(crate) fn park_with(&self, roots: Option<&mut dyn Roots>) -> bool {
        let mut st = self.lock();
        if !st.requested {
            return false;
        }
        let ptr = roots.map(|r| {
            let p: *mut (dyn Roots + '_) = r;
            // SAFETY: only the lifetime is erased; the pointer is removed
            // below, before this function returns and the borrow ends.
            let p: *mut (dyn Roots + 'static) = unsafe { std::mem::transmute(p) };
            st.parked_roots.push(RootsPtr(p));
            p
        });
        st.parked += 1;
        self.cv.notify_all();
        while st.requested {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st.parked -= 1;
        if let Some(p) = ptr {
            st.parked_roots.retain(|q| !std::ptr::addr_eq(q.0, p));
        }
        true
    }

    /// A launch's interrupt ticket, taken when it starts and passed to
    /// [`Control::interrupted_since`]: the interrupt epoch it started under
    /// (high half) and a number of its own (low half), by which
    /// [`Control::interrupt_launch`] names it. Release it with
    /// [`Control::finish_launch`].
    pub fn interrupt_epoch(&self) -> u64 {
        let epoch = self.interrupts.load(Ordering::SeqCst) as u32;
        let id = self.launches.fetch_add(1, Ordering::Relaxed) as u32;
        u64::from(epoch) << 32 | u64::from(id)
    }

    /// Whether the launch holding `ticket` must stop: [`Control::interrupt`]
    /// was called since it started, or [`Control::interrupt_launch`] named
    /// it. Two relaxed loads while no launch is interrupted on its own.
    #[inline]
    pub fn interrupted_since(&self, ticket: u64) -> bool {
        self.interrupts.load(Ordering::Relaxed) as u32 != (ticket >> 32) as u32
            || (self.targeted.load(Ordering::Relaxed) != 0
                && self.lock().targeted.contains(&(ticket as u32)))
    }

    /// Interrupt one launch (a deadline): it stops at its next poll, as
    /// after [`Control::interrupt`], while other launches only pass the
    /// safepoint that brings its workers to a poll. Returns the
    /// time-to-safepoint.
    pub fn interrupt_launch(&self, ticket: u64) -> Duration {
        {
            let mut st = self.lock();
            if !st.targeted.contains(&(ticket as u32)) {
                st.targeted.push(ticket as u32);
                self.targeted.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.safepoint(|| ()).1
    }

    /// The launch holding `ticket` is over: forget that it was interrupted
    /// on its own, if it was.
    pub fn finish_launch(&self, ticket: u64) {
        let mut st = self.lock();
        if let Some(i) = st.targeted.iter().position(|&t| t == ticket as u32) {
            st.targeted.swap_remove(i);
            self.targeted.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Interrupt every launch running now: bump the epoch, then bring them
    /// to a safepoint, so each running worker stops at its next poll and,
    /// when the safepoint ends, sees the new epoch and leaves its launch
    /// instead of going on. A launch that starts afterwards is not
    /// affected. Returns the time-to-safepoint.
    pub fn interrupt(&self) -> Duration {
        self.interrupts.fetch_add(1, Ordering::SeqCst);
        self.safepoint(|| ()).1
    }

    /// [`Control::interrupt`] from inside a safepoint's operation, where
    /// every worker is stopped already: only counts the interrupt, which
    /// each worker sees when the safepoint releases it.
    pub fn interrupt_stopped(&self) {
        self.interrupts.fetch_add(1, Ordering::SeqCst);
    }

    /// Stop every running worker at its next poll, run `op` while they are
    /// all stopped, then let them continue. Returns `op`'s result and the
    /// time from the request until every worker had stopped. `op` must not
    /// start work that needs these workers (a launch on the same runtime
    /// would wait for the safepoint to end).
    ///
    /// The operation must not move objects: compiled slots that can wait
    /// in place at their poll do (see [`Control::register_waiting`]).
    pub fn safepoint<R>(&self, op: impl FnOnce() -> R) -> (R, Duration) {
        self.run_safepoint(false, |_| op())
    }

    /// [`Control::safepoint`] whose operation also gets the roots of the
    /// parked workers that hold references (see [`Control::poll_with`]),
    /// and may move objects (a collection): every compiled slot stops.
    /// Called by a thread that is not a running worker.
    pub fn safepoint_with<R>(&self, op: impl FnOnce(&mut Parked<'_>) -> R) -> (R, Duration) {
        self.run_safepoint(true, op)
    }

    fn run_safepoint<R>(
        &self,
        moving: bool,
        op: impl FnOnce(&mut Parked<'_>) -> R,
    ) -> (R, Duration) {
        let t0 = Instant::now();
        let mut st = self.lock();
        // One safepoint at a time.
        while st.requested {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        self.stop_all(&mut st, moving);
        while st.parked < st.running {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let tts = t0.elapsed();
        let mut parked = Parked {
            ptrs: st.parked_roots.iter().map(|p| p.0).collect(),
            own: None,
        };
        drop(st);
        // The workers go on however the operation ends (a panic in it
        // must not leave them parked for good).
        let _resume = Resume(self);
        let r = op(&mut parked);
        drop(parked);
        (r, tts)
    }

    /// A safepoint asked for by a running worker (one that called
    /// [`Control::enter`]), which counts itself as stopped and shows its
    /// own roots to `op` with the parked workers'. If another safepoint is
    /// in progress, the worker parks in it instead (with its roots) and
    /// this returns `None`: the caller then sees what that safepoint did
    /// (a collection, say) and decides again.
    pub fn safepoint_from_worker<R>(
        &self,
        own: &mut dyn Roots,
        op: impl FnOnce(&mut Parked<'_>) -> R,
    ) -> Option<(R, Duration)> {
        let t0 = Instant::now();
        let mut st = self.lock();
        if st.requested {
            drop(st);
            self.park_with(Some(own));
            return None;
        }
        self.stop_all(&mut st, true);
        // This worker is one of the running ones, and stopped.
        st.parked += 1;
        while st.parked < st.running {
            st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        let tts = t0.elapsed();
        let mut parked = Parked {
            ptrs: st.parked_roots.iter().map(|p| p.0).collect(),
            own: Some(own),
        };
        drop(st);
        let _resume = Resume(self);
        let _unpark = Unpark(self);
        let r = op(&mut parked);
        drop(parked);
        Some((r, tts))
    }

    /// Request a safepoint (the caller holds the lock and none is in
    /// progress): set the flag and every registered control word's stop
    /// bits (its wait bits, for a safepoint that moves nothing).
    fn stop_all(&self, st: &mut State, moving: bool) {
        st.requested = true;
        st.moving = moving;
        self.requested.store(true, Ordering::SeqCst);
        // Workers waiting for room wait on the condition variable, not at a
        // poll: wake them to park.
        if st.room_waiters > 0 {
            self.cv.notify_all();
        }
        for w in &st.words {
            w.word.fetch_or(
                Self::bits(moving, w.stop_bits, w.wait_bits),
                Ordering::SeqCst,
            );
        }
    }

    /// End the safepoint in progress: clear the stop bits and the flag,
    /// count it, and wake every parked worker.
    fn resume_all(&self) {
        let mut st = self.lock();
        // Clear the stop bits first: a compiled slot that re-enters after
        // parking must not see this safepoint's request again.
        for w in &st.words {
            w.word
                .fetch_and(!(w.stop_bits | w.wait_bits), Ordering::SeqCst);
        }
        st.requested = false;
        self.requested.store(false, Ordering::SeqCst);
        self.safepoints.fetch_add(1, Ordering::Relaxed);
        self.cv.notify_all();
    }

    /// How many safepoints have completed (or ended in their operation's
    /// panic).
    pub fn count(&self) -> u64 {
        self.safepoints.load(Ordering::Relaxed)
    }
}

/// Ends the safepoint in progress when dropped (after its operation, or
/// while a panic in it unwinds).
struct Resume<'a>(&'a Control);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.resume_all();
    }
}

/// A worker that requested the safepoint counts itself parked until its
/// operation is over: dropped before [`Resume`].
struct Unpark<'a>(&'a Control);

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.0.lock().parked -= 1;
    }
}
