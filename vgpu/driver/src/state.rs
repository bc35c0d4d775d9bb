//! The driver's state: the virtual devices and their primary contexts,
//! allocations, loaded modules and functions, streams (each a worker thread
//! that runs its kernel launches in order) and events. Each module,
//! stream, event and device allocation belongs to the device whose context
//! was current when it was made; a kernel reaches its device's allocations
//! and every mapped host allocation (unified addressing: every address is
//! unique across devices, and a copy may name any device's memory).
//!
//! Only kernel launches are asynchronous. Every other stream operation
//! (copies, memsets, frees) first waits for the stream's earlier launches
//! and then runs on the calling thread, which keeps CUDA's in-order
//! semantics and lets a copy from pageable host memory read its source
//! before the call returns, as CUDA's staging does.

use crate::config::{Config, MAX_DEVICES};
use crate::err::{self, CUresult};
use offload_vgpu::mem::{Backing, Kind, Region};
use offload_vgpu::{Dims, Module, SimOptions};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// A module loaded into the context.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The device it was loaded on.
    pub(crate) dev: usize,
    pub(crate) module: Module,
    /// Its `.global`/`.const` data, if it has any.
    pub(crate) data: Option<Arc<Backing>>,
    /// The lines of its text that carry a `// @count NAME` note, with the
    /// name ([`crate::stats::notes`]).
    pub(crate) notes: HashMap<u32, String>,
}

/// One allocation.
#[derive(Clone, Debug)]
pub(crate) struct Alloc {
    pub(crate) backing: Arc<Backing>,
    pub(crate) kind: Kind,
    /// The device whose context made it (a mapped host allocation is
    /// reachable from every device).
    pub(crate) dev: usize,
}

/// Work a stream runs in order on its thread.
pub(crate) enum Work {
    /// A kernel launch.
    Launch(Box<Job>),
    /// A stream-ordered free (`cuMemFreeAsync`) of this device
    /// allocation (which a destroyed context may already have dropped, and
    /// whose address a later allocation may then hold).
    Free(Arc<Backing>),
    /// A stream-ordered copy of `n` bytes between two allocations (a
    /// copy to pinned host memory, `cuMemcpyDtoHAsync` into it, runs when
    /// the stream reaches it, as on a GPU): `(from, offset)` to
    /// `(to, offset)`.
    Copy {
        from: (Arc<Backing>, usize),
        to: (Arc<Backing>, usize),
        n: usize,
    },
}

/// A kernel launch waiting on a stream.
pub(crate) struct Job {
    /// The device it runs on.
    pub(crate) dev: usize,
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) func: u32,
    pub(crate) dims: Dims,
    pub(crate) params: Vec<u8>,
    pub(crate) regions: Vec<Region>,
    pub(crate) opts: SimOptions,
}

/// Progress of a stream: launches submitted and finished.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    pub(crate) submitted: u64,
    pub(crate) finished: u64,
}

/// A stream: a worker thread running its launches in order.
#[derive(Debug)]
pub(crate) struct Stream {
    /// The device whose work it runs.
    pub(crate) dev: usize,
    pub(crate) progress: Mutex<Progress>,
    pub(crate) done: Condvar,
    tx: Mutex<Option<mpsc::Sender<Work>>>,
    /// The noted counters (`crate::stats::noted`) of every launch this
    /// stream has finished: what `offload_vgpu_stream_counters` reads.
    pub(crate) noted: Mutex<BTreeMap<String, u64>>,
}

impl Stream {
    /// A stream of device `dev`, with its worker thread.
    pub(crate) fn new(dev: usize) -> Arc<Stream> {
        let (tx, rx) = mpsc::channel::<Work>();
        let s = Arc::new(Stream {
            dev,
            progress: Mutex::new(Progress::default()),
            done: Condvar::new(),
            tx: Mutex::new(Some(tx)),
            noted: Mutex::new(BTreeMap::new()),
        });
        let me = Arc::downgrade(&s);
        std::thread::Builder::new()
            .name(format!("vgpu{dev}-stream"))
            .spawn(move || {
                for work in rx {
                    match work {
                        Work::Launch(job) => {
                            let noted = run_job(*job);
                            if let Some(s) = me.upgrade() {
                                crate::stats::add_into(&mut lock(&s.noted), &noted);
                            }
                        }
                        Work::Free(b) => crate::memory::free_exact(&mut state(), &b),
                        Work::Copy { from, to, n } => {
                            let mut tmp = vec![0u8; n];
                            from.0.read(from.1, &mut tmp);
                            to.0.write(to.1, &tmp);
                        }
                    }
                    let Some(s) = me.upgrade() else { return };
                    lock(&s.progress).finished += 1;
                    s.done.notify_all();
                }
            })
            .expect("a stream thread");
        s
    }

    /// Queues work; returns its sequence number.
    pub(crate) fn submit(&self, job: Work) -> u64 {
        let mut p = lock(&self.progress);
        p.submitted += 1;
        let n = p.submitted;
        if let Some(tx) = lock(&self.tx).as_ref() {
            // The worker lives as long as the sender; a failed send means
            // it died, and `wait_for` would hang: count the job as done.
            if tx.send(job).is_err() {
                p.finished += 1;
            }
        }
        n
    }

    /// Waits until launch `seq` (and every earlier one) has finished.
    pub(crate) fn wait_for(&self, seq: u64) {
        let mut p = lock(&self.progress);
        while p.finished < seq {
            p = self.done.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits for every launch submitted so far.
    pub(crate) fn drain(&self) {
        let seq = lock(&self.progress).submitted;
        self.wait_for(seq);
    }

    /// Whether launch `seq` has finished.
    pub(crate) fn reached(&self, seq: u64) -> bool {
        lock(&self.progress).finished >= seq
    }

    /// Stops the worker once its queue is empty.
    pub(crate) fn close(&self) {
        lock(&self.tx).take();
    }
}

/// An event: a point in a stream.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    /// The device whose context made it.
    pub(crate) dev: usize,
    pub(crate) at: Option<(Arc<Stream>, u64)>,
}

/// Everything behind the handles.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) initialized: bool,
    next: usize,
    /// Per device, the primary context's handle and reference count.
    pub(crate) ctx: [Option<(usize, u32)>; MAX_DEVICES],
    /// Allocations by address.
    pub(crate) mem: BTreeMap<u64, Alloc>,
    /// Per device, the bytes of its device allocations.
    pub(crate) device_bytes: [u64; MAX_DEVICES],
    pub(crate) modules: HashMap<usize, Arc<Loaded>>,
    pub(crate) funcs: HashMap<usize, (Arc<Loaded>, u32)>,
    pub(crate) streams: HashMap<usize, Arc<Stream>>,
    pub(crate) events: HashMap<usize, Event>,
    /// Per device, the NULL (legacy default) stream.
    pub(crate) default_stream: [Option<Arc<Stream>>; MAX_DEVICES],
    /// Launches made, for the per-launch seed.
    pub(crate) launches: u64,
}

impl State {
    /// A fresh handle value (never 0, never 1 or 2, which CUDA reserves
    /// for its special streams).
    pub(crate) fn handle(&mut self) -> usize {
        self.next += 16;
        0x1000 + self.next
    }

    /// The allocation containing `[addr, addr + len)`.
    pub(crate) fn find(&self, addr: u64, len: u64) -> Option<(u64, &Alloc)> {
        let (&base, a) = self.mem.range(..=addr).next_back()?;
        (addr + len <= base + a.backing.len() as u64).then_some((base, a))
    }

    /// The device whose live primary context is `ctx`.
    pub(crate) fn device_of(&self, ctx: usize) -> Option<usize> {
        (ctx != 0)
            .then(|| self.ctx.iter().position(|c| c.is_some_and(|c| c.0 == ctx)))
            .flatten()
    }

    /// The stream for a handle in device `dev`'s context (0, 1 and 2 are
    /// its default stream); a stream of another device is no stream there.
    pub(crate) fn stream(&mut self, h: usize, dev: usize) -> Option<Arc<Stream>> {
        if h <= 2 {
            return Some(
                self.default_stream[dev]
                    .get_or_insert_with(|| Stream::new(dev))
                    .clone(),
            );
        }
        self.streams.get(&h).filter(|s| s.dev == dev).cloned()
    }

    /// Every stream of device `dev`, its default one included.
    pub(crate) fn all_streams(&self, dev: usize) -> Vec<Arc<Stream>> {
        self.streams
            .values()
            .filter(|s| s.dev == dev)
            .chain(self.default_stream[dev].iter())
            .cloned()
            .collect()
    }

    /// Every stream of every device.
    pub(crate) fn every_stream(&self) -> Vec<Arc<Stream>> {
        self.streams
            .values()
            .chain(self.default_stream.iter().flatten())
            .cloned()
            .collect()
    }

    /// The memory a launch on device `dev` may reach now: the device's
    /// allocations and every mapped host allocation.
    pub(crate) fn regions(&self, dev: usize) -> Vec<Region> {
        self.mem
            .values()
            .filter(|a| a.dev == dev || a.kind == Kind::HostMapped)
            .map(|a| Region {
                kind: a.kind,
                backing: a.backing.clone(),
            })
            .collect()
    }
}

/// The driver's state.
pub(crate) fn state() -> MutexGuard<'static, State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    lock(S.get_or_init(|| Mutex::new(State::default())))
}

/// Per device, its context's sticky error: once a launch fails, the
/// context is unusable (as on a GPU) until it is destroyed.
pub(crate) static STICKY: [AtomicU64; MAX_DEVICES] = [const { AtomicU64::new(0) }; MAX_DEVICES];

/// Device `dev`'s sticky error, if any.
pub(crate) fn sticky(dev: usize) -> Option<CUresult> {
    match STICKY[dev].load(Ordering::Acquire) {
        0 => None,
        c => Some(c as CUresult),
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs a launch; returns its noted counters (`crate::stats::noted`),
/// empty when it did not run or failed.
fn run_job(job: Job) -> BTreeMap<String, u64> {
    if sticky(job.dev).is_some() {
        return BTreeMap::new();
    }
    let f = &job.loaded.module.funcs[job.func as usize];
    let t0 = Instant::now();
    let res = offload_vgpu::launch(
        &job.loaded.module,
        job.func,
        job.dims,
        &job.params,
        job.regions,
        job.loaded.data.clone(),
        &job.opts,
    );
    match res {
        Ok(stats) => {
            if Config::get().trace > 0 {
                eprintln!(
                    "offload-vgpu{}: `{}` grid {:?} block {:?}: {} instructions in {:.3} s ({:.1} M/s, seed {})",
                    job.dev,
                    f.name,
                    job.dims.grid,
                    job.dims.block,
                    stats.instructions,
                    t0.elapsed().as_secs_f64(),
                    stats.rate() / 1e6,
                    job.opts.seed
                );
            }
            if Config::get().trace > 1 {
                let mut top = stats.costs.by_line.clone();
                top.sort_by_key(|l| std::cmp::Reverse(l.sectors));
                for l in top.iter().take(12) {
                    eprintln!(
                        "offload-vgpu:   line {}: {} warp-wide accesses, {} sectors",
                        l.line, l.instructions, l.sectors
                    );
                }
            }
            let noted = crate::stats::noted(&stats, &job.loaded.notes);
            crate::stats::add(&stats, &noted);
            noted
        }
        Err(e) => {
            let code = match &e {
                offload_vgpu::Error::Launch(f) => match f.kind {
                    offload_vgpu::FaultKind::IllegalAddress => err::ILLEGAL_ADDRESS,
                    offload_vgpu::FaultKind::MisalignedAddress => err::MISALIGNED_ADDRESS,
                    offload_vgpu::FaultKind::Trap | offload_vgpu::FaultKind::Deadlock => {
                        err::LAUNCH_FAILED
                    }
                    offload_vgpu::FaultKind::Timeout => err::LAUNCH_TIMEOUT,
                },
                _ => err::LAUNCH_FAILED,
            };
            let msg = e.to_string();
            eprintln!("offload-vgpu{}: {msg}", job.dev);
            err::set_detail(code, msg);
            STICKY[job.dev].store(u64::from(code), Ordering::Release);
            BTreeMap::new()
        }
    }
}
