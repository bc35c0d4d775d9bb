//! offload-vgpu: a virtual GPU. It parses and executes the PTX that
//! offload's backend emits (kernels and the PTX math library) on a
//! simulated grid, so that the CUDA device runs — through the driver shim
//! in `vgpu/driver`, which cudarc loads in place of NVIDIA's `libcuda.so`
//! — on machines without a GPU.
//!
//! ```
//! let m = offload_vgpu::parse(
//!     ".version 6.3\n.target sm_70\n.address_size 64\n\
//!      .func (.reg .b32 %r) twice (.reg .b32 %a)\n{\n\tadd.s32 %r, %a, %a;\n\tret;\n}\n",
//! )?;
//! assert_eq!(offload_vgpu::call(&m, "twice", &[21])?, 42);
//! # Ok::<(), offload_vgpu::Error>(())
//! ```
//!
//! # What is modelled
//!
//! - **Syntax.** Module directives (`.version`, `.target`,
//!   `.address_size 64`), `.entry` and `.func` with `.param` and `.reg`
//!   parameters, `.reg` declarations (with `%r<N>` ranges), `.global`,
//!   `.const`, `.shared` and `.local` variables, labels, guards (`@p`,
//!   `@!p`), and every instruction and qualifier listed in [`decode`]'s
//!   opcodes. Anything else — an instruction, a qualifier or a directive —
//!   is an [`Error::Parse`] naming the PTX line: nothing is skipped.
//! - **Arithmetic**, bit for bit as the PTX ISA manual defines it: integer
//!   widths with wrapping, shift amounts clamped at the width, `mul.hi` and
//!   `mul.wide`, IEEE `.rn` float arithmetic with subnormals kept, `fma`
//!   with one rounding, `cvt` with every rounding modifier and saturation
//!   (float → integer saturates and maps NaN to 0), float `min`/`max` (a
//!   NaN operand yields the other; −0 < +0), ordered and unordered `setp`
//!   with `.and`/`.or`/`.xor` combining, `selp`.
//! - **Memory**: loads and stores in the generic, global, shared, local,
//!   param and const spaces; `atom` and `red` (add, min, max, inc, dec,
//!   and, or, xor, exch, cas). Every access is checked against the live
//!   allocations ([`mem`]): outside them is an illegal address, unaligned
//!   a misaligned one, each reported with the kernel, PTX line, block,
//!   thread and address.
//! - **Execution**: a grid of blocks of threads in warps of 32, all
//!   runnable, interleaved at instruction granularity by a seeded
//!   scheduler ([`grid`]); `nanosleep` yields the thread's turn;
//!   `bar.sync` waits for the block's live threads; `call`/`ret` with a
//!   register file per frame; `%tid`, `%ntid`, `%ctaid`, `%nctaid`,
//!   `%laneid`, `%warpid`, `%nwarpid`, `%smid`, `%nsmid`, `%clock`,
//!   `%clock64`, `%globaltimer`.
//!
//! # Modelled more strongly than hardware, or not at all
//!
//! - **Memory order.** One host thread runs a launch, one instruction at a
//!   time, and every access is a sequentially consistent atomic: there are
//!   no stale reads, no reordering, and `fence`/`membar` and the
//!   `.relaxed`/`.acquire`/`.release` and scope qualifiers add nothing (they
//!   are parsed and checked for legality only). A kernel missing a fence
//!   therefore passes here and may fail on hardware; the interleavings the
//!   scheduler explores are the only source of races.
//! - **Warps** are scheduled thread by thread (sm_70's independent thread
//!   scheduling at its most adversarial); there is no lockstep execution,
//!   so no divergence cost and no warp-synchronous behaviour. `shfl.sync`
//!   and `vote.sync` are modelled as rendezvous of the lanes of their
//!   member mask that have not exited (`warp.rs`); `activemask` gives the
//!   lane's own bit (no other lane is known to run with it); `shfl`'s
//!   predicate destination, and the non-`.sync` forms, are not modelled.
//! - **NaN payloads**: float arithmetic returns the host's NaN (a quieted
//!   operand), where hardware may return the canonical NaN.
//! - **Integer division by zero** (unspecified in PTX): the quotient is all
//!   ones and the remainder the dividend.
//! - **Not modelled** (rejected at parse time): `.ftz` (but on `ex2`),
//!   `.approx` (but on `ex2`, computed exactly: hardware is within 2 ulp),
//!   directed rounding of float arithmetic other than `fma.f32`, vector
//!   loads and stores, textures and surfaces, `.param` arguments of
//!   `.func` calls (the backend passes registers), indirect calls.
//! - **Time**: `%clock` counts the thread's instructions; there is no
//!   timing model, so the simulator's speed says nothing about a GPU's.
//!   What it does say is counted by the cost model ([`cost`]): global
//!   memory sectors per warp-wide instruction, atomics and the longest
//!   chain on one address, strong and `.sys` loads, fences.
//! - Shared and local windows use generic addresses (`cvta` is the
//!   identity).

#![deny(missing_docs)]

pub mod alu;
pub mod cost;
pub mod decode;
mod exec;
pub mod grid;
pub mod inst;
mod lex;
pub mod mem;
pub mod module;
mod parse;
mod warp;

pub use grid::{Dims, LaunchStats, SimOptions, launch};
pub use module::Module;
pub use parse::parse;

/// What went wrong.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// The PTX text is malformed, or uses something not modelled.
    #[error("PTX line {line}: {msg}")]
    Parse {
        /// 1-based line.
        line: u32,
        /// What is wrong.
        msg: String,
    },
    /// A launch failed as a GPU's would.
    #[error("{0}")]
    Launch(Box<LaunchFault>),
    /// A call made with bad arguments.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    pub(crate) fn parse(line: u32, msg: impl Into<String>) -> Error {
        Error::Parse {
            line,
            msg: msg.into(),
        }
    }
}

/// The kind of a launch failure.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// An access outside the allocations (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    IllegalAddress,
    /// An access not aligned to its size (`CUDA_ERROR_MISALIGNED_ADDRESS`).
    MisalignedAddress,
    /// `trap` (`CUDA_ERROR_LAUNCH_FAILED`).
    Trap,
    /// The instruction budget ran out (`CUDA_ERROR_LAUNCH_TIMEOUT`).
    Timeout,
    /// Threads wait at a barrier the rest of the block never reaches.
    Deadlock,
}

/// A launch failure, with where it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchFault {
    /// What.
    pub kind: FaultKind,
    /// The kernel.
    pub kernel: String,
    /// The PTX line of the failing instruction (0 when none).
    pub line: u32,
    /// That line's text.
    pub text: String,
    /// The block (`%ctaid`).
    pub block: [u32; 3],
    /// The thread in its block (`%tid`).
    pub thread: [u32; 3],
    /// The address accessed (memory faults).
    pub addr: u64,
    /// The access size in bytes (memory faults).
    pub size: u64,
    /// The scheduler's seed (rerun with it to replay).
    pub seed: u64,
    /// More about it.
    pub detail: String,
}

impl std::fmt::Display for LaunchFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            FaultKind::IllegalAddress => "illegal address",
            FaultKind::MisalignedAddress => "misaligned address",
            FaultKind::Trap => "trap",
            FaultKind::Timeout => "launch timed out",
            FaultKind::Deadlock => "barrier deadlock",
        };
        write!(f, "virtual GPU: {what} in kernel `{}`", self.kernel)?;
        if self.line > 0 {
            write!(f, " at PTX line {}: `{}`", self.line, self.text)?;
        }
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        write!(f, "; block ({bx},{by},{bz}) thread ({tx},{ty},{tz})")?;
        if matches!(
            self.kind,
            FaultKind::IllegalAddress | FaultKind::MisalignedAddress
        ) {
            write!(f, "; {}-byte access at {:#x}", self.size, self.addr)?;
        }
        write!(f, ": {} (scheduler seed {})", self.detail, self.seed)
    }
}

/// Runs the `.func` `name` of `m` on one thread with `args` (raw bits, f32
/// and 32-bit integers in the low half) and returns its first result's
/// bits (0 for a function without results). Memory accesses fail: the
/// routines this serves (the math library) use registers only.
pub fn call(m: &Module, name: &str, args: &[u64]) -> Result<u64, Error> {
    let i = m
        .func_index(name)
        .ok_or_else(|| Error::Usage(format!("no function `{name}`")))?;
    let f = &m.funcs[i as usize];
    if f.entry || f.arg_regs.len() != args.len() {
        return Err(Error::Usage(format!(
            "`{name}` takes {} arguments, given {}",
            f.arg_regs.len(),
            args.len()
        )));
    }
    let place = exec::Place {
        tid: [0; 3],
        ntid: [1, 1, 1],
        ctaid: [0; 3],
        nctaid: [1, 1, 1],
        global: 0,
        block: 0,
        lane: 0,
        warp: 0,
        nwarp: 1,
        sm: 0,
        nsm: 1,
        param: 0,
        shared: 0,
        local: 0,
        data: 0,
    };
    let mut t = exec::Thread::new(m, i, place, args);
    let map = mem::MemMap::default();
    let ret = f.ret_regs.first().copied();
    let opts = SimOptions::default();
    loop {
        match t.step(m, &map) {
            Ok(exec::Event::Exit) => return Ok(ret.map_or(0, |r| t.frames[0].regs[r as usize])),
            Ok(_) => {}
            Err(stop) => return Err(grid::fault_of(m, &t, stop, &opts)),
        }
        if t.steps > 1 << 24 {
            return Err(Error::Usage(format!("`{name}` ran for 2^24 instructions")));
        }
    }
}
