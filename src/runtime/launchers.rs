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
//! A waiting thread holds the receiving end of a channel whose sender is
//! in the idle list, and nothing of the runtime: when the runtime's last
//! handle goes, the list goes with it, each channel closes, and the
//! threads end.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, Weak};

/// The most threads kept waiting for a launch.
const IDLE: usize = 8;

/// What a launch thread runs.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

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

/// A launch thread: runs `job`, then waits in the idle list for the next
/// while the runtime lives and the list has room.
fn serve(first: Job, idle: &Weak<Mutex<Vec<Sender<Job>>>>) {
    let mut job = first;
    loop {
        job();
        let (tx, rx) = channel();
        {
            let Some(list) = idle.upgrade() else {
                return;
            };
            let mut l = list
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if l.len() >= IDLE {
                return;
            }
            l.push(tx);
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
        let t = tx.clone();
        l.run(Box::new(move || {
            t.send(std::thread::current().id()).unwrap()
        }))
        .unwrap();
        let first = rx.recv().unwrap();
        // Wait until the thread waits in the list.
        while l.idle.lock().unwrap().is_empty() {
            std::thread::yield_now();
        }
        let t = tx.clone();
        l.run(Box::new(move || {
            t.send(std::thread::current().id()).unwrap()
        }))
        .unwrap();
        assert_eq!(rx.recv().unwrap(), first, "the same thread");
        while l.idle.lock().unwrap().is_empty() {
            std::thread::yield_now();
        }
        let weak = Arc::downgrade(&l.idle);
        drop(l);
        assert!(weak.upgrade().is_none());
    }
}
