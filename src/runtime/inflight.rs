//! Launches in flight, and the rule that orders them: launches that do not
//! block ([`Runtime::launch`], [`LaunchHandle`]) run at once unless one may
//! touch what another does.
//!
//! # The rule
//!
//! Every launch that does not block registers its *footprint* when it is
//! made: the arrays of numbers it captures (by handle identity), and
//! whether it captures any reference to an object or an array of
//! references. A launch — of either kind — waits, before it starts, for
//! every launch registered before it whose footprint meets its own:
//!
//! - they capture the same array of numbers, or
//! - either captures an object or an array of references (objects are
//!   reached through references, and their fields may hold any array:
//!   such a launch is ordered against every other).
//!
//! So a launch that reads what an earlier one writes sees its writes, and
//! nothing is left to the caller to get right: the order is the order of
//! the calls. The host side follows the same rule: reading or writing an
//! array of numbers (`Runtime::read`, `Runtime::write`) waits for the
//! registered launches that capture it or capture references; reading or
//! writing objects and arrays of references waits for those that capture
//! references. Launches with disjoint arrays of numbers overlap.
//!
//! A blocking launch ([`crate::par_offload`]) is not registered: its
//! thread waits for it, so everything that thread does after is ordered
//! after it, and launches that other threads block on are ordered as
//! those threads order them, as before (a host thread may still set a
//! flag that a running kernel polls).
//!
//! Collections and safepoints see every launch in flight already: each
//! registers its captures as roots and counts as a running worker.

use super::*;
use std::sync::Condvar;

/// What a launch may touch (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Footprint {
    /// The arrays of numbers it captures, by handle identity.
    arrays: Vec<usize>,
    /// Whether it captures an object or an array of references.
    refs: bool,
}

impl Footprint {
    /// The footprint of `closure`'s captures.
    pub(crate) fn of(closure: &Closure) -> Footprint {
        let f = closure.module.prog.verified().func(closure.kernel);
        // The kernel's parameters after the workitem index are its captures.
        let params = f.params().get(1..).unwrap_or(&[]);
        let mut fp = Footprint::default();
        for (i, r) in &closure.refs {
            match params.get(*i).map(|p| p.ty) {
                Some(Type::Array(Elem::I32 | Elem::I64 | Elem::F32 | Elem::F64, 1)) => {
                    fp.arrays.push(r.identity());
                }
                _ => fp.refs = true,
            }
        }
        fp
    }

    fn meets(&self, other: &Footprint) -> bool {
        self.refs || other.refs || self.arrays.iter().any(|a| other.arrays.contains(a))
    }
}

/// The launches in flight on a runtime.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    state: Mutex<State>,
    ended: Condvar,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    running: Vec<(u64, Footprint)>,
}

impl InFlight {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The registered launches in flight that a launch of footprint `fp`
    /// must wait for ([`InFlight::wait_for`]).
    pub(crate) fn before(&self, fp: &Footprint) -> Vec<u64> {
        Self::meeting(&self.state(), fp)
    }

    fn meeting(s: &State, fp: &Footprint) -> Vec<u64> {
        s.running
            .iter()
            .filter(|(_, other)| fp.meets(other))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Register a launch of footprint `fp`: its ticket, and the earlier
    /// launches in flight it must wait for ([`InFlight::wait_for`]).
    pub(crate) fn begin(&self, fp: Footprint) -> (u64, Vec<u64>) {
        let mut s = self.state();
        let before = Self::meeting(&s, &fp);
        s.next += 1;
        let id = s.next;
        s.running.push((id, fp));
        (id, before)
    }

    /// Block until none of the launches `ids` is in flight.
    pub(crate) fn wait_for(&self, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        let mut s = self.state();
        while s.running.iter().any(|(id, _)| ids.contains(id)) {
            s = self
                .ended
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// The launch with ticket `id` has ended.
    pub(crate) fn end(&self, id: u64) {
        self.state().running.retain(|(i, _)| *i != id);
        self.ended.notify_all();
    }

    /// Block until no launch in flight may touch the array of numbers
    /// whose handle identity is `array` (`None`: objects and arrays of
    /// references).
    pub(crate) fn settle(&self, array: Option<usize>) {
        let touches = |fp: &Footprint| fp.refs || array.is_some_and(|a| fp.arrays.contains(&a));
        let mut s = self.state();
        while s.running.iter().any(|(_, fp)| touches(fp)) {
            s = self
                .ended
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// A registered launch: ends its registration however the launch ends.
pub(crate) struct Registered<'a> {
    pub(crate) inflight: &'a InFlight,
    pub(crate) id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.inflight.end(self.id);
    }
}

/// A launch that does not block ([`Runtime::launch`]): it runs on a thread
/// of its own (kept by the runtime between launches, `offload_gang::kept`),
/// ordered after the earlier launches it may touch (module docs).
/// [`LaunchHandle::wait`] gives its report; dropping the handle waits for
/// the launch too, so no launch outlives the arrays it uses.
#[derive(Debug)]
#[must_use = "dropping the handle waits for the launch"]
pub struct LaunchHandle {
    /// Where the launch's outcome comes (`None` once taken).
    outcome: Option<std::sync::mpsc::Receiver<Result<LaunchReport, OffloadError>>>,
    /// Set once the launch has ended, before its outcome is sent.
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl LaunchHandle {
    /// Wait for the launch: its report, or its error.
    pub fn wait(mut self) -> Result<LaunchReport, OffloadError> {
        self.join()
    }

    /// Whether the launch has ended (its [`LaunchHandle::wait`] returns at
    /// once).
    pub fn is_finished(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    fn join(&mut self) -> Result<LaunchReport, OffloadError> {
        match self.outcome.take() {
            // The launch's thread sends its outcome, a panic's included
            // (`launch_in_flight`); a closed channel is a thread that died
            // without one.
            Some(rx) => rx.recv().unwrap_or_else(|_| {
                Err(OffloadError::Setup(
                    "the launch's thread ended without an outcome".into(),
                ))
            }),
            None => Err(OffloadError::Setup(
                "the launch was already waited for".into(),
            )),
        }
    }
}

/// A reduction in flight ([`Runtime::launch_reduce`]): dropping it waits
/// for it, as [`LaunchHandle`] does.
#[derive(Debug)]
#[must_use = "a reduction in flight is waited for when its handle drops; `wait` gives its value"]
pub struct ReduceHandle<T> {
    launch: LaunchHandle,
    ty: std::marker::PhantomData<fn() -> T>,
}

impl<T: Reducible> ReduceHandle<T> {
    /// Wait for the reduction: its value and report, or its error.
    pub fn wait(self) -> Result<Reduced<T>, OffloadError> {
        reduce::reduced(self.launch.wait()?)
    }

    /// Whether the launch has ended.
    pub fn is_finished(&self) -> bool {
        self.launch.is_finished()
    }
}

impl Drop for LaunchHandle {
    fn drop(&mut self) {
        if self.outcome.is_some() {
            let _ = self.join();
        }
    }
}

impl Runtime {
    /// Launch `closure` over `range` without blocking: the launch runs on a
    /// thread of its own while the caller goes on, and the handle's
    /// [`LaunchHandle::wait`] gives its report (dropping the handle waits).
    /// Launches overlap unless one may touch what an earlier one does;
    /// then the later waits (the rule is in `runtime::inflight`'s docs:
    /// by the arrays they capture, in the order of the calls, and every
    /// launch that captures objects in turn). The runtime's deadline
    /// applies; safepoints, collections and interrupts see every launch in
    /// flight.
    ///
    /// ```
    /// use offload::{Runtime, kernel};
    ///
    /// let rt = Runtime::builder().workers(2).build()?;
    /// let a = rt.new_array::<f32>(1000)?;
    /// let b = rt.new_array::<f32>(1000)?;
    /// // Two launches in flight at once (they share no array)...
    /// let fill_a = rt.launch(0..1000, &kernel!(move |i| a[i] = 1.0)?)?;
    /// let fill_b = rt.launch(0..1000, &kernel!(move |i| b[i] = 2.0)?)?;
    /// // ... and one that reads `a`: it starts once `fill_a` has ended.
    /// let double = rt.launch(0..1000, &kernel!(move |i| a[i] = a[i] * 2.0)?)?;
    /// let host_work: f32 = (0..1000).map(|i| i as f32).sum(); // meanwhile
    /// for h in [fill_a, fill_b, double] {
    ///     h.wait()?;
    /// }
    /// assert_eq!(rt.read(&a)?[7] + rt.read(&b)?[7], 4.0);
    /// assert_eq!(host_work, 499_500.0);
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    pub fn launch(
        &self,
        range: impl Into<LaunchRange>,
        closure: &Closure,
    ) -> Result<LaunchHandle, OffloadError> {
        self.launch_in_flight(range.into(), closure, None)
    }

    /// [`Runtime::launch`] of a reducing kernel: [`Runtime::par_reduce`]
    /// without blocking. The handle's [`ReduceHandle::wait`] gives the
    /// combined value and the report; ordered against other launches as
    /// [`Runtime::launch`] orders them.
    ///
    /// ```
    /// use offload::{Combine, Runtime};
    ///
    /// let rt = Runtime::builder().workers(2).build()?;
    /// let m = rt.load_source("sq.ofk", "
    ///     #[kernel]
    ///     fn sq(i: i64, x: &[f64]) -> f64 { x[i] * x[i] }
    /// ")?;
    /// let x = rt.array(&[1.0f64, 2.0, 3.0])?;
    /// let sq = m.closure("sq", [(&x).into()])?;
    /// let h = rt.launch_reduce::<f64>(0..3, &sq, Combine::Sum)?;
    /// let host_work = 2.0 * 21.0; // meanwhile
    /// assert_eq!(h.wait()?.value + host_work, 56.0);
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    pub fn launch_reduce<T: Reducible>(
        &self,
        range: impl Into<LaunchRange>,
        closure: &Closure,
        combine: Combine,
    ) -> Result<ReduceHandle<T>, OffloadError> {
        reduce::check_type::<T>(closure)?;
        Ok(ReduceHandle {
            launch: self.launch_in_flight(range.into(), closure, Some(combine))?,
            ty: std::marker::PhantomData,
        })
    }

    /// A launch in flight of `closure` over `range`, combined with
    /// `reduce` for a reducing kernel.
    fn launch_in_flight(
        &self,
        range: LaunchRange,
        closure: &Closure,
        reduce: Option<Combine>,
    ) -> Result<LaunchHandle, OffloadError> {
        self.owns(closure)?;
        self.refuse_in_safepoint("a launch")?;
        // Registered here, in the order of the calls.
        let (id, before) = self.inner.inflight.begin(Footprint::of(closure));
        let (rt, closure) = (self.clone(), closure.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let done = Arc::clone(&ended);
        let job = move || {
            let launched = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let inflight = &rt.inner.inflight;
                let _registered = Registered { inflight, id };
                inflight.wait_for(&before);
                rt.launch_registered(range, &closure, reduce, rt.inner.env.settings.deadline)
            }));
            let outcome = launched.unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(OffloadError::Setup(format!(
                    "the launch's thread panicked: {what}"
                )))
            });
            // The runtime and the closure go before the handle hears of
            // the end (a last handle dropped after `wait` finds them gone).
            drop((rt, closure));
            // Told once the thread is back among the launch threads
            // (`offload_gang::kept`).
            Box::new(move || {
                done.store(true, std::sync::atomic::Ordering::Release);
                let _ = tx.send(outcome);
            }) as offload_gang::kept::Tell
        };
        match self.inner.launchers.run(Box::new(job)) {
            Ok(()) => Ok(LaunchHandle {
                outcome: Some(rx),
                ended,
            }),
            Err(e) => {
                self.inner.inflight.end(id);
                Err(OffloadError::Setup(format!(
                    "no thread for the launch: {e}"
                )))
            }
        }
    }
}
