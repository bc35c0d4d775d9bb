//! The PTX backend: verified bytecode → PTX text for NVIDIA GPUs (sm_70 and
//! newer), with the same slot-loop protocol as the CPU backend ([`crate::cpu`]),
//! lowered through the same walker (`crate::lower`):
//!
//! ```text
//! slot = (ctaid.x * ntid.x + tid.x + rotate) mod slots ; one slot per thread
//! entry:  if save_area[slot] holds a record: goto resume
//!         (w, hi) = never_ran[slot]                ; the unstarted rest
//!         if (w, hi) == (0, 0): (w, hi) = (start + slot, end) ; its part
//!         if w < hi: goto item; exit DONE
//! item:   if w >= hi: exit DONE (or goto more)
//!         if ld.relaxed.gpu(control) != 0: never_ran[slot] = (w, hi); exit STOPPED
//!         lim = min(hi, w + ITEMS_PER_POLL * slots)
//! body:   <the kernel body for workitem w>      ; back-edges poll every
//!                                                ; POLL_WORK
//!         w += slots; if w < lim: goto body; goto item ; grid-stride
//! deopt:  save_area[slot][n] = (w, live values); fence; site word; count
//!         n += 1; if n == records_per_slot or safepoint: exit DEOPT
//!         w += slots; goto item
//! resume: w = record.workitem; hi = w + 1; goto landing[record.site]
//!         <the body from where the workitem stopped> ; `ret` → more
//! more:   empty the record; (w, hi) = never_ran[slot]; goto item (or exit DONE)
//! exit:   never_ran[slot] = the rest (NEVER_RAN_NONE when empty), counts;
//!         exits[slot] = exit_byte(code), release          ; no atomic
//! ```
//!
//! The context, the captures and their arrays' element-0 addresses are the
//! kernel's parameters (`p_ctx`, `p_caps`, `p_elems`, read with
//! `ld.param`): ptxas reads them from the constant bank where they are
//! used, so no register holds them across the slot loop; the slot's index
//! is derived again from the special registers where the cold paths need
//! it, and a capture the kernel never assigns is its local's register.
//!
//! **Re-entry.** The host leaves a record of a safepoint or of the device
//! eden's exhaustion at a loop header or an allocation in the slot's part
//! of the save area, and the relaunch resumes it before anything else:
//! the body is lowered once, with a landing at every re-entry point
//! (`lower/reentry.rs`) that loads the record into the registers its exit
//! stored from. While the slot resumes, its exits leave its unstarted rest
//! in `never_ran` (it runs when the resumed workitem ends), and a deopt of
//! the resumed workitem writes its record in the same place.
//!
//! The lowering — frames and inlining, virtual dispatch, site numbering,
//! speculation, back-edge polls, which values each deopt exit stores — is
//! the walker's (`crate::lower::Walker`), shared with the CPU backend, so
//! a CPU and a PTX version of a kernel have the same [`DeoptMetadata`] and
//! the host replays either one's records unchanged; this module spells the
//! walker's primitives in PTX (`emit.rs`).
//!
//! Locals and operand-stack slots are PTX virtual registers (one per local,
//! one per stack depth and kind, per inlined call), which `ptxas`
//! allocates; every deopt exit stores the site's frame state from them.
//! Before the body is assembled, `opt` cleans the text the walker emitted
//! one bytecode at a time (copies, constants, dead values, tests of tests,
//! branches to branches): `ptxas` would do the same on hardware, but the
//! virtual GPU executes and counts this text against NVVM's.
//! Nothing traps: a `trap` poisons the CUDA context, so every failed check
//! writes a record and the slot goes on (or returns).
//!
//! Memory: the heap image lives in device memory (`heap_base`), references
//! are 32-bit word offsets as on the host. The control word is in device
//! memory, polled with `ld.relaxed.gpu` (a strong load at GPU scope,
//! served by L2, never by a stale L1 line), so the host can raise a
//! safepoint while the kernel runs by copying into it (the copy engine
//! writes L2). Allocation runs the shared-TLAB
//! protocol of `offload_heap::tlab` entirely on the device: the fast path
//! is one `atom.add`; the designated refiller carves the next TLAB from the
//! device eden (`atom.add` on its top), waiters back off with `nanosleep`,
//! and an exhausted eden sets the FAILED bit and deopts with
//! `AllocationFailure`.
//!
//! Arithmetic is bit-exact with the host: integer ops mask shift counts and
//! special-case `MIN / -1` like the interpreter; float ops use the `.rn`
//! forms with denormals preserved (no `.ftz`, no `.approx`); `f.rem` is
//! an exact `fmod` (integer long division on the significands, like musl),
//! `min`/`max` propagate NaN and order `-0 < +0`. The transcendentals
//! (`exp`, `log`, `sin`, `cos`, `pow`) call [`ptxlib`]'s routines, the
//! host's libm ported to PTX and checked bit for bit on the host by
//! the virtual GPU (`offload-vgpu`); sine and cosine of huge arguments (beyond the
//! single-word reduction) deoptimize with reason `DeviceLimit` and the host
//! finishes them.

mod alloc;
mod emit;
mod float;
mod loops;
mod opt;
mod reduce;
mod scatter;
mod slot_loop;
mod unchecked;

pub use scatter::{SCATTER_ENTRY, scatter_kernel};

use crate::lower::{Walker, plan};
use crate::spec::Speculations;
use crate::{CompileOptions, JitError, Refusal, ptxlib};
use offload_abi::gpu::offsets;
use offload_deopt::{DeoptMetadata, Reason, SaveLayout};
use offload_ir::{Bci, FuncId, Kind};
use offload_program::Program;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The PTX ISA version we emit: the lowest that has everything we use
/// (`ld.relaxed`, `fence.acq_rel`, `atom` with `.sem`: 6.0;
/// `nanosleep`: 6.3), so drivers as old as CUDA 10.1 accept it.
pub const PTX_VERSION: &str = "6.3";
/// The target we emit for. Independent thread scheduling (sm_70) is what
/// makes spinning on a TLAB refill inside a warp safe; the same PTX is
/// assembled for sm_80 and sm_90 (`.target` must not exceed the `-arch`).
pub const PTX_TARGET: &str = "sm_70";

/// A kernel version compiled to PTX.
#[derive(Clone, Debug)]
pub struct PtxKernel {
    /// The kernel.
    pub kernel: FuncId,
    /// Its version.
    pub version: u32,
    /// The `.entry` name.
    pub name: String,
    /// The module text.
    pub text: String,
    /// Its deopt metadata — equal to the CPU version's.
    pub meta: DeoptMetadata,
    /// The sites whose records it resumes when the host leaves one in a
    /// slot's part of the save area ([`offload_deopt::SiteMap::resumable`]):
    /// every re-entry point, unless the kernel has none (no loop, no
    /// allocation) or [`CompileOptions::no_reentry`] was set.
    pub resumes: BTreeSet<offload_ir::SiteId>,
    /// Whether any of its code paths allocates: a launch carves no
    /// device eden for a kernel that does not.
    pub allocates: bool,
    /// The kernel's array accesses when every one is indexed by the
    /// workitem number (`a[i]`, `a` a capture), as (capture index,
    /// element bytes), one per access; empty when some access is indexed
    /// otherwise (in the kernel or a function it calls). The launch lines
    /// a warp's workitems up with the sectors of as many of them as it can
    /// (`offload_abi::gpu::DeviceCtx::rotate`).
    pub streams: Vec<(usize, u32)>,
    /// Whether its class lookups read the page table
    /// ([`crate::Dispatch`]): each looks the page up (`// @count
    /// dispatch.page`) and loads the header only on a mixed page (`//
    /// @count dispatch.header`); otherwise each loads the header.
    pub dispatch_by_address: bool,
    /// How long code generation took.
    pub compile_time: Duration,
}

/// Compile version `version` of kernel `k` to PTX.
pub fn compile(
    prog: &Program,
    k: FuncId,
    version: u32,
    opts: CompileOptions,
) -> Result<PtxKernel, JitError> {
    compile_speculative(prog, k, version, opts, &Speculations::none())
}

/// Compile version `version` of kernel `k` to PTX with speculations (see
/// [`crate::spec`]); the metadata records them exactly as the CPU
/// backend's does.
pub fn compile_speculative(
    prog: &Program,
    k: FuncId,
    version: u32,
    opts: CompileOptions,
    spec: &Speculations,
) -> Result<PtxKernel, JitError> {
    let t0 = Instant::now();
    let v = prog.verified();
    let name = format!("offload_k{}_v{version}", k.0);
    let count = v.func(k).params().len().saturating_sub(1);
    if count > offload_abi::gpu::MAX_CAPTURES {
        return Err(JitError::Unsupported {
            func: v.func(k).name.clone(),
            bci: 0,
            why: Refusal::TooManyCaptures {
                count,
                max: offload_abi::gpu::MAX_CAPTURES,
            },
        });
    }
    let ptx = Ptx {
        code: String::new(),
        regs: Vec::new(),
        next: [0; 5],
        labels: 0,
        math: BTreeSet::new(),
        reentry: false,
        unchecked: std::collections::BTreeMap::new(),
        known: std::collections::BTreeMap::new(),
        ebase: std::collections::BTreeMap::new(),
        copy_entry: std::collections::BTreeMap::new(),
        premarked: BTreeSet::new(),
        copy: 0,
        next_label: L_NEXT,
        reduces: None,
        allocates: false,
        alloc_kinds: prog.allocation_kinds(k).into(),
        loops: Vec::new(),
        loop_unchecked: std::collections::BTreeMap::new(),
        loop_hoisted: std::collections::BTreeMap::new(),
        loop_strided: std::collections::BTreeMap::new(),
        fixed: BTreeSet::new(),
        proven_at: std::collections::BTreeMap::new(),
        loaded: std::collections::BTreeMap::new(),
    };
    let dispatch_by_address = opts.dispatch.by_address(true);
    let mut lw = Walker::new(ptx, prog, k, version, opts, spec)?;
    let resumes = lw.build()?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "//\n// offload: kernel `{}` version {version} ({} deopt sites)\n//",
        v.func(k).name,
        lw.meta.sites.len()
    );
    let _ = writeln!(
        text,
        ".version {PTX_VERSION}\n.target {PTX_TARGET}\n.address_size 64\n"
    );
    if !lw.backend.math.is_empty() {
        text.push_str(&ptxlib::definitions(lw.backend.math.iter().copied()));
        text.push('\n');
    }
    // The context, the captures and their arrays' elements by value
    // (`offload_abi::gpu::DeviceCtx`, `MAX_CAPTURES`), read with `ld.param`.
    let captures = v.func(k).params().len().saturating_sub(1);
    let _ = writeln!(
        text,
        ".visible .entry {name}(\n\t.param .align 8 .b8 p_ctx[{}],\n\t.param .align 8 .b8 p_caps[{c}],\n\t.param .align 8 .b8 p_elems[{c}]\n)\n{{",
        offload_abi::gpu::DEVICE_CTX_WORDS * 8,
        c = captures.max(1) * 8
    );
    for (i, n) in lw.backend.next.iter().enumerate() {
        if *n > 0 {
            let (ty, pre) = TEMP_CLASSES[i];
            let _ = writeln!(text, "\t.reg {ty} {pre}<{n}>;");
        }
    }
    let mut decls = Vec::new();
    for (i, n) in lw.backend.next.iter().enumerate() {
        let (ty, pre) = TEMP_CLASSES[i];
        decls.extend((0..*n).map(|k| (format!("{pre}{k}"), ty)));
    }
    for (name, ty) in &lw.backend.regs {
        let _ = writeln!(text, "\t.reg {ty} {name};");
        decls.push((name.clone(), *ty));
    }
    text.push_str(&opt::optimize(&lw.backend.code, &decls));
    text.push_str("}\n");
    Ok(PtxKernel {
        kernel: k,
        version,
        name,
        text,
        meta: lw.meta,
        resumes,
        allocates: lw.backend.allocates,
        streams: streamed(prog, k),
        dispatch_by_address,
        compile_time: t0.elapsed(),
    })
}

/// [`PtxKernel::streams`] of kernel `k`.
fn streamed(prog: &Program, k: FuncId) -> Vec<(usize, u32)> {
    let Some(a) = prog.analysis(k) else {
        return Vec::new();
    };
    let v = prog.verified();
    let accesses = crate::cpu::opt::workitem_indexed(v, k, a);
    let indexes =
        |i: &offload_ir::Inst| i.opcode().hazards().has(offload_ir::isa::hz::BOUNDS_CHECK);
    // Every array access of the kernel is one of those, and the functions
    // it calls access none.
    let body = &v.func(k).body;
    let all = body
        .iter()
        .enumerate()
        .all(|(bci, i)| !indexes(i) || accesses.contains_key(&(bci as Bci)));
    let (mut seen, mut todo) = (BTreeSet::new(), vec![k]);
    let mut callees_clean = true;
    while let Some(f) = todo.pop() {
        for i in &v.func(f).body {
            let callee = match i {
                offload_ir::Inst::Call { func } => Some(*func),
                offload_ir::Inst::CallVirt { .. } => {
                    callees_clean = false;
                    None
                }
                _ => None,
            };
            if f != k && indexes(i) {
                callees_clean = false;
            }
            if let Some(c) = callee
                && seen.insert(c)
            {
                todo.push(c);
            }
        }
    }
    if !all || !callees_clean {
        return Vec::new();
    }
    accesses
        .iter()
        .map(|(&bci, &p)| (p as usize - 1, crate::lower::elem(body[bci as usize]).1))
        .collect()
}

/// Temporary register classes: `(type, prefix)`, indexed by [`Cls`].
const TEMP_CLASSES: [(&str, &str); 5] = [
    (".b32", "%r"),
    (".b64", "%rd"),
    (".f32", "%f"),
    (".f64", "%fd"),
    (".pred", "%p"),
];

#[derive(Copy, Clone, PartialEq, Eq)]
enum Cls {
    B32 = 0,
    B64 = 1,
    F32 = 2,
    F64 = 3,
    Pred = 4,
}

fn cls(k: Kind) -> Cls {
    match k {
        Kind::I32 | Kind::Ref => Cls::B32,
        Kind::I64 => Cls::B64,
        Kind::F32 => Cls::F32,
        Kind::F64 => Cls::F64,
    }
}

fn reg_type(k: Kind) -> &'static str {
    TEMP_CLASSES[cls(k) as usize].0
}

/// The `mov` type suffix of a kind.
fn mov_ty(k: Kind) -> &'static str {
    match k {
        Kind::I32 | Kind::Ref => "b32",
        Kind::I64 => "b64",
        Kind::F32 => "f32",
        Kind::F64 => "f64",
    }
}

/// The `ld`/`st` type of a field of kind `k`.
fn field_ty(k: Kind) -> &'static str {
    match k {
        Kind::I32 | Kind::Ref => "u32",
        Kind::I64 => "u64",
        Kind::F32 => "f32",
        Kind::F64 => "f64",
    }
}

/// The PTX backend's state while lowering one kernel version: the text
/// and the registers and labels it names.
pub(crate) struct Ptx {
    /// The body's instructions.
    code: String,
    /// Named registers: (name, type).
    regs: Vec<(String, &'static str)>,
    /// Next temporary of each class.
    next: [u32; 5],
    labels: u32,
    /// Math-library routines the kernel calls.
    math: BTreeSet<&'static str>,
    /// The kernel has re-entry code (`slot_loop.rs`).
    reentry: bool,
    /// While the unchecked copy of the body is lowered (`unchecked.rs`):
    /// its proven accesses (bytecode index → array parameter).
    unchecked: std::collections::BTreeMap<Bci, u32>,
    /// While the unchecked copy of the body is lowered: the compares known
    /// there (`crate::cpu::opt::workitem_tests`), with their values.
    known: std::collections::BTreeMap<Bci, i32>,
    /// Per proven array parameter, the register with its element 0.
    ebase: std::collections::BTreeMap<u32, String>,
    /// Per parameter a launch may sum into (`offload_ir::summed`), the
    /// address of its entry in the block's row of the copies table
    /// (`DeviceCtx::copies`): its raw word, then its element 0.
    copy_entry: std::collections::BTreeMap<u32, String>,
    /// Addresses whose chunk the prologue marked dirty: a store through
    /// one marks nothing.
    premarked: BTreeSet<String>,
    /// Which copy of the body is lowered (0: checked, 1: unchecked): its
    /// leader labels are its own.
    copy: u32,
    /// Where a workitem's `ret` goes.
    next_label: &'static str,
    /// The kind of a reducing kernel's value (`reduce.rs`).
    reduces: Option<Kind>,
    /// Some code path allocates from the device eden (`alloc.rs`).
    allocates: bool,
    /// The kinds of what the kernel allocates, as page tags
    /// (`Program::allocation_kinds`): each slot group has a TLAB per kind,
    /// in this order (`DeviceCtx::tlabs`).
    alloc_kinds: Box<[u32]>,
    /// The kernel's predicated loops (`loops.rs`).
    loops: Vec<crate::cpu::opt::PredicatedLoop>,
    /// While an unchecked copy of a predicated loop is lowered: its
    /// covered accesses, each with its array's element 0.
    loop_unchecked: std::collections::BTreeMap<Bci, String>,
    /// While an unchecked copy of a predicated loop is lowered: the
    /// addresses of its hoisted loads, each with the loaded value
    /// (`loops.rs`, `hoist_loads`).
    loop_hoisted: std::collections::BTreeMap<String, String>,
    /// While an unchecked copy of a predicated loop is lowered: its
    /// accesses as progressions in the induction variable (`k`'s register,
    /// the address at `k = 0`, the step; `loops.rs`, `stride_accesses`).
    loop_strided: std::collections::BTreeMap<Bci, (String, String, loops::Step)>,
    /// While the unchecked copy of the body is lowered: its proven
    /// elements' address registers, each with its array parameter and the
    /// access's bytecode index (`unchecked.rs`).
    proven_at: std::collections::BTreeMap<String, (u32, Bci)>,
    /// While the unchecked copy of the body is lowered: per array
    /// parameter and element kind, the last load of a proven element (its
    /// bytecode index and the register it loaded; `lower::reuse`).
    loaded: std::collections::BTreeMap<(u32, u8), (Bci, String)>,
    /// The captures' registers that are also the kernel's locals (the
    /// kernel never assigns them): launch-invariant, never assigned again.
    fixed: BTreeSet<String>,
}

/// The walker with the PTX backend.
pub(crate) type PtxWalker<'a> = Walker<'a, Ptx>;

// Named registers of the slot loop.
const SLOT: &str = "%slot";
const HEAP: &str = "%heap";
const CONTROL: &str = "%control";
const W: &str = "%w";
const HI: &str = "%hi";
/// The slots of the launch: the stride of a slot's workitems.
const STRIDE: &str = "%stride";
const NREC: &str = "%nrec";
const TLAB: &str = "%tlab";
const LARGE: &str = "%large";
const EDEN: &str = "%eden";
/// The heap's dirty map less the heap's first chunk number (the image
/// starts at a chunk boundary, so a store's map byte is
/// `(address >> CHUNK_SHIFT) + %dirty`), and a 1 to store into it.
const DIRTY: &str = "%dirty";
const ONE8: &str = "%one8";
const POLLS: &str = "%polls";
/// The end of the slot's current run of workitems between two polls of
/// the control word (`slot_loop.rs`), [`ITEMS_PER_POLL`] strides past its
/// start.
const LIM: &str = "%lim";
/// Work ([`crate::lower::weight`] units) left before the next poll of the
/// control word.
const POLLC: &str = "%pollc";
/// A slot polls the control word before every this many of its
/// workitems, not before each: the loop between polls tests only `w <
/// lim`. A workitem without loops runs in well under a microsecond on
/// hardware, so a safepoint request waits a few microseconds for the slots
/// to see it.
pub const ITEMS_PER_POLL: u64 = 32;

/// The note on a dispatch's load of its receiver's page tag (a virtual
/// call's, a guarded inline's, `instanceof`'s or `checkcast`'s): the
/// virtual GPU counts the warp-wide instructions and sectors of the lines
/// that carry `// @count NAME` (its `count.NAME.*` counters).
pub const DISPATCH_PAGE: &str = "@count dispatch.page";

/// The note on a dispatch's load of its receiver's header (on a mixed
/// page, or with dispatch by address off); see [`DISPATCH_PAGE`].
pub const DISPATCH_HEADER: &str = "@count dispatch.header";
/// Loop back-edges poll the control word once this much work
/// (`lower/weight.rs` units, about two per PTX instruction) has
/// been done since the slot's last poll, counted down in a register by
/// each back-edge's iteration weight: the poll is a load every thread of a
/// warp makes, and a fixed budget of work, unlike a fixed count of
/// back-edges, bounds the time between polls for short and long loops
/// alike. nbody's inner loop (~100 PTX instructions with four loads,
/// weight ~200) polls every ~80 back-edges, about 8,000 instructions of a
/// warp; mandelbrot's (18 instructions, weight 36) every ~450, about as
/// many. At a full SM's issue rate shared by 16 warps per scheduler that
/// is ~130,000 cycles, under 70 µs at 1.9 GHz: the time to a safepoint
/// stays under the 100 µs that issue 47 sets. Injected safepoints
/// (`CompileOptions::safepoints`) poll at every back-edge, as their
/// streams count polls.
pub const POLL_WORK: u32 = 1 << 14;
/// The slot's record (slot loop, re-entry), its site, and whether the slot
/// is resuming it (its unstarted rest waits in never_ran).
const RREC: &str = "%rrec";
const RSITE: &str = "%rsite";
const RESTP: &str = "%restp";
/// The launch's first run ([`offsets::FRESH`]): no record, no rest.
const FRESHP: &str = "%freshp";
const L_RESUME: &str = "$resume";
const L_MORE: &str = "$more";
const L_ITEM: &str = "$item";
const L_BODY: &str = "$body";
const L_NEXT: &str = "$next_item";
const L_AFTER: &str = "$after_deopt";
const L_DONE: &str = "$exit_done";
const L_STOPPED: &str = "$stopped";

/// The operand addressing `off` bytes past the address in register `base`
/// (`[base]` when `off` is 0).
pub(super) fn mem(base: &str, off: i32) -> String {
    if off == 0 {
        format!("[{base}]")
    } else {
        format!("[{base}+{off}]")
    }
}
