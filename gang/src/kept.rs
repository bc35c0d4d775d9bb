//! Threads kept between jobs, for work that needs a thread of its own: a
//! launch in flight (its caller goes on), or the source front end (its
//! recursion needs a stack bigger than a caller's).
//!
//! Making a thread per job costs what the job may not: a spawn, a first
//! touch of its stack and of a fresh malloc arena, and for the launch team
//! a first dispatch from a thread it has not seen (a thread with a 256
//! MiB stack took 88 µs to start and join on a 2-core VM, against the 40
//! µs the front end then spent compiling saxpy). So a thread that ends a
//! job waits for the next, and a job takes a waiting thread or makes one.
//!
//! A thread is back in the idle list before the job's caller hears of the
//! end: a job returns what tells the caller ([`Tell`]), and the thread
//! lists itself first. Told first, a caller that starts the next job at
//! once — a loop of `launch(..).wait()` — found the list empty and made a
//! thread each time, and its jobs alternated between threads (two
//! half-size saxpys launched and waited for in turn took 1.37–1.46x one
//! full-size launch in one process of two, 1.01–1.04x with the thread
//! listed first).
//!
//! A waiting thread holds the receiving end of a channel whose sender is
//! in the idle list, and nothing else of its owner: when the [`Kept`]
//! goes, the list goes with it, each channel closes, and the threads end.
//! A thread also ends after waiting [`Kept::linger`] for a job, if set.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

/// What a kept thread runs: the work, which returns how to tell its caller
/// of the end.
pub type Job = Box<dyn FnOnce() -> Tell + Send>;

/// Tells a job's caller of the job's end: run by the job's thread once it
/// is back in the idle list (or is ending).
pub type Tell = Box<dyn FnOnce() + Send>;

/// The idle threads: each one's number and the sender of its channel.
type Idle = Mutex<Vec<(u64, Sender<Job>)>>;

/// Threads kept between jobs.
#[derive(Debug)]
pub struct Kept {
    idle: Arc<Idle>,
    name: &'static str,
    stack: Option<usize>,
    keep: usize,
    linger: Option<Duration>,
    spin: Duration,
    /// Numbers the threads (to find one's entry in the idle list).
    made: std::sync::atomic::AtomicU64,
}

impl Kept {
    /// Threads named `name`, with the platform's stack, at most `keep` of
    /// them waiting at once (a thread that ends a job when `keep` already
    /// wait ends), each waiting until the `Kept` goes.
    pub fn new(name: &'static str, keep: usize) -> Kept {
        Kept {
            idle: Arc::default(),
            name,
            stack: None,
            keep,
            linger: None,
            spin: Duration::ZERO,
            made: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Threads with stacks of `bytes` (reserved; only what a job touches is
    /// used).
    pub fn stack(mut self, bytes: usize) -> Kept {
        self.stack = Some(bytes);
        self
    }

    /// A thread that waited `d` for a job ends.
    pub fn linger(mut self, d: Duration) -> Kept {
        self.linger = Some(d);
        self
    }

    /// A thread that ended a job looks for the next for `d` before it
    /// sleeps (a job that comes meanwhile starts without a wake-up).
    pub fn spin(mut self, d: Duration) -> Kept {
        self.spin = d;
        self
    }

    /// Threads waiting for a job now.
    pub fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// Run `job` on a waiting thread, or a new one (the error: the system
    /// gave no thread).
    pub fn run(&self, job: Job) -> std::io::Result<()> {
        let mut job = job;
        loop {
            let waiting = lock(&self.idle).pop();
            match waiting {
                // A thread that ended meanwhile gives the job back.
                Some((_, tx)) => match tx.send(job) {
                    Ok(()) => return Ok(()),
                    Err(back) => job = back.0,
                },
                None => break,
            }
        }
        let number = self.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let serve = Serve {
            idle: Arc::downgrade(&self.idle),
            number,
            keep: self.keep,
            linger: self.linger,
            spin: self.spin,
        };
        let mut b = std::thread::Builder::new().name(self.name.into());
        if let Some(bytes) = self.stack {
            b = b.stack_size(bytes);
        }
        b.spawn(move || serve.run(job)).map(drop)
    }
}

/// What a kept thread knows of its owner.
struct Serve {
    idle: Weak<Idle>,
    number: u64,
    keep: usize,
    linger: Option<Duration>,
    spin: Duration,
}

impl Serve {
    /// Runs `first`, then each job the thread waits for, while the owner
    /// lives and the list has room.
    fn run(self, first: Job) {
        let mut job = first;
        loop {
            let tell = job();
            let (tx, rx) = channel();
            let listed = self.idle.upgrade().is_some_and(|list| {
                let mut l = lock(&list);
                let room = l.len() < self.keep;
                if room {
                    l.push((self.number, tx));
                }
                room
            });
            tell();
            if !listed {
                return;
            }
            match self.next(&rx) {
                Some(next) => job = next,
                None => return,
            }
        }
    }

    /// The next job, or `None` when the owner is gone or the thread waited
    /// its `linger` (and took itself off the list).
    fn next(&self, rx: &Receiver<Job>) -> Option<Job> {
        match try_recv_for(rx, self.spin) {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        let Some(linger) = self.linger else {
            return rx.recv().ok();
        };
        match rx.recv_timeout(linger) {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => {
                let list = self.idle.upgrade()?;
                let mut l = lock(&list);
                match l.iter().position(|(n, _)| *n == self.number) {
                    Some(at) => {
                        l.remove(at);
                        None
                    }
                    // A caller took this thread off the list: its job is on
                    // the way (it sends right after taking).
                    None => {
                        drop(l);
                        rx.recv().ok()
                    }
                }
            }
        }
    }
}

/// What `rx` receives within `spin`, looking for it without sleeping (a
/// hand-off that comes meanwhile costs no wake-up); `Empty` when nothing
/// came in that time.
pub fn try_recv_for<T>(rx: &Receiver<T>, spin: Duration) -> Result<T, TryRecvError> {
    let t0 = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Err(TryRecvError::Empty) if t0.elapsed() < spin => std::hint::spin_loop(),
            r => return r,
        }
    }
}

/// A lock that shrugs off poisoning: nothing here panics while holding one.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{SyncSender, sync_channel};
    use std::thread::ThreadId;

    fn job(t: SyncSender<ThreadId>) -> Job {
        Box::new(move || Box::new(move || t.send(std::thread::current().id()).unwrap()))
    }

    #[test]
    fn a_thread_that_ended_a_job_runs_the_next() {
        let k = Kept::new("kept-test", 8);
        let (tx, rx) = sync_channel(4);
        k.run(job(tx.clone())).unwrap();
        let first = rx.recv().unwrap();
        // Told of the end, the thread is already in the list: the next job
        // goes to it.
        assert_eq!(k.idle(), 1);
        k.run(job(tx.clone())).unwrap();
        assert_eq!(rx.recv().unwrap(), first, "the same thread");
        assert_eq!(k.idle(), 1);
        let weak = Arc::downgrade(&k.idle);
        drop(k);
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn at_most_keep_threads_wait() {
        let k = Kept::new("kept-test", 1);
        let (tx, rx) = sync_channel(4);
        // Two jobs at once: two threads; one stays.
        let gate = Arc::new(std::sync::Barrier::new(3));
        for _ in 0..2 {
            let (t, g) = (tx.clone(), Arc::clone(&gate));
            k.run(Box::new(move || {
                g.wait();
                Box::new(move || t.send(std::thread::current().id()).unwrap())
            }))
            .unwrap();
        }
        gate.wait();
        let (a, b) = (rx.recv().unwrap(), rx.recv().unwrap());
        assert_ne!(a, b);
        assert_eq!(k.idle(), 1);
    }

    #[test]
    fn a_lingering_thread_ends_and_leaves_the_list() {
        let k = Kept::new("kept-test", 4).linger(Duration::from_millis(20));
        let (tx, rx) = sync_channel(4);
        k.run(job(tx.clone())).unwrap();
        let first = rx.recv().unwrap();
        assert_eq!(k.idle(), 1);
        let t0 = std::time::Instant::now();
        while k.idle() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "still listed");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The next job gets a new thread.
        k.run(job(tx.clone())).unwrap();
        assert_ne!(rx.recv().unwrap(), first);
    }

    #[test]
    fn a_thread_with_a_big_stack_recurses_deep() {
        fn depth(n: u64) -> u64 {
            let pad = std::hint::black_box([n; 64]);
            if n == 0 {
                0
            } else {
                1 + depth(n - 1) + pad[3] - n
            }
        }
        let k = Kept::new("kept-test", 1).stack(64 << 20);
        let (tx, rx) = sync_channel(1);
        k.run(Box::new(move || {
            // About 30 MiB of frames: far past a default 8 MiB stack.
            let d = depth(50_000);
            Box::new(move || tx.send(d).unwrap())
        }))
        .unwrap();
        assert_eq!(rx.recv().unwrap(), 50_000);
    }
}
