//! A kernel launch: the grid of blocks of threads, warps of 32, and the
//! seeded scheduler that interleaves them at instruction granularity.
//!
//! Every resident thread of the grid is runnable at once (the launches
//! offload makes are sized to be resident, as persistent-thread kernels
//! must be). The scheduler repeatedly picks a runnable thread at random and
//! runs it for a random number of instructions (1 to the quantum), or until
//! it yields (`nanosleep`), waits at a barrier or exits. A spin-waiting
//! thread therefore cannot starve the thread it waits for, and racing
//! threads meet in many orders; the seed makes a run exactly repeatable.

use crate::cost::{Costs, Model};
use crate::exec::{Event, Place, Stop, Thread};
use crate::mem::{Backing, Fault, Kind, MemMap, Region};
use crate::module::Module;
use crate::{Error, FaultKind, LaunchFault};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Threads per warp.
pub const WARP: u32 = 32;

/// How a launch is scheduled and bounded.
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The scheduler's seed: the same seed, kernel and inputs give the same
    /// interleaving.
    pub seed: u64,
    /// The most instructions a thread runs per turn (at least 1).
    pub quantum: u32,
    /// Instructions (over all threads) after which the launch fails as
    /// timed out.
    pub max_steps: u64,
    /// SMs of the simulated device (for `%smid`/`%nsmid`).
    pub sms: u32,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            seed: 0x5eed,
            quantum: 32,
            max_steps: 1 << 36,
            sms: 2,
        }
    }
}

/// The shape of a launch.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Blocks in the grid.
    pub grid: [u32; 3],
    /// Threads in a block.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_bytes: u32,
}

/// What a launch did.
#[derive(Clone, Debug, Default)]
pub struct LaunchStats {
    /// PTX instructions executed (guarded-off ones included).
    pub instructions: u64,
    /// Threads launched.
    pub threads: u64,
    /// What it would cost on hardware ([`crate::cost`]).
    pub costs: Costs,
    /// Wall time of the simulation.
    pub wall: Duration,
}

impl LaunchStats {
    /// Simulated instructions per second of wall time.
    pub fn rate(&self) -> f64 {
        self.instructions as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

/// Runs kernel `func` of `module` over `dims`, with `params` as its
/// parameter buffer and `regions` (device and mapped host memory, the
/// module's data) as the memory it may reach.
pub fn launch(
    module: &Module,
    func: u32,
    dims: Dims,
    params: &[u8],
    regions: Vec<Region>,
    data: Option<Arc<Backing>>,
    opts: &SimOptions,
) -> Result<LaunchStats, Error> {
    let t0 = Instant::now();
    let f = module
        .funcs
        .get(func as usize)
        .filter(|f| f.entry)
        .ok_or_else(|| Error::Usage("not a kernel of this module".into()))?;
    if params.len() as u64 != f.param_bytes {
        return Err(Error::Usage(format!(
            "`{}` takes {} bytes of parameters, given {}",
            f.name,
            f.param_bytes,
            params.len()
        )));
    }
    let per_block: u64 = dims.block.iter().map(|&d| u64::from(d)).product();
    let blocks: u64 = dims.grid.iter().map(|&d| u64::from(d)).product();
    if per_block == 0 || blocks == 0 || per_block > 1024 {
        return Err(Error::Usage(format!(
            "bad launch shape: grid {}×{}×{}, block {}×{}×{} (1 to 1024 threads per block)",
            dims.grid[0], dims.grid[1], dims.grid[2], dims.block[0], dims.block[1], dims.block[2]
        )));
    }
    let total = per_block * blocks;
    if total > 1 << 22 {
        return Err(Error::Usage(format!(
            "{total} threads: the virtual GPU runs at most 2^22 threads per launch"
        )));
    }
    let mut map = MemMap::new(regions);
    let param =
        Backing::new(params.len()).ok_or_else(|| Error::Usage("out of host memory".into()))?;
    param.write(0, params);
    map.add(Region {
        kind: Kind::Param,
        backing: param.clone(),
    });
    let data_addr = match data {
        Some(d) => {
            let a = d.addr();
            map.add(Region {
                kind: Kind::ModuleData,
                backing: d,
            });
            a
        }
        None => 0,
    };
    let shared_bytes = f.shared_bytes.max(module.shared_bytes) + u64::from(dims.shared_bytes);
    let mut shared = Vec::new();
    for b in 0..blocks as u32 {
        let s = if shared_bytes > 0 {
            let s = Backing::new(shared_bytes as usize)
                .ok_or_else(|| Error::Usage("out of host memory".into()))?;
            map.add(Region {
                kind: Kind::Shared(b),
                backing: s.clone(),
            });
            s.addr()
        } else {
            0
        };
        shared.push(s);
    }
    let nwarp = (per_block as u32).div_ceil(WARP);
    let mut threads = Vec::with_capacity(total as usize);
    for g in 0..total as u32 {
        let b = g / per_block as u32;
        let t = g % per_block as u32;
        let local = if f.local_bytes > 0 {
            let l = Backing::new(f.local_bytes as usize)
                .ok_or_else(|| Error::Usage("out of host memory".into()))?;
            map.add(Region {
                kind: Kind::Local(g),
                backing: l.clone(),
            });
            l.addr()
        } else {
            0
        };
        let [bx, by, _] = dims.block;
        let [gx, gy, _] = dims.grid;
        let place = Place {
            tid: [t % bx, t / bx % by, t / (bx * by)],
            ntid: dims.block,
            ctaid: [b % gx, b / gx % gy, b / (gx * gy)],
            nctaid: dims.grid,
            global: g,
            block: b,
            lane: t % WARP,
            warp: t / WARP,
            nwarp,
            sm: b % opts.sms.max(1),
            nsm: opts.sms.max(1),
            param: param.addr(),
            shared: shared[b as usize],
            local,
            data: data_addr,
        };
        threads.push(Thread::new(module, func, place, &[]));
    }
    let mut stats = LaunchStats {
        threads: total,
        ..LaunchStats::default()
    };
    run(
        module,
        &map,
        &mut threads,
        per_block,
        blocks,
        opts,
        &mut stats,
    )?;
    stats.wall = t0.elapsed();
    Ok(stats)
}

fn run(
    module: &Module,
    map: &MemMap,
    threads: &mut [Thread],
    per_block: u64,
    blocks: u64,
    opts: &SimOptions,
    stats: &mut LaunchStats,
) -> Result<(), Error> {
    let mut rng = Rng(opts.seed | 1);
    let mut live: Vec<u32> = (0..threads.len() as u32).collect();
    let mut alive = vec![per_block as u32; blocks as usize];
    let mut waiting: Vec<Vec<u32>> = vec![Vec::new(); blocks as usize];
    let quantum = u64::from(opts.quantum.max(1));
    let mut model = Model::new(module, threads.len(), per_block as u32);
    // Lanes waiting at `shfl.sync`/`vote.sync`, and the threads that exited
    // (a warp-wide instruction does not wait for those).
    let mut warps = crate::warp::Rendezvous::default();
    let mut exited = vec![false; threads.len()];
    let mut released: Vec<u32> = Vec::new();
    while !live.is_empty() {
        let i = rng.below(live.len() as u64) as usize;
        let t = live[i] as usize;
        let turn = 1 + rng.below(quantum);
        let mut remove = false;
        for _ in 0..turn {
            stats.instructions += 1;
            let step = threads[t].step(module, map);
            if let Some(p) = threads[t].probe.take() {
                let pl = &threads[t].place;
                model.record(t, pl.block * pl.nwarp + pl.warp, p);
            }
            match step {
                Ok(Event::Next) => {}
                Ok(Event::Yield) => break,
                Ok(Event::Warp(req)) => {
                    remove = true;
                    match warps.arrive(threads, &exited, t as u32, req) {
                        Ok(r) => released = r,
                        Err(detail) => return Err(warp_fault(module, &threads[t], detail, opts)),
                    }
                    break;
                }
                Ok(Event::Barrier(_)) => {
                    let b = threads[t].place.block as usize;
                    waiting[b].push(t as u32);
                    remove = true;
                    break;
                }
                Ok(Event::Exit) => {
                    alive[threads[t].place.block as usize] -= 1;
                    remove = true;
                    exited[t] = true;
                    match warps.exited(threads, &exited, t as u32) {
                        Ok(r) => released = r,
                        Err(detail) => return Err(warp_fault(module, &threads[t], detail, opts)),
                    }
                    break;
                }
                Err(stop) => return Err(fault_of(module, &threads[t], stop, opts)),
            }
        }
        if remove {
            live.swap_remove(i);
            let b = threads[t].place.block as usize;
            if !waiting[b].is_empty() && waiting[b].len() as u32 == alive[b] {
                live.append(&mut waiting[b]);
            }
            live.append(&mut released);
        }
        if stats.instructions > opts.max_steps {
            let th = &threads[t];
            let at = th.current(module).map_or(0, |(_, i)| i.line);
            return Err(thread_fault(
                module,
                th,
                FaultKind::Timeout,
                (at, current_text(module, th)),
                (0, 0),
                format!("{} instructions without finishing", opts.max_steps),
                opts,
            ));
        }
    }
    if let Some((t, detail)) = warps.stuck(threads) {
        return Err(deadlock(module, &threads[t as usize], detail, opts));
    }
    if let Some((b, w)) = waiting.iter().enumerate().find(|(_, w)| !w.is_empty()) {
        let detail = format!(
            "{} thread(s) of block {b} wait at a barrier that the others never reach",
            w.len()
        );
        return Err(deadlock(module, &threads[w[0] as usize], detail, opts));
    }
    stats.costs = model.finish();
    Ok(())
}

/// Threads that wait for others that never come, reported at thread `t`.
fn deadlock(module: &Module, t: &Thread, detail: String, opts: &SimOptions) -> Error {
    let nowhere = (0, String::new());
    thread_fault(
        module,
        t,
        FaultKind::Deadlock,
        nowhere,
        (0, 0),
        detail,
        opts,
    )
}

/// A fault of kind `kind` at thread `t`: its PTX `line` and `text`, the
/// access's `addr` and `size` (zero for none), and the `detail`.
fn thread_fault(
    module: &Module,
    t: &Thread,
    kind: FaultKind,
    (line, text): (u32, String),
    (addr, size): (u64, u64),
    detail: String,
    opts: &SimOptions,
) -> Error {
    Error::Launch(Box::new(LaunchFault {
        kind,
        kernel: kernel_name(module, t),
        line,
        text,
        block: t.place.ctaid,
        thread: t.place.tid,
        addr,
        size,
        seed: opts.seed,
        detail,
    }))
}

/// A warp-wide instruction used as PTX leaves undefined (`crate::warp`),
/// reported at thread `t`'s instruction.
fn warp_fault(module: &Module, t: &Thread, detail: String, opts: &SimOptions) -> Error {
    let (line, text, _) = last_run(module, t);
    thread_fault(
        module,
        t,
        FaultKind::Trap,
        (line, text),
        (0, 0),
        detail,
        opts,
    )
}

/// The instruction thread `t` ran last (the one just before its pc): its
/// line, text and function.
fn last_run(module: &Module, t: &Thread) -> (u32, String, String) {
    t.frames
        .last()
        .and_then(|fr| {
            let f = &module.funcs[fr.func as usize];
            let i = f.code.get(fr.pc.checked_sub(1)? as usize)?;
            let text = module
                .text
                .lines()
                .nth(i.line as usize - 1)
                .map_or_else(String::new, |l| l.trim().to_string());
            Some((i.line, text, f.name.clone()))
        })
        .unwrap_or_default()
}

fn kernel_name(module: &Module, t: &Thread) -> String {
    t.frames
        .first()
        .map_or_else(String::new, |f| module.funcs[f.func as usize].name.clone())
}

fn current_text(module: &Module, t: &Thread) -> String {
    t.current(module)
        .and_then(|(_, i)| module.text.lines().nth(i.line as usize - 1))
        .map_or_else(String::new, |l| l.trim().to_string())
}

pub(crate) fn fault_of(module: &Module, t: &Thread, stop: Stop, opts: &SimOptions) -> Error {
    // The instruction that failed is the one just before the pc.
    let (line, text, func) = last_run(module, t);
    let (kind, addr, size, detail) = match stop {
        Stop::Mem(Fault::Illegal, a, s) => (
            FaultKind::IllegalAddress,
            a,
            s,
            "outside every allocation this access may reach".to_string(),
        ),
        Stop::Mem(Fault::Misaligned, a, s) => (
            FaultKind::MisalignedAddress,
            a,
            s,
            format!("not aligned to {s} bytes"),
        ),
        Stop::Trap => (FaultKind::Trap, 0, 0, "`trap` executed".to_string()),
    };
    let detail = if func != kernel_name(module, t) && !func.is_empty() {
        format!("{detail} (in `{func}`)")
    } else {
        detail
    };
    thread_fault(module, t, kind, (line, text), (addr, size), detail, opts)
}
