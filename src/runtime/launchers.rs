//! The threads that run launches in flight ([`super::Runtime::launch`]),
//! kept between launches.
//!
//! A launch in flight needs a thread of its own (its caller goes on). A
//! fresh thread per launch cost about 0.15 ms more than a launch from a
//! thread that had launched before (two half-size saxpys over 5·10^6
//! elements, launched and waited for in turn: 2.69 against 2.43 ms on a
//! 2-core VM; from one kept thread 2.50 ms): the spawn, and a first
//! dispatch to the launch team from a thread it has not seen. So the
//! runtime keeps the threads: one that ends a launch waits for the next
//! (at most [`IDLE`] wait; more end), and a launch takes a waiting one or
//! makes one.
//!
//! A thread is back in the idle list before its launch's handle hears of
//! the end: a job returns what tells the handle ([`Tell`]), and the thread
//! lists itself first. Told first, a caller that launches again at once —
//! a loop of `launch(..).wait()` — found the list empty and made a thread
//! each time, and its launches alternated between threads: two half-size
//! saxpys over 5·10^6 elements launched and waited for in turn took
//! 1.37–1.46x one full-size launch in one process of two, 1.01–1.04x with
//! the thread listed first.
//!
//! A waiting thread holds the receiving end of a channel whose sender is
//! in the idle list, and nothing of the runtime: when the runtime's last
//! handle goes, the list goes with it, each channel closes, and the
//! threads end.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, Weak};

/// The most threads kept waiting for a launch.
const IDLE: usize = 8;

/// What a launch thread runs: the launch, which returns how to tell its
/// handle of the end.
pub(crate) type Job = Box<dyn FnOnce() -> Tell + Send>;

/// Tells a launch's handle of the launch's end: run by the launch's thread
/// once it is back in the idle list (or is ending).
pub(crate) type Tell = Box<dyn FnOnce() + Send>;

/// The runtime's launch threads.
#[derive(Debug, Default)]
pub(crate) struct Launchers {
    idle: Arc<Mutex<Vec<Sender<Job>>>>,
}

impl Launchers {
    /// Run `job` on a waiting launch thread, or a new one.
    pub(crate) fn run(&self, job: Job) -> std::io::Result<()> {
        let mut job = job;
        loop {
            let waiting = self
                .idle
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .pop();
            match waiting {
                // A thread that ended meanwhile gives the job back.
                Some(tx) => match tx.send(job) {
                    Ok(()) => return Ok(()),
                    Err(back) => job = back.0,
                },
                None => break,
            }
        }
        let idle = Arc::downgrade(&self.idle);
        std::thread::Builder::new()
            .name("offload-launch".into())
            .spawn(move || serve(job, &idle))
            .map(drop)
    }
}

/// A launch thread: runs `job`, lists itself in the idle list while the
/// runtime lives and the list has room, tells the job's handle, and waits
/// for the next job if it listed itself.
fn serve(first: Job, idle: &Weak<Mutex<Vec<Sender<Job>>>>) {
    let mut job = first;
    loop {
        let tell = job();
        let (tx, rx) = channel();
        let listed = idle.upgrade().is_some_and(|list| {
            let mut l = list
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let room = l.len() < IDLE;
            if room {
                l.push(tx);
            }
            room
        });
        tell();
        if !listed {
            return;
        }
        match rx.recv() {
            Ok(next) => job = next,
            // The runtime is gone.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::sync_channel;

    #[test]
    fn a_thread_that_ended_a_job_runs_the_next() {
        let l = Launchers::default();
        let (tx, rx) = sync_channel(4);
        let job = |t: std::sync::mpsc::SyncSender<_>| -> Job {
            Box::new(move || Box::new(move || t.send(std::thread::current().id()).unwrap()))
        };
        l.run(job(tx.clone())).unwrap();
        let first = rx.recv().unwrap();
        // Told of the end, the thread is already in the list: the next job
        // goes to it, with no wait.
        assert_eq!(l.idle.lock().unwrap().len(), 1);
        l.run(job(tx.clone())).unwrap();
        assert_eq!(rx.recv().unwrap(), first, "the same thread");
        assert_eq!(l.idle.lock().unwrap().len(), 1);
        let weak = Arc::downgrade(&l.idle);
        drop(l);
        assert!(weak.upgrade().is_none());
    }
}
