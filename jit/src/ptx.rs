//! The PTX backend: verified bytecode → PTX text for NVIDIA GPUs (sm_70 and
//! newer), with the same slot-loop protocol as the CPU backend ([`crate::cpu`]):
//!
//! ```text
//! slot = ctaid.x * ntid.x + tid.x                  ; one slot per thread
//! entry:  [w, hi) = never_ran[slot]; if w < hi: goto item
//! claim:  lo = atom.add(cursor, chunk); if lo >= end: exit DONE
//! item:   if w == hi: goto claim
//!         if ld.relaxed.sys(control) != 0: never_ran[slot] = [w, hi); exit STOPPED
//!         <the kernel body for workitem w>
//! deopt:  save_area[slot][n] = (w, live values); fence; site word; count
//!         n += 1; if n == records_per_slot or safepoint: exit DEOPT
//!         w += 1; goto item
//! ```
//!
//! The lowering decisions — what is inlined, which classes a virtual call or
//! a type test matches, allocation headers, how sites in inlined code are
//! numbered — come from the same functions the CPU backend uses
//! (`crate::plan`), so a CPU and a PTX version of a kernel have the same
//! [`DeoptMetadata`] and the host replays either one's records unchanged.
//!
//! Locals and operand-stack slots are PTX virtual registers (one per local,
//! one per stack depth and kind, per inlined call), which `ptxas`
//! allocates; every deopt exit stores the site's frame state from them.
//! Nothing traps: a `trap` poisons the CUDA context, so every failed check
//! writes a record and the slot goes on (or returns).
//!
//! Memory: the heap image lives in device memory (`heap_base`), references
//! are 32-bit word offsets as on the host. The control word is in pinned,
//! mapped host memory and is read with `ld.relaxed.sys`, so the host can
//! raise a safepoint while the kernel runs. Allocation runs the shared-TLAB
//! protocol of `offload_tlab::tlab` entirely on the device: the fast path
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

use crate::JitError;
use crate::cpu::CompileOptions;
use crate::plan::{self, Inliner, TypeTest};
use crate::ptxlib;
use crate::spec::Speculations;
use offload_deopt::{Assumption, DeoptMetadata, Reason, SaveLayout, Speculation};
use offload_host_interp::Program;
use offload_ir::analysis::{FuncAnalysis, Value as FsValue};
use offload_ir::{Bci, FuncId, Inst, Kind, SiteId, Verified};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The PTX ISA version we emit: the lowest that has everything we use
/// (`ld.relaxed.sys`, `fence.acq_rel`, `atom` with `.sem`: 6.0;
/// `nanosleep`: 6.3), so drivers as old as CUDA 10.1 accept it.
pub const PTX_VERSION: &str = "6.3";
/// The target we emit for. Independent thread scheduling (sm_70) is what
/// makes spinning on a TLAB refill inside a warp safe; the same PTX is
/// assembled for sm_80 and sm_90 (`.target` must not exceed the `-arch`).
pub const PTX_TARGET: &str = "sm_70";

/// The launch context of a kernel on the device, `#[repr(C)]`: the CPU
/// [`crate::LaunchCtx`]'s fields where they mean the same, with device
/// addresses as `u64`, and what a grid needs besides (TLABs by group,
/// the device eden, the slot count, per-slot exit codes, counters).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCtx {
    /// The heap image's first byte; references are word offsets from here.
    pub heap_base: u64,
    /// The next unclaimed workitem (`i64`).
    pub cursor: u64,
    /// One past the last workitem.
    pub end: i64,
    /// Workitems per claim.
    pub chunk: i64,
    /// The control word (`u32`, pinned mapped host memory).
    pub control: u64,
    /// The save area: `records_per_slot` records of `record_words` words per slot.
    pub save_area: u64,
    /// Words per save record.
    pub record_words: u64,
    /// Per slot, two `i64`: the unstarted `[start, end)` of its chunk.
    pub never_ran: u64,
    /// Per slot, workitems it completed (`u64`).
    pub completed: u64,
    /// The kernel's captures, one raw 64-bit slot each.
    pub captures: u64,
    /// Save records per slot, at least 1.
    pub records_per_slot: u64,
    /// The TLABs: an array of `offload_tlab::SharedTlab`-layout records
    /// (state, generation, refills; 24 bytes each).
    pub tlabs: u64,
    /// Slots per TLAB (slot `s` uses TLAB `s / tlab_group`); 0: no TLABs,
    /// every object comes straight from eden.
    pub tlab_group: u64,
    /// The device eden: `{ top, limit }`, heap words.
    pub eden: u64,
    /// Objects of more words than this come straight from eden.
    pub large_words: u64,
    /// Slots (threads) of the launch; threads beyond return at once.
    pub slots: u64,
    /// Words a refill carves (at least the object).
    pub tlab_words: u64,
    /// Per slot, the `EXIT_*` code of its last run (`u32`).
    pub exits: u64,
    /// Counters (`u64`): `[deopts, refills, refill waits, eden failures]`.
    pub stats: u64,
    /// Per slot, the state of injected safepoints when it last polled
    /// (`u64`, 0 before its first poll): kept across relaunches so that the
    /// stream goes on (see [`crate::cpu::SafepointInjection`]).
    pub inject: u64,
}

/// Byte offsets of the [`DeviceCtx`] fields.
pub mod offsets {
    #![allow(missing_docs)]
    pub const HEAP_BASE: u32 = 0;
    pub const CURSOR: u32 = 8;
    pub const END: u32 = 16;
    pub const CHUNK: u32 = 24;
    pub const CONTROL: u32 = 32;
    pub const SAVE_AREA: u32 = 40;
    pub const RECORD_WORDS: u32 = 48;
    pub const NEVER_RAN: u32 = 56;
    pub const COMPLETED: u32 = 64;
    pub const CAPTURES: u32 = 72;
    pub const RECORDS_PER_SLOT: u32 = 80;
    pub const TLABS: u32 = 88;
    pub const TLAB_GROUP: u32 = 96;
    pub const EDEN: u32 = 104;
    pub const LARGE_WORDS: u32 = 112;
    pub const SLOTS: u32 = 120;
    pub const TLAB_WORDS: u32 = 128;
    pub const EXITS: u32 = 136;
    pub const STATS: u32 = 144;
    pub const INJECT: u32 = 152;
}

/// Bytes of one device TLAB record (state, generation, refills).
pub const DEVICE_TLAB_BYTES: u64 = 24;

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
    let analysis = prog
        .analysis(k)
        .ok_or_else(|| JitError::Unsupported("abstract".into()))?;
    let meta = DeoptMetadata::new(analysis, k, version);
    plan::check_options(&meta, &opts)?;
    let name = format!("offload_k{}_v{version}", k.0);
    let mut lw = Lower {
        v,
        prog,
        meta,
        code: String::new(),
        regs: Vec::new(),
        next: [0; 5],
        labels: 0,
        frames: 0,
        cur: Frame::new(k, analysis, 0),
        outer: Vec::new(),
        inliner: Inliner::default(),
        opts,
        math: BTreeSet::new(),
        spec,
    };
    lw.build()?;
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
    if !lw.math.is_empty() {
        text.push_str(&ptxlib::definitions(lw.math.iter().copied()));
        text.push('\n');
    }
    let _ = writeln!(text, ".visible .entry {name}(\n\t.param .u64 p_ctx\n)\n{{");
    for (i, n) in lw.next.iter().enumerate() {
        if *n > 0 {
            let (ty, pre) = TEMP_CLASSES[i];
            let _ = writeln!(text, "\t.reg {ty} {pre}<{n}>;");
        }
    }
    for (name, ty) in &lw.regs {
        let _ = writeln!(text, "\t.reg {ty} {name};");
    }
    text.push_str(&lw.code);
    text.push_str("}\n");
    Ok(PtxKernel {
        kernel: k,
        version,
        name,
        text,
        meta: lw.meta,
        compile_time: t0.elapsed(),
    })
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

/// A function being lowered: the kernel, or a function inlined into it.
struct Frame<'a> {
    func: FuncId,
    analysis: &'a FuncAnalysis,
    /// Register-name prefix of this inline instance.
    id: u32,
    locals: Vec<String>,
    stack: HashMap<(usize, Kind), String>,
    depth: usize,
    /// The label of each reachable leader.
    blocks: HashMap<Bci, String>,
    /// Back-edge poll stubs waiting to be emitted: (label, target bci).
    pending_polls: Vec<(String, Bci)>,
    /// Where `ret` goes in an inlined function: the continuation label and
    /// the result register. `None` for the kernel.
    ret_to: Option<(String, Option<String>)>,
}

impl<'a> Frame<'a> {
    fn new(func: FuncId, analysis: &'a FuncAnalysis, id: u32) -> Frame<'a> {
        Frame {
            func,
            analysis,
            id,
            locals: Vec::new(),
            stack: HashMap::new(),
            depth: 0,
            blocks: HashMap::new(),
            pending_polls: Vec::new(),
            ret_to: None,
        }
    }
}

struct Outer<'a> {
    frame: Frame<'a>,
    call_bci: Bci,
}

struct Lower<'a> {
    v: &'a Verified,
    prog: &'a Program,
    meta: DeoptMetadata,
    code: String,
    /// Named registers: (name, type).
    regs: Vec<(String, &'static str)>,
    /// Next temporary of each class.
    next: [u32; 5],
    labels: u32,
    frames: u32,
    cur: Frame<'a>,
    outer: Vec<Outer<'a>>,
    inliner: Inliner,
    opts: CompileOptions,
    /// Math-library routines the kernel calls.
    math: BTreeSet<&'static str>,
    spec: &'a Speculations,
}

// Named registers of the slot loop.
const CTX: &str = "%ctx";
const SLOT: &str = "%slot";
const HEAP: &str = "%heap";
const CONTROL: &str = "%control";
const W: &str = "%w";
const HI: &str = "%hi";
const DONE: &str = "%done";
const NREC: &str = "%nrec";
const TLAB: &str = "%tlab";
const LARGE: &str = "%large";
const EDEN: &str = "%eden";
const POLLS: &str = "%polls";
const L_CLAIM: &str = "$claim";
const L_ITEM: &str = "$item";
const L_NEXT: &str = "$next_item";
const L_AFTER: &str = "$after_deopt";
const L_DONE: &str = "$exit_done";
const L_STOPPED: &str = "$stopped";

impl Lower<'_> {
    fn emit(&mut self, line: impl AsRef<str>) {
        self.code.push('\t');
        self.code.push_str(line.as_ref());
        self.code.push('\n');
    }

    fn label(&mut self, l: &str) {
        self.code.push_str(l);
        self.code.push_str(":\n");
    }

    fn new_label(&mut self) -> String {
        self.labels += 1;
        format!("$L{}", self.labels)
    }

    fn t(&mut self, c: Cls) -> String {
        let n = &mut self.next[c as usize];
        *n += 1;
        format!("{}{}", TEMP_CLASSES[c as usize].1, *n - 1)
    }

    fn named(&mut self, name: String, ty: &'static str) -> String {
        self.regs.push((name.clone(), ty));
        name
    }

    fn stack_var(&mut self, depth: usize, kind: Kind) -> String {
        if let Some(v) = self.cur.stack.get(&(depth, kind)) {
            return v.clone();
        }
        let suffix = match kind {
            Kind::I32 => "i",
            Kind::Ref => "r",
            Kind::I64 => "l",
            Kind::F32 => "f",
            Kind::F64 => "d",
        };
        let name = format!("%s{}_{depth}{suffix}", self.cur.id);
        let name = self.named(name, reg_type(kind));
        self.cur.stack.insert((depth, kind), name.clone());
        name
    }

    fn push(&mut self, kind: Kind, x: &str) {
        let var = self.stack_var(self.cur.depth, kind);
        if var != x {
            self.emit(format!("mov.{} {var}, {x};", mov_ty(kind)));
        }
        self.cur.depth += 1;
    }

    /// The register holding the top value (valid until it is overwritten).
    fn pop(&mut self, kind: Kind) -> String {
        self.cur.depth -= 1;
        self.stack_var(self.cur.depth, kind)
    }

    fn kind_at(&self, bci: Bci, from_top: usize) -> Kind {
        let fr = self.v.types(self.cur.func).frames[bci as usize]
            .as_ref()
            .expect("reachable");
        fr.stack[fr.stack.len() - 1 - from_top].kind()
    }

    /// `setp` then `selp` into a fresh 0/1 `b32`.
    fn setp_i32(&mut self, cmp: &str, a: &str, b: &str) -> String {
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.{cmp} {p}, {a}, {b};"));
        let r = self.t(Cls::B32);
        self.emit(format!("selp.b32 {r}, 1, 0, {p};"));
        r
    }

    /// The address of this slot's injected-safepoint state.
    fn inject_addr(&mut self) -> String {
        let base = self.ld_ctx(Cls::B64, offsets::INJECT);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {SLOT}, 8, {base};"));
        at
    }

    fn ld_ctx(&mut self, c: Cls, off: u32) -> String {
        let r = self.t(c);
        self.emit(format!("ld.u64 {r}, [{CTX}+{off}];"));
        r
    }

    fn build(&mut self) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        for (n, ty) in [
            (CTX, ".b64"),
            (SLOT, ".b64"),
            (HEAP, ".b64"),
            (CONTROL, ".b64"),
            (W, ".b64"),
            (HI, ".b64"),
            (DONE, ".b64"),
            (NREC, ".b64"),
            (TLAB, ".b64"),
            (LARGE, ".b64"),
            (EDEN, ".b64"),
        ] {
            self.named(n.into(), ty);
        }
        self.emit(format!("ld.param.u64 {CTX}, [p_ctx];"));
        let (a, b, c) = (self.t(Cls::B32), self.t(Cls::B32), self.t(Cls::B32));
        self.emit(format!("mov.u32 {a}, %ctaid.x;"));
        self.emit(format!("mov.u32 {b}, %ntid.x;"));
        self.emit(format!("mov.u32 {c}, %tid.x;"));
        self.emit(format!("mul.wide.u32 {SLOT}, {a}, {b};"));
        let t = self.t(Cls::B64);
        self.emit(format!("cvt.u64.u32 {t}, {c};"));
        self.emit(format!("add.u64 {SLOT}, {SLOT}, {t};"));
        let n = self.ld_ctx(Cls::B64, offsets::SLOTS);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {SLOT}, {n};"));
        self.emit(format!("@{p} bra $idle;"));
        self.emit(format!("ld.u64 {HEAP}, [{CTX}+{}];", offsets::HEAP_BASE));
        self.emit(format!("ld.u64 {CONTROL}, [{CTX}+{}];", offsets::CONTROL));
        self.emit(format!("ld.u64 {EDEN}, [{CTX}+{}];", offsets::EDEN));
        self.emit(format!("ld.u64 {LARGE}, [{CTX}+{}];", offsets::LARGE_WORDS));
        // TLAB of this slot: tlabs + (slot / group) * 24, or none.
        let group = self.ld_ctx(Cls::B64, offsets::TLAB_GROUP);
        let p = self.t(Cls::Pred);
        let l_tl = self.new_label();
        self.emit(format!("mov.u64 {TLAB}, 0;"));
        self.emit(format!("setp.eq.u64 {p}, {group}, 0;"));
        self.emit(format!("@{p} bra {l_tl};"));
        let base = self.ld_ctx(Cls::B64, offsets::TLABS);
        let q = self.t(Cls::B64);
        self.emit(format!("div.u64 {q}, {SLOT}, {group};"));
        self.emit(format!(
            "mad.lo.u64 {TLAB}, {q}, {}, {base};",
            DEVICE_TLAB_BYTES
        ));
        self.label(&l_tl);
        // Captures.
        let caps = self.ld_ctx(Cls::B64, offsets::CAPTURES);
        let mut captures = Vec::new();
        for (i, p) in f.params().iter().enumerate().skip(1) {
            let raw = self.t(Cls::B64);
            self.emit(format!("ld.u64 {raw}, [{caps}+{}];", (i - 1) * 8));
            let name = self.named(format!("%cap{i}"), reg_type(p.ty.kind()));
            self.unpack_raw(p.ty.kind(), &raw, &name);
            captures.push(name);
        }
        self.emit(format!("mov.u64 {DONE}, 0;"));
        self.emit(format!("mov.u64 {NREC}, 0;"));
        if let Some(si) = self.opts.safepoints {
            self.named(POLLS.into(), ".b64");
            match si.seed {
                Some(seed) => {
                    let s0 = (seed | 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let t = self.t(Cls::B64);
                    self.emit(format!(
                        "mul.lo.u64 {t}, {SLOT}, {:#x};",
                        0x2545_F491_4F6C_DD1Du64
                    ));
                    self.emit(format!("xor.b64 {t}, {t}, {s0:#x};"));
                    self.emit(format!("or.b64 {POLLS}, {t}, 1;"));
                }
                None => self.emit(format!("mov.u64 {POLLS}, 0;")),
            }
            // The stream goes on from the slot's last launch, if it polled.
            let (at, saved, fresh) = (self.inject_addr(), self.t(Cls::B64), self.t(Cls::Pred));
            self.emit(format!("ld.u64 {saved}, [{at}];"));
            self.emit(format!("setp.eq.u64 {fresh}, {saved}, 0;"));
            self.emit(format!("selp.b64 {POLLS}, {POLLS}, {saved}, {fresh};"));
        }
        for (i, l) in f.locals.iter().enumerate() {
            let name = self.named(format!("%l0_{i}"), reg_type(l.ty.kind()));
            self.cur.locals.push(name);
        }
        // Resume a stopped chunk first.
        let nr = self.ld_ctx(Cls::B64, offsets::NEVER_RAN);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {SLOT}, 16, {nr};"));
        self.emit(format!("ld.u64 {W}, [{at}];"));
        self.emit(format!("ld.u64 {HI}, [{at}+8];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {W}, {HI};"));
        self.emit(format!("@{p} bra {L_ITEM};"));
        // claim
        self.label(L_CLAIM);
        let cursor = self.ld_ctx(Cls::B64, offsets::CURSOR);
        let chunk = self.ld_ctx(Cls::B64, offsets::CHUNK);
        let end = self.ld_ctx(Cls::B64, offsets::END);
        let lo = self.t(Cls::B64);
        self.emit(format!("atom.add.u64 {lo}, [{cursor}], {chunk};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.s64 {p}, {lo}, {end};"));
        self.emit(format!("@{p} bra {L_DONE};"));
        self.emit(format!("add.s64 {HI}, {lo}, {chunk};"));
        self.emit(format!("min.s64 {HI}, {HI}, {end};"));
        self.emit(format!("mov.u64 {W}, {lo};"));
        // item
        self.label(L_ITEM);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.s64 {p}, {W}, {HI};"));
        self.emit(format!("@{p} bra {L_CLAIM};"));
        let cw = self.t(Cls::B32);
        self.emit(format!("ld.relaxed.sys.u32 {cw}, [{CONTROL}];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
        self.emit(format!("@{p} bra {L_STOPPED};"));
        // Workitem entry: parameters, captures, zeroed locals.
        let l0 = self.cur.locals[0].clone();
        self.emit(format!("cvt.u32.u64 {l0}, {W};"));
        for i in 1..f.locals.len() {
            let var = self.cur.locals[i].clone();
            let k = f.locals[i].ty.kind();
            if i < f.param_count as usize {
                let c = captures[i - 1].clone();
                self.emit(format!("mov.{} {var}, {c};", mov_ty(k)));
            } else {
                self.zero(k, &var);
            }
        }
        self.make_blocks();
        self.body()?;
        // next_item
        self.label(L_NEXT);
        self.emit(format!("add.s64 {DONE}, {DONE}, 1;"));
        self.emit(format!("add.s64 {W}, {W}, 1;"));
        self.emit(format!("bra {L_ITEM};"));
        // after_deopt
        self.label(L_AFTER);
        self.emit(format!("add.s64 {NREC}, {NREC}, 1;"));
        self.emit(format!("add.s64 {W}, {W}, 1;"));
        let per = self.ld_ctx(Cls::B64, offsets::RECORDS_PER_SLOT);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {NREC}, {per};"));
        self.emit(format!("@{p} bra {L_ITEM};"));
        self.exit(W, HI, crate::ctx::EXIT_DEOPT);
        self.label(L_DONE);
        self.exit("0", "0", crate::ctx::EXIT_DONE);
        self.label(L_STOPPED);
        self.exit(W, HI, crate::ctx::EXIT_STOPPED);
        self.label("$idle");
        self.emit("ret;");
        Ok(())
    }

    /// `x` in a `b64` register (immediates are moved into one).
    fn reg64(&mut self, x: &str) -> String {
        if x.starts_with('%') {
            return x.to_string();
        }
        let r = self.t(Cls::B64);
        self.emit(format!("mov.b64 {r}, {x};"));
        r
    }

    fn zero(&mut self, k: Kind, dst: &str) {
        match k {
            Kind::F32 => self.emit(format!("mov.f32 {dst}, 0f00000000;")),
            Kind::F64 => self.emit(format!("mov.f64 {dst}, 0d0000000000000000;")),
            _ => self.emit(format!("mov.{} {dst}, 0;", mov_ty(k))),
        }
    }

    /// Raw 64-bit slot `raw` as a value of kind `k`, into `dst`.
    fn unpack_raw(&mut self, k: Kind, raw: &str, dst: &str) {
        match k {
            Kind::I64 => self.emit(format!("mov.b64 {dst}, {raw};")),
            Kind::I32 | Kind::Ref => self.emit(format!("cvt.u32.u64 {dst}, {raw};")),
            Kind::F32 => {
                let lo = self.t(Cls::B32);
                self.emit(format!("cvt.u32.u64 {lo}, {raw};"));
                self.emit(format!("mov.b32 {dst}, {lo};"));
            }
            Kind::F64 => self.emit(format!("mov.b64 {dst}, {raw};")),
        }
    }

    /// A value of kind `k` as a raw 64-bit slot.
    fn pack_raw(&mut self, k: Kind, x: &str) -> String {
        let r = self.t(Cls::B64);
        match k {
            Kind::I64 | Kind::F64 => self.emit(format!("mov.b64 {r}, {x};")),
            Kind::I32 | Kind::Ref => self.emit(format!("cvt.u64.u32 {r}, {x};")),
            Kind::F32 => {
                let b = self.t(Cls::B32);
                self.emit(format!("mov.b32 {b}, {x};"));
                self.emit(format!("cvt.u64.u32 {r}, {b};"));
            }
        }
        r
    }

    /// Store this slot's never-ran range, completed count and exit code,
    /// and return.
    fn exit(&mut self, nr_lo: &str, nr_hi: &str, code: u32) {
        let (nr_lo, nr_hi) = (self.reg64(nr_lo), self.reg64(nr_hi));
        let nr = self.ld_ctx(Cls::B64, offsets::NEVER_RAN);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {SLOT}, 16, {nr};"));
        self.emit(format!("st.u64 [{at}], {nr_lo};"));
        self.emit(format!("st.u64 [{at}+8], {nr_hi};"));
        let comp = self.ld_ctx(Cls::B64, offsets::COMPLETED);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {SLOT}, 8, {comp};"));
        self.emit(format!("st.u64 [{at}], {DONE};"));
        let ex = self.ld_ctx(Cls::B64, offsets::EXITS);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {SLOT}, 4, {ex};"));
        let c = self.t(Cls::B32);
        self.emit(format!("mov.b32 {c}, {code};"));
        self.emit(format!("st.u32 [{at}], {c};"));
        self.emit("ret;");
    }

    /// A deopt exit for the site at `bci` (whose frame state is the current
    /// registers) with `reason`, at the current point of the code.
    fn deopt_here(&mut self, bci: Bci, reason: Reason) {
        let id = self.site_id(bci);
        let site = self.meta.site(id).expect("created").clone();
        debug_assert!(site.reasons.contains(&reason), "{reason:?} at {bci}");
        self.emit(format!(
            "// deopt: site {} ({}) at bci {bci}",
            site.id.0,
            reason.name()
        ));
        let area = self.ld_ctx(Cls::B64, offsets::SAVE_AREA);
        let words = self.ld_ctx(Cls::B64, offsets::RECORD_WORDS);
        let per = self.ld_ctx(Cls::B64, offsets::RECORDS_PER_SLOT);
        let index = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {index}, {SLOT}, {per}, {NREC};"));
        let rw = self.t(Cls::B64);
        self.emit(format!("mul.lo.u64 {rw}, {index}, {words};"));
        let rec = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {rec}, {rw}, 8, {area};"));
        self.emit(format!(
            "st.u64 [{rec}+{}], {W};",
            SaveLayout::WORKITEM_WORD * 8
        ));
        for (fi, s) in site.frame_slots() {
            let k = s.ty.kind();
            let var = if fi < self.outer.len() {
                let fr = &self.outer[fi].frame;
                match s.value {
                    FsValue::Local(l) => fr.locals[l.index()].clone(),
                    FsValue::Stack(i) => fr
                        .stack
                        .get(&(i as usize, k))
                        .expect("a caller's stack value was pushed before its call")
                        .clone(),
                }
            } else {
                match s.value {
                    FsValue::Local(l) => self.cur.locals[l.index()].clone(),
                    FsValue::Stack(i) => self.stack_var(i as usize, k),
                }
            };
            let raw = self.pack_raw(k, &var);
            self.emit(format!("st.u64 [{rec}+{}], {raw};", s.word * 8));
        }
        // The values before the site word: a reader that sees the word sees
        // the frame.
        self.emit("fence.acq_rel.gpu;");
        let sw = self.reg64(&format!("{:#x}", SaveLayout::site_word(site.id, reason)));
        self.emit(format!(
            "st.relaxed.gpu.u64 [{rec}+{}], {sw};",
            SaveLayout::SITE_WORD * 8
        ));
        let stats = self.ld_ctx(Cls::B64, offsets::STATS);
        self.emit(format!("red.add.u64 [{stats}], 1;"));
        if reason == Reason::Safepoint {
            let w1 = self.t(Cls::B64);
            self.emit(format!("add.s64 {w1}, {W}, 1;"));
            self.exit(&w1, HI, crate::ctx::EXIT_DEOPT);
        } else {
            self.emit(format!("bra {L_AFTER};"));
        }
    }

    fn site_id(&mut self, bci: Bci) -> SiteId {
        let outer: Vec<(FuncId, &FuncAnalysis, Bci)> = self
            .outer
            .iter()
            .map(|o| (o.frame.func, o.frame.analysis, o.call_bci))
            .collect();
        self.inliner.site(
            self.prog,
            &mut self.meta,
            &outer,
            self.cur.func,
            self.cur.analysis,
            bci,
        )
    }

    fn make_blocks(&mut self) {
        let types_ = self.v.types(self.cur.func);
        for blk in &self.cur.analysis.cfg.blocks {
            if types_.frames[blk.start as usize].is_some() {
                let l = format!("$B{}_{}", self.cur.id, blk.start);
                self.cur.blocks.insert(blk.start, l);
            }
        }
    }

    /// A conditional branch the profile saw go one way only (`taken`): that
    /// way is compiled, the other is a deopt exit (`Unreached`) with the
    /// frame at the branch's entry (the condition `x` still on the stack).
    fn speculated_branch(&mut self, inst: Inst, bci: Bci, target: Bci, x: &str, taken: bool) {
        self.speculate(bci, Assumption::Branch { taken });
        let kept = if taken {
            self.edge(bci, target)
        } else {
            self.cur.blocks[&(bci + 1)].clone()
        };
        // `p`: the branch would jump.
        let p = self.t(Cls::Pred);
        let cc = if matches!(inst, Inst::BrIf { .. } | Inst::BrNonNull { .. }) {
            "ne"
        } else {
            "eq"
        };
        self.emit(format!("setp.{cc}.u32 {p}, {x}, 0;"));
        let neg = if taken { "" } else { "!" };
        self.emit(format!("@{neg}{p} bra {kept};"));
        self.cur.depth += 1;
        self.deopt_here(bci, Reason::Unreached);
        self.cur.depth -= 1;
    }

    /// Branch to a deopt exit if predicate `p` holds.
    fn deopt_if(&mut self, p: &str, bci: Bci, reason: Reason) {
        let cont = self.new_label();
        self.emit(format!("@!{p} bra {cont};"));
        self.deopt_here(bci, reason);
        self.label(&cont);
    }

    /// A call into the math library ([`ptxlib`]). Sine and cosine first hand
    /// arguments beyond the device's reduction to the host (`devlimit`).
    fn transcendental(&mut self, r: ptxlib::Routine, bci: Bci) {
        let (k, ty) = if r.f64 {
            (Kind::F64, "f64")
        } else {
            (Kind::F32, "f32")
        };
        let b = (r.arity == 2).then(|| self.pop(k));
        let a = self.pop(k);
        if r.trig {
            let (limit, inf) = if r.f64 {
                (
                    format!("0d{:016X}", ptxlib::TRIG_HOST_F64.to_bits()),
                    "0d7FF0000000000000".to_string(),
                )
            } else {
                (
                    format!("0f{:08X}", ptxlib::TRIG_HOST_F32.to_bits()),
                    "0f7F800000".to_string(),
                )
            };
            let abs = self.t(cls(k));
            self.emit(format!("abs.{ty} {abs}, {a};"));
            let (big, finite) = (self.t(Cls::Pred), self.t(Cls::Pred));
            self.emit(format!("setp.ge.{ty} {big}, {abs}, {limit};"));
            self.emit(format!("setp.lt.{ty} {finite}, {abs}, {inf};"));
            self.emit(format!("and.pred {big}, {big}, {finite};"));
            self.cur.depth += 1; // the host re-executes the instruction
            self.deopt_if(&big, bci, Reason::DeviceLimit);
            self.cur.depth -= 1;
        }
        self.math.insert(r.name);
        let mut args = vec![a];
        args.extend(b);
        if let Some(sel) = r.selector {
            args.push(sel.to_string());
        }
        let res = self.t(cls(k));
        self.emit(format!("call ({res}), {}, ({});", r.name, args.join(", ")));
        self.push(k, &res);
    }

    /// Deopt if `r` is null: a null check, or where the profile never saw
    /// null here, a guard of that speculation.
    fn null_check(&mut self, r: &str, bci: Bci) {
        let reason = self.null_reason(bci);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u32 {p}, {r}, 0;"));
        self.deopt_if(&p, bci, reason);
    }

    /// [`Lower::null_check`], unless the operand `from_top` below the top
    /// of the stack at `bci` cannot be null (`offload_ir::refs`).
    fn null_check_unless_known(&mut self, r: &str, bci: Bci, from_top: usize) {
        if !self.cur.analysis.non_null(bci, from_top) {
            self.null_check(r, bci);
        }
    }

    /// Record the speculation `assumed` at `bci` of the current function,
    /// guarded by that instruction's site (in this inlining chain).
    fn speculate(&mut self, bci: Bci, assumed: Assumption) {
        let id = self.site_id(bci);
        let spec = Speculation {
            func: self.cur.func,
            bci,
            assumed,
        };
        self.meta.speculate(id, spec);
    }

    /// The reason a null at `bci` deopts with (recording the non-null
    /// speculation if there is one).
    fn null_reason(&mut self, bci: Bci) -> Reason {
        let (reason, assumed) = plan::null_check(self.spec, self.cur.func, bci);
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        reason
    }

    fn obj_addr(&mut self, r: &str) -> String {
        let a = self.t(Cls::B64);
        self.emit(format!("mul.wide.u32 {a}, {r}, 8;"));
        self.emit(format!("add.u64 {a}, {a}, {HEAP};"));
        a
    }

    /// The checked address of element `idx` of array `r`, which is the
    /// operand `from_top` below the top of the stack at `bci`.
    fn elem_addr(&mut self, r: &str, idx: &str, size: u32, bci: Bci, from_top: usize) -> String {
        self.null_check_unless_known(r, bci, from_top);
        let base = self.obj_addr(r);
        let len = self.t(Cls::B32);
        self.emit(format!("ld.u32 {len}, [{base}+4];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u32 {p}, {idx}, {len};"));
        self.deopt_if(&p, bci, Reason::BoundsCheck);
        let a = self.t(Cls::B64);
        self.emit(format!("mul.wide.u32 {a}, {idx}, {size};"));
        self.emit(format!("add.u64 {a}, {a}, {base};"));
        self.emit(format!("add.u64 {a}, {a}, 8;"));
        a
    }

    /// Whether `r` (which may be null: heap word 0 is reserved and
    /// readable; the caller masks) is an instance of `ty`, as a predicate.
    fn type_test(&mut self, r: &str, ty: offload_ir::Type) -> String {
        let base = self.obj_addr(r);
        let tag = self.t(Cls::B32);
        self.emit(format!("ld.u32 {tag}, [{base}];"));
        let acc = self.t(Cls::Pred);
        match plan::type_test(self.prog, ty) {
            TypeTest::Classes(ids) => {
                self.emit(format!("setp.ne.u32 {acc}, {tag}, {tag};"));
                for id in ids {
                    self.emit(format!("setp.eq.or.u32 {acc}, {tag}, {id}, {acc};"));
                }
            }
            TypeTest::Tag(want) => self.emit(format!("setp.eq.u32 {acc}, {tag}, {want};")),
            TypeTest::Always => self.emit(format!("setp.eq.u32 {acc}, {tag}, {tag};")),
            TypeTest::Never => self.emit(format!("setp.ne.u32 {acc}, {tag}, {tag};")),
        }
        acc
    }

    /// Write a filler header over words `[start, end)` (`b64` registers,
    /// `start < end`).
    fn fill(&mut self, start: &str, end: &str) {
        let a = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {a}, {start}, 8, {HEAP};"));
        let n = self.t(Cls::B64);
        self.emit(format!("sub.u64 {n}, {end}, {start};"));
        let bytes = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {bytes}, {n};"));
        self.emit(format!("shl.b32 {bytes}, {bytes}, 3;"));
        let tag = self.t(Cls::B32);
        self.emit(format!(
            "mov.b32 {tag}, {};",
            offload_tlab::layout::FILLER_TAG
        ));
        self.emit(format!("st.u32 [{a}], {tag};"));
        self.emit(format!("st.u32 [{a}+4], {bytes};"));
    }

    /// Allocate `words` (`b64`) heap words with header `(tag, word1)`
    /// (`b32`): the shared-TLAB protocol on the device. Deopts with
    /// `AllocationFailure` when eden is exhausted. Returns the reference.
    fn allocate(&mut self, bci: Bci, tag: &str, word1: &str, words: &str) -> String {
        let got = self.t(Cls::B64);
        let l_got = self.new_label();
        let l_large = self.new_label();
        let l_retry = self.new_label();
        let l_fail = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("// allocate at bci {bci}"));
        self.emit(format!("setp.eq.u64 {p}, {TLAB}, 0;"));
        self.emit(format!("setp.gt.or.u64 {p}, {words}, {LARGE}, {p};"));
        self.emit(format!("@{p} bra {l_large};"));
        // 1. generation; 2. the add.
        self.label(&l_retry);
        let g = self.t(Cls::B64);
        self.emit(format!("ld.acquire.gpu.u64 {g}, [{TLAB}+8];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.lt.s64 {p}, {g}, 0;")); // FAILED is bit 63
        self.emit(format!("@{p} bra {l_fail};"));
        let old = self.t(Cls::B64);
        self.emit(format!(
            "atom.acq_rel.gpu.add.u64 {old}, [{TLAB}], {words};"
        ));
        let top = self.t(Cls::B64);
        let end = self.t(Cls::B64);
        self.emit(format!("and.b64 {top}, {old}, 4294967295;"));
        self.emit(format!("shr.u64 {end}, {old}, 32;"));
        let nt = self.t(Cls::B64);
        self.emit(format!("add.u64 {nt}, {top}, {words};"));
        self.emit(format!("mov.u64 {got}, {top};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {nt}, {end};"));
        self.emit(format!("@{p} bra {l_got};"));
        // 4. another allocator is refilling: wait for the generation.
        let l_refill = self.new_label();
        let l_wait = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {top}, {end};"));
        self.emit(format!("@{p} bra {l_refill};"));
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.u64 {stats}, [{CTX}+{}];", offsets::STATS));
        self.emit(format!("red.add.u64 [{stats}+16], 1;"));
        self.label(&l_wait);
        self.emit("nanosleep.u32 100;");
        let g2 = self.t(Cls::B64);
        self.emit(format!("ld.acquire.gpu.u64 {g2}, [{TLAB}+8];"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {g2}, {g};"));
        self.emit(format!("@{p} bra {l_wait};"));
        self.emit(format!("bra {l_retry};"));
        // 3. the designated refiller: fill the gap, carve, publish.
        self.label(&l_refill);
        let l_carve = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {top}, {end};"));
        self.emit(format!("@{p} bra {l_carve};"));
        self.fill(&top, &end);
        self.label(&l_carve);
        let want = self.t(Cls::B64);
        self.emit(format!("ld.u64 {want}, [{CTX}+{}];", offsets::TLAB_WORDS));
        self.emit(format!("max.u64 {want}, {want}, {words};"));
        let (start, new_end) = self.carve(&want, &l_fail, Some(TLAB));
        let st = self.t(Cls::B64);
        self.emit(format!("add.u64 {st}, {start}, {words};"));
        self.emit(format!("shl.b64 {new_end}, {new_end}, 32;"));
        self.emit(format!("or.b64 {st}, {st}, {new_end};"));
        let x = self.t(Cls::B64);
        self.emit(format!("atom.acq_rel.gpu.exch.b64 {x}, [{TLAB}], {st};"));
        self.emit(format!("red.add.u64 [{TLAB}+16], 1;"));
        self.emit(format!("red.release.gpu.add.u64 [{TLAB}+8], 1;"));
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.u64 {stats}, [{CTX}+{}];", offsets::STATS));
        self.emit(format!("red.add.u64 [{stats}+8], 1;"));
        self.emit(format!("mov.u64 {got}, {start};"));
        self.emit(format!("bra {l_got};"));
        // Large objects and TLAB-less policies: straight from eden.
        self.label(&l_large);
        let (start, _) = self.carve(words, &l_fail, None);
        self.emit(format!("mov.u64 {got}, {start};"));
        self.emit(format!("bra {l_got};"));
        // Eden exhausted.
        self.label(&l_fail);
        self.deopt_here(bci, Reason::AllocationFailure);
        // The object is at `got`: its memory is zero; write the header.
        self.label(&l_got);
        let a = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {a}, {got}, 8, {HEAP};"));
        self.emit(format!("st.u32 [{a}], {tag};"));
        self.emit(format!("st.u32 [{a}+4], {word1};"));
        let r = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {r}, {got};"));
        r
    }

    /// Carve `n` words from the device eden: `(start, end)` registers, or a
    /// jump to `fail`. The one carve that crosses the limit fills the rest
    /// of eden (so the heap parses) and, for a TLAB refill, sets its FAILED
    /// bit (waiters see the generation change and fail too).
    fn carve(&mut self, n: &str, fail: &str, tlab: Option<&str>) -> (String, String) {
        let start = self.t(Cls::B64);
        self.emit(format!("atom.add.u64 {start}, [{EDEN}], {n};"));
        let limit = self.t(Cls::B64);
        self.emit(format!("ld.u64 {limit}, [{EDEN}+8];"));
        let end = self.t(Cls::B64);
        self.emit(format!("add.u64 {end}, {start}, {n};"));
        let ok = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.u64 {p}, {end}, {limit};"));
        self.emit(format!("@{p} bra {ok};"));
        let skip = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ge.u64 {p}, {start}, {limit};"));
        self.emit(format!("@{p} bra {skip};"));
        self.fill(&start, &limit);
        self.label(&skip);
        if let Some(t) = tlab {
            self.emit(format!(
                "red.release.gpu.or.b64 [{t}+8], {:#x};",
                offload_tlab::FAILED
            ));
        }
        let stats = self.t(Cls::B64);
        self.emit(format!("ld.u64 {stats}, [{CTX}+{}];", offsets::STATS));
        self.emit(format!("red.add.u64 [{stats}+24], 1;"));
        self.emit(format!("bra {fail};"));
        self.label(&ok);
        (start, end)
    }

    fn body(&mut self) -> Result<(), JitError> {
        let f = self.v.func(self.cur.func);
        let types_ = self.v.types(self.cur.func);
        let first = self.cur.blocks[&0].clone();
        self.emit(format!("bra {first};"));
        for (bci, &inst) in f.body.iter().enumerate() {
            let bci = bci as Bci;
            let Some(frame) = types_.frames[bci as usize].as_ref() else {
                continue;
            };
            if let Some(l) = self.cur.blocks.get(&bci).cloned() {
                self.label(&l);
            }
            self.cur.depth = frame.stack.len();
            if let Some(inj) = self.opts.inject
                && self.outer.is_empty()
                && inj.site_bci == bci
            {
                let m = self.t(Cls::B64);
                self.emit(format!("rem.s64 {m}, {W}, {};", inj.modulus));
                let p = self.t(Cls::Pred);
                self.emit(format!("setp.ne.s64 {p}, {m}, {};", inj.remainder));
                let reason = self
                    .meta
                    .site_at(bci)
                    .expect("checked at compile start")
                    .reasons[0];
                let cont = self.new_label();
                self.emit(format!("@{p} bra {cont};"));
                self.deopt_here(bci, reason);
                self.label(&cont);
            }
            if self.inst(bci, inst)? {
                self.flush_polls();
            }
        }
        Ok(())
    }

    /// The label to branch to for `target`: a poll stub when the edge goes
    /// backwards.
    fn edge(&mut self, from: Bci, target: Bci) -> String {
        let dest = self.cur.blocks[&target].clone();
        if target > from || self.opts.no_polls {
            return dest;
        }
        let poll = self.new_label();
        self.cur.pending_polls.push((poll.clone(), target));
        poll
    }

    /// Emit the poll stubs of the back-edges just emitted: read the control
    /// word; on a safepoint request deopt at the loop header.
    fn flush_polls(&mut self) {
        for (poll, target) in std::mem::take(&mut self.cur.pending_polls) {
            let dest = self.cur.blocks[&target].clone();
            self.label(&poll);
            let cw = self.t(Cls::B32);
            self.emit(format!("ld.relaxed.sys.u32 {cw}, [{CONTROL}];"));
            self.emit(format!(
                "and.b32 {cw}, {cw}, {};",
                crate::ctx::CONTROL_SAFEPOINT
            ));
            let p = self.t(Cls::Pred);
            self.emit(format!("setp.ne.u32 {p}, {cw}, 0;"));
            if let Some(si) = self.opts.safepoints {
                if si.seed.is_some() {
                    let a = self.t(Cls::B64);
                    self.emit(format!("shl.b64 {a}, {POLLS}, 13;"));
                    self.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
                    self.emit(format!("shr.u64 {a}, {POLLS}, 7;"));
                    self.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
                    self.emit(format!("shl.b64 {a}, {POLLS}, 17;"));
                    self.emit(format!("xor.b64 {POLLS}, {POLLS}, {a};"));
                } else {
                    self.emit(format!("add.u64 {POLLS}, {POLLS}, 1;"));
                }
                let at = self.inject_addr();
                self.emit(format!("st.u64 [{at}], {POLLS};"));
                let r = self.t(Cls::B64);
                self.emit(format!("rem.u64 {r}, {POLLS}, {};", si.every.max(1)));
                self.emit(format!("setp.eq.or.u64 {p}, {r}, 0, {p};"));
            }
            self.emit(format!("@!{p} bra {dest};"));
            self.cur.depth = self.v.types(self.cur.func).frames[target as usize]
                .as_ref()
                .expect("reachable")
                .stack
                .len();
            self.deopt_here(target, Reason::Safepoint);
        }
    }

    /// Inline a call of `callee` at `bci`; leaves the code at the
    /// continuation. Returns the result register, if any.
    fn inline(&mut self, bci: Bci, callee: FuncId) -> Result<Option<String>, JitError> {
        let f = self.v.func(callee);
        let chain: Vec<FuncId> = self
            .outer
            .iter()
            .map(|o| o.frame.func)
            .chain([self.cur.func])
            .collect();
        let analysis = self.inliner.enter(self.prog, &chain, callee, bci)?;
        let mut args = Vec::with_capacity(f.param_count as usize);
        for p in f.params().iter().rev() {
            args.push((p.ty.kind(), self.pop(p.ty.kind())));
        }
        args.reverse();
        self.frames += 1;
        let id = self.frames;
        let cont = self.new_label();
        let result = f
            .ret
            .map(|t| self.named(format!("%ret{id}"), reg_type(t.kind())));
        let mut frame = Frame::new(callee, analysis, id);
        frame.ret_to = Some((cont.clone(), result.clone()));
        let caller = std::mem::replace(&mut self.cur, frame);
        self.outer.push(Outer {
            frame: caller,
            call_bci: bci,
        });
        for (i, l) in f.locals.iter().enumerate() {
            let k = l.ty.kind();
            let name = self.named(format!("%l{id}_{i}"), reg_type(k));
            match args.get(i) {
                Some((ak, a)) => {
                    debug_assert_eq!(*ak, k);
                    self.emit(format!("mov.{} {name}, {a};", mov_ty(k)));
                }
                None => self.zero(k, &name),
            }
            self.cur.locals.push(name);
        }
        self.make_blocks();
        let lowered = self.body();
        let o = self.outer.pop().expect("pushed");
        self.cur = o.frame;
        lowered?;
        self.label(&cont);
        Ok(result)
    }

    fn call_virtual(&mut self, bci: Bci, method: FuncId) -> Result<(), JitError> {
        let m = self.v.func(method);
        let plan::VirtualCall {
            targets,
            miss,
            assumed,
        } = plan::virtual_call(self.prog, self.spec, self.cur.func, method, bci)?;
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        let nargs = m.param_count as usize;
        let d0 = self.cur.depth;
        let recv = self.stack_var(d0 - nargs, Kind::Ref);
        self.null_check_unless_known(&recv, bci, nargs - 1);
        let base = self.obj_addr(&recv);
        let tag = self.t(Cls::B32);
        self.emit(format!("ld.u32 {tag}, [{base}];"));
        let join = self.new_label();
        self.frames += 1;
        let result = m
            .ret
            .map(|t| self.named(format!("%vret{}", self.frames), reg_type(t.kind())));
        for (imp, ids) in targets {
            let hit = self.t(Cls::Pred);
            self.emit(format!("setp.ne.u32 {hit}, {tag}, {tag};"));
            for id in ids {
                self.emit(format!("setp.eq.or.u32 {hit}, {tag}, {id}, {hit};"));
            }
            let next = self.new_label();
            self.emit(format!("@!{hit} bra {next};"));
            self.cur.depth = d0;
            let r = self.inline(bci, imp)?;
            if let (Some(dst), Some(r), Some(t)) = (&result, r, m.ret) {
                self.emit(format!("mov.{} {dst}, {r};", mov_ty(t.kind())));
            }
            self.emit(format!("bra {join};"));
            self.label(&next);
        }
        self.cur.depth = d0;
        self.deopt_here(bci, miss);
        self.label(&join);
        self.cur.depth = d0 - nargs;
        if let (Some(r), Some(t)) = (result, m.ret) {
            self.push(t.kind(), &r);
        }
        Ok(())
    }

    /// `min`/`max` of floats with NaN propagation and `-0 < +0`.
    fn fminmax(&mut self, k: Kind, max: bool) {
        let (ty, bits, bc) = if k == Kind::F32 {
            ("f32", "b32", Cls::B32)
        } else {
            ("f64", "b64", Cls::B64)
        };
        let fc = cls(k);
        let b = self.pop(k);
        let a = self.pop(k);
        let r = self.t(fc);
        let op = if max { "max" } else { "min" };
        self.emit(format!("{op}.{ty} {r}, {a}, {b};"));
        // Equal operands: only the zeros differ; or the bits for min (a -0
        // wins), and them for max.
        let (ia, ib) = (self.t(bc), self.t(bc));
        self.emit(format!("mov.{bits} {ia}, {a};"));
        self.emit(format!("mov.{bits} {ib}, {b};"));
        let comb = if max { "and" } else { "or" };
        self.emit(format!("{comb}.{bits} {ia}, {ia}, {ib};"));
        let z = self.t(fc);
        self.emit(format!("mov.{bits} {z}, {ia};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.{ty} {p}, {a}, {b};"));
        self.emit(format!("selp.{ty} {r}, {z}, {r}, {p};"));
        let n = self.t(fc);
        self.emit(format!("add.rn.{ty} {n}, {a}, {b};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.nan.{ty} {p}, {a}, {b};"));
        self.emit(format!("selp.{ty} {r}, {n}, {r}, {p};"));
        self.push(k, &r);
    }

    /// One step of `fmod`'s long division: `i = ux - uy`; if it does not
    /// borrow, it becomes `ux` (or the result is zero, at `zero`).
    fn fmod_step(&mut self, ux: &str, uy: &str, i: &str, zero: &str) {
        self.emit(format!("sub.u64 {i}, {ux}, {uy};"));
        let p = self.t(Cls::Pred);
        let skip = self.new_label();
        self.emit(format!("setp.lt.s64 {p}, {i}, 0;"));
        self.emit(format!("@{p} bra {skip};"));
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {i}, 0;"));
        self.emit(format!("@{p} bra {zero};"));
        self.emit(format!("mov.u64 {ux}, {i};"));
        self.label(&skip);
    }

    /// Exact `fmod` on `f64` (the `f32` form widens, which is exact, and
    /// narrows the exact result): musl's algorithm, shift-subtract on the
    /// significands.
    fn fmod64(&mut self, a: &str, b: &str) -> String {
        let ux = self.t(Cls::B64);
        let uy = self.t(Cls::B64);
        self.emit(format!("mov.b64 {ux}, {a};"));
        self.emit(format!("mov.b64 {uy}, {b};"));
        let r = self.t(Cls::F64);
        let out = self.new_label();
        let ex = self.t(Cls::B64);
        let ey = self.t(Cls::B64);
        self.emit(format!("shr.u64 {ex}, {ux}, 52;"));
        self.emit(format!("and.b64 {ex}, {ex}, 2047;"));
        self.emit(format!("shr.u64 {ey}, {uy}, 52;"));
        self.emit(format!("and.b64 {ey}, {ey}, 2047;"));
        let sx = self.t(Cls::B64);
        self.emit(format!("and.b64 {sx}, {ux}, {:#x};", 1u64 << 63));
        // y == 0, y NaN or x not finite: NaN.
        let p = self.t(Cls::Pred);
        let y2 = self.t(Cls::B64);
        let x2 = self.t(Cls::B64);
        self.emit(format!("shl.b64 {y2}, {uy}, 1;"));
        self.emit(format!("shl.b64 {x2}, {ux}, 1;"));
        self.emit(format!("setp.eq.u64 {p}, {y2}, 0;"));
        self.emit(format!("setp.nan.or.f64 {p}, {b}, {b}, {p};"));
        self.emit(format!("setp.eq.or.u64 {p}, {ex}, 2047, {p};"));
        let xy = self.t(Cls::F64);
        self.emit(format!("mul.rn.f64 {xy}, {a}, {b};"));
        self.emit(format!("div.rn.f64 {r}, {xy}, {xy};"));
        self.emit(format!("@{p} bra {out};"));
        // |x| < |y|: x; |x| == |y|: signed zero.
        let p = self.t(Cls::Pred);
        self.emit(format!("mov.f64 {r}, {a};"));
        self.emit(format!("setp.lt.u64 {p}, {x2}, {y2};"));
        self.emit(format!("@{p} bra {out};"));
        let zero = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.eq.u64 {p}, {x2}, {y2};"));
        self.emit(format!("@{p} bra {zero};"));
        // Normalize both significands (subnormals: shift up, lower exponent).
        for (u, e) in [(&ux, &ex), (&uy, &ey)] {
            let sub = self.new_label();
            let done = self.new_label();
            let p = self.t(Cls::Pred);
            self.emit(format!("setp.eq.u64 {p}, {e}, 0;"));
            self.emit(format!("@{p} bra {sub};"));
            self.emit(format!("and.b64 {u}, {u}, {:#x};", (1u64 << 52) - 1));
            self.emit(format!("or.b64 {u}, {u}, {:#x};", 1u64 << 52));
            self.emit(format!("bra {done};"));
            self.label(&sub);
            // ex = -(clz(u << 12)); u <<= -ex + 1
            let t = self.t(Cls::B64);
            self.emit(format!("shl.b64 {t}, {u}, 12;"));
            let c = self.t(Cls::B32);
            self.emit(format!("clz.b64 {c}, {t};"));
            let c64 = self.t(Cls::B64);
            self.emit(format!("cvt.u64.u32 {c64}, {c};"));
            self.emit(format!("neg.s64 {e}, {c64};"));
            self.emit(format!("add.u32 {c}, {c}, 1;"));
            self.emit(format!("shl.b64 {u}, {u}, {c};"));
            self.label(&done);
        }
        // Long division.
        let lp = self.new_label();
        let last = self.new_label();
        let i = self.t(Cls::B64);
        self.label(&lp);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.s64 {p}, {ex}, {ey};"));
        self.emit(format!("@{p} bra {last};"));
        self.fmod_step(&ux, &uy, &i, &zero);
        self.emit(format!("shl.b64 {ux}, {ux}, 1;"));
        self.emit(format!("sub.s64 {ex}, {ex}, 1;"));
        self.emit(format!("bra {lp};"));
        self.label(&last);
        self.fmod_step(&ux, &uy, &i, &zero);
        // Renormalize: shift the leading one up to bit 52.
        let c = self.t(Cls::B32);
        self.emit(format!("clz.b64 {c}, {ux};"));
        self.emit(format!("sub.u32 {c}, {c}, 11;"));
        self.emit(format!("shl.b64 {ux}, {ux}, {c};"));
        let c64 = self.t(Cls::B64);
        self.emit(format!("cvt.u64.u32 {c64}, {c};"));
        self.emit(format!("sub.s64 {ex}, {ex}, {c64};"));
        // Scale: normal, or shift down into a subnormal.
        let sub = self.new_label();
        let fin = self.new_label();
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.le.s64 {p}, {ex}, 0;"));
        self.emit(format!("@{p} bra {sub};"));
        self.emit(format!("sub.u64 {ux}, {ux}, {:#x};", 1u64 << 52));
        let e = self.t(Cls::B64);
        self.emit(format!("shl.b64 {e}, {ex}, 52;"));
        self.emit(format!("or.b64 {ux}, {ux}, {e};"));
        self.emit(format!("bra {fin};"));
        self.label(&sub);
        let sh = self.t(Cls::B64);
        self.emit(format!("neg.s64 {sh}, {ex};"));
        self.emit(format!("add.s64 {sh}, {sh}, 1;"));
        let sh32 = self.t(Cls::B32);
        self.emit(format!("cvt.u32.u64 {sh32}, {sh};"));
        self.emit(format!("shr.u64 {ux}, {ux}, {sh32};"));
        self.label(&fin);
        self.emit(format!("or.b64 {ux}, {ux}, {sx};"));
        self.emit(format!("mov.b64 {r}, {ux};"));
        self.emit(format!("bra {out};"));
        self.label(&zero);
        self.emit(format!("mul.rn.f64 {r}, {a}, 0d0000000000000000;"));
        self.label(&out);
        r
    }

    /// Lower one instruction. Returns whether control does not fall through.
    #[allow(clippy::too_many_lines)]
    fn inst(&mut self, bci: Bci, inst: Inst) -> Result<bool, JitError> {
        use Kind::{F32, F64, I32, I64, Ref};
        macro_rules! bin {
            ($k:expr, $op:literal) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let r = self.t(cls($k));
                self.emit(format!(concat!($op, " {}, {}, {};"), r, a, b));
                self.push($k, &r);
            }};
        }
        macro_rules! un {
            ($k:expr, $op:literal) => {{
                let a = self.pop($k);
                let r = self.t(cls($k));
                self.emit(format!(concat!($op, " {}, {};"), r, a));
                self.push($k, &r);
            }};
        }
        macro_rules! cmp {
            ($k:expr, $cc:literal) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let r = self.setp_i32($cc, &a, &b);
                self.push(I32, &r);
            }};
        }
        macro_rules! shift {
            ($k:expr, $op:literal, $mask:literal) => {{
                let b = self.pop($k);
                let a = self.pop($k);
                let n = self.t(Cls::B32);
                if $k == I64 {
                    self.emit(format!("cvt.u32.u64 {n}, {b};"));
                    self.emit(format!(concat!("and.b32 {}, {}, ", $mask, ";"), n, n));
                } else {
                    self.emit(format!(concat!("and.b32 {}, {}, ", $mask, ";"), n, b));
                }
                let r = self.t(cls($k));
                self.emit(format!(concat!($op, " {}, {}, {};"), r, a, n));
                self.push($k, &r);
            }};
        }
        macro_rules! conv {
            ($from:expr, $to:expr, $op:literal) => {{
                let a = self.pop($from);
                let r = self.t(cls($to));
                self.emit(format!(concat!($op, " {}, {};"), r, a));
                self.push($to, &r);
            }};
        }
        macro_rules! flipbits {
            ($k:expr, $op:literal, $mask:expr) => {{
                let (bits, bc) = if $k == F32 {
                    ("b32", Cls::B32)
                } else {
                    ("b64", Cls::B64)
                };
                let a = self.pop($k);
                let i = self.t(bc);
                self.emit(format!("mov.{bits} {i}, {a};"));
                self.emit(format!(concat!($op, ".{} {}, {}, {};"), bits, i, i, $mask));
                let r = self.t(cls($k));
                self.emit(format!("mov.{bits} {r}, {i};"));
                self.push($k, &r);
            }};
        }
        match inst {
            Inst::I32Const { value } => self.push(I32, &format!("{value}")),
            Inst::I64Const { value } => self.push(I64, &format!("{value}")),
            Inst::F32Const { value } => self.push(F32, &format!("0f{:08X}", value.0)),
            Inst::F64Const { value } => self.push(F64, &format!("0d{:016X}", value.0)),
            Inst::RefNull => self.push(Ref, "0"),
            Inst::Load { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let x = self.cur.locals[local.index()].clone();
                self.push(k, &x);
            }
            Inst::Store { local } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let x = self.pop(k);
                let var = self.cur.locals[local.index()].clone();
                self.emit(format!("mov.{} {var}, {x};", mov_ty(k)));
            }
            Inst::Inc { local, delta } => {
                let k = self.v.func(self.cur.func).locals[local.index()].ty.kind();
                let var = self.cur.locals[local.index()].clone();
                let ty = if k == I64 { "s64" } else { "s32" };
                self.emit(format!("add.{ty} {var}, {var}, {delta};"));
            }
            Inst::Dup => {
                let k = self.kind_at(bci, 0);
                let x = self.pop(k);
                self.push(k, &x);
                self.push(k, &x);
            }
            Inst::Pop => {
                let k = self.kind_at(bci, 0);
                self.pop(k);
            }
            Inst::Swap => {
                let (ka, kb) = (self.kind_at(bci, 0), self.kind_at(bci, 1));
                let a = self.pop(ka);
                let b = self.pop(kb);
                let (ta, tb) = (self.t(cls(ka)), self.t(cls(kb)));
                self.emit(format!("mov.{} {ta}, {a};", mov_ty(ka)));
                self.emit(format!("mov.{} {tb}, {b};", mov_ty(kb)));
                self.push(ka, &ta);
                self.push(kb, &tb);
            }
            Inst::I32Add => bin!(I32, "add.s32"),
            Inst::I32Sub => bin!(I32, "sub.s32"),
            Inst::I32Mul => bin!(I32, "mul.lo.s32"),
            Inst::I64Add => bin!(I64, "add.s64"),
            Inst::I64Sub => bin!(I64, "sub.s64"),
            Inst::I64Mul => bin!(I64, "mul.lo.s64"),
            Inst::I32Div | Inst::I32Rem | Inst::I64Div | Inst::I64Rem => {
                let (k, ty) = if matches!(inst, Inst::I32Div | Inst::I32Rem) {
                    (I32, "s32")
                } else {
                    (I64, "s64")
                };
                let b = self.pop(k);
                let a = self.pop(k);
                self.cur.depth += 2; // the deopt re-executes the division
                let p = self.t(Cls::Pred);
                self.emit(format!("setp.eq.{ty} {p}, {b}, 0;"));
                self.deopt_if(&p, bci, Reason::DivideByZero);
                self.cur.depth -= 2;
                // MIN / -1 wraps (and MIN % -1 is 0) instead of overflowing.
                let m1 = self.t(Cls::Pred);
                self.emit(format!("setp.eq.{ty} {m1}, {b}, -1;"));
                let safe = self.t(cls(k));
                self.emit(format!("selp.{ty} {safe}, 1, {b}, {m1};"));
                let r = self.t(cls(k));
                if matches!(inst, Inst::I32Div | Inst::I64Div) {
                    self.emit(format!("div.{ty} {r}, {a}, {safe};"));
                    let n = self.t(cls(k));
                    self.emit(format!("neg.{ty} {n}, {a};"));
                    self.emit(format!("selp.{ty} {r}, {n}, {r}, {m1};"));
                } else {
                    self.emit(format!("rem.{ty} {r}, {a}, {safe};"));
                    self.emit(format!("selp.{ty} {r}, 0, {r}, {m1};"));
                }
                self.push(k, &r);
            }
            Inst::I32Neg => un!(I32, "neg.s32"),
            Inst::I64Neg => un!(I64, "neg.s64"),
            Inst::I32And => bin!(I32, "and.b32"),
            Inst::I32Or => bin!(I32, "or.b32"),
            Inst::I32Xor => bin!(I32, "xor.b32"),
            Inst::I32Shl => shift!(I32, "shl.b32", "31"),
            Inst::I32Shr => shift!(I32, "shr.s32", "31"),
            Inst::I32Ushr => shift!(I32, "shr.u32", "31"),
            Inst::I64And => bin!(I64, "and.b64"),
            Inst::I64Or => bin!(I64, "or.b64"),
            Inst::I64Xor => bin!(I64, "xor.b64"),
            Inst::I64Shl => shift!(I64, "shl.b64", "63"),
            Inst::I64Shr => shift!(I64, "shr.s64", "63"),
            Inst::I64Ushr => shift!(I64, "shr.u64", "63"),
            Inst::F32Add => bin!(F32, "add.rn.f32"),
            Inst::F32Sub => bin!(F32, "sub.rn.f32"),
            Inst::F32Mul => bin!(F32, "mul.rn.f32"),
            Inst::F32Div => bin!(F32, "div.rn.f32"),
            Inst::F64Add => bin!(F64, "add.rn.f64"),
            Inst::F64Sub => bin!(F64, "sub.rn.f64"),
            Inst::F64Mul => bin!(F64, "mul.rn.f64"),
            Inst::F64Div => bin!(F64, "div.rn.f64"),
            Inst::F32Rem => {
                let b = self.pop(F32);
                let a = self.pop(F32);
                let (wa, wb) = (self.t(Cls::F64), self.t(Cls::F64));
                self.emit(format!("cvt.f64.f32 {wa}, {a};"));
                self.emit(format!("cvt.f64.f32 {wb}, {b};"));
                let m = self.fmod64(&wa, &wb);
                let r = self.t(Cls::F32);
                self.emit(format!("cvt.rn.f32.f64 {r}, {m};"));
                self.push(F32, &r);
            }
            Inst::F64Rem => {
                let b = self.pop(F64);
                let a = self.pop(F64);
                let r = self.fmod64(&a, &b);
                self.push(F64, &r);
            }
            Inst::F32Neg => flipbits!(F32, "xor", "0x80000000"),
            Inst::F64Neg => flipbits!(F64, "xor", "0x8000000000000000"),
            Inst::F32Abs => flipbits!(F32, "and", "0x7FFFFFFF"),
            Inst::F64Abs => flipbits!(F64, "and", "0x7FFFFFFFFFFFFFFF"),
            Inst::I32Eq => cmp!(I32, "eq.s32"),
            Inst::I32Ne => cmp!(I32, "ne.s32"),
            Inst::I32Lt => cmp!(I32, "lt.s32"),
            Inst::I32Le => cmp!(I32, "le.s32"),
            Inst::I32Gt => cmp!(I32, "gt.s32"),
            Inst::I32Ge => cmp!(I32, "ge.s32"),
            Inst::I64Eq => cmp!(I64, "eq.s64"),
            Inst::I64Ne => cmp!(I64, "ne.s64"),
            Inst::I64Lt => cmp!(I64, "lt.s64"),
            Inst::I64Le => cmp!(I64, "le.s64"),
            Inst::I64Gt => cmp!(I64, "gt.s64"),
            Inst::I64Ge => cmp!(I64, "ge.s64"),
            // Ordered comparisons are false on NaN; `ne` is unordered (true).
            Inst::F32Eq => cmp!(F32, "eq.f32"),
            Inst::F32Ne => cmp!(F32, "neu.f32"),
            Inst::F32Lt => cmp!(F32, "lt.f32"),
            Inst::F32Le => cmp!(F32, "le.f32"),
            Inst::F32Gt => cmp!(F32, "gt.f32"),
            Inst::F32Ge => cmp!(F32, "ge.f32"),
            Inst::F64Eq => cmp!(F64, "eq.f64"),
            Inst::F64Ne => cmp!(F64, "neu.f64"),
            Inst::F64Lt => cmp!(F64, "lt.f64"),
            Inst::F64Le => cmp!(F64, "le.f64"),
            Inst::F64Gt => cmp!(F64, "gt.f64"),
            Inst::F64Ge => cmp!(F64, "ge.f64"),
            Inst::RefEq => cmp!(Ref, "eq.u32"),
            Inst::RefNe => cmp!(Ref, "ne.u32"),
            Inst::Br { target } => {
                let dest = self.edge(bci, target.0);
                self.emit(format!("bra {dest};"));
                return Ok(true);
            }
            Inst::BrIf { target }
            | Inst::BrUnless { target }
            | Inst::BrNull { target }
            | Inst::BrNonNull { target } => {
                let x = if matches!(inst, Inst::BrIf { .. } | Inst::BrUnless { .. }) {
                    self.pop(I32)
                } else {
                    self.pop(Ref)
                };
                if let Some(taken) = self.spec.branch(self.cur.func, bci) {
                    self.speculated_branch(inst, bci, target.0, &x, taken);
                    return Ok(true);
                }
                let dest = self.edge(bci, target.0);
                let fall = self.cur.blocks[&(bci + 1)].clone();
                let p = self.t(Cls::Pred);
                let cc = if matches!(inst, Inst::BrIf { .. } | Inst::BrNonNull { .. }) {
                    "ne"
                } else {
                    "eq"
                };
                self.emit(format!("setp.{cc}.u32 {p}, {x}, 0;"));
                self.emit(format!("@{p} bra {dest};"));
                self.emit(format!("bra {fall};"));
                return Ok(true);
            }
            Inst::I32ToI64 => conv!(I32, I64, "cvt.s64.s32"),
            Inst::I32ToF32 => conv!(I32, F32, "cvt.rn.f32.s32"),
            Inst::I32ToF64 => conv!(I32, F64, "cvt.rn.f64.s32"),
            Inst::I64ToI32 => conv!(I64, I32, "cvt.u32.u64"),
            Inst::I64ToF32 => conv!(I64, F32, "cvt.rn.f32.s64"),
            Inst::I64ToF64 => conv!(I64, F64, "cvt.rn.f64.s64"),
            // Float → integer conversions saturate and map NaN to 0 in PTX.
            Inst::F32ToI32 => conv!(F32, I32, "cvt.rzi.s32.f32"),
            Inst::F32ToI64 => conv!(F32, I64, "cvt.rzi.s64.f32"),
            Inst::F32ToF64 => conv!(F32, F64, "cvt.f64.f32"),
            Inst::F64ToI32 => conv!(F64, I32, "cvt.rzi.s32.f64"),
            Inst::F64ToI64 => conv!(F64, I64, "cvt.rzi.s64.f64"),
            Inst::F64ToF32 => conv!(F64, F32, "cvt.rn.f32.f64"),
            Inst::ArrayLen => {
                let r = self.pop(Ref);
                self.cur.depth += 1;
                self.null_check_unless_known(&r, bci, 0);
                self.cur.depth -= 1;
                let base = self.obj_addr(&r);
                let len = self.t(Cls::B32);
                self.emit(format!("ld.u32 {len}, [{base}+4];"));
                self.push(I32, &len);
            }
            Inst::I32ALoad | Inst::F32ALoad | Inst::RefALoad | Inst::I64ALoad | Inst::F64ALoad => {
                let (k, ty) = match inst {
                    Inst::I32ALoad => (I32, "u32"),
                    Inst::F32ALoad => (F32, "f32"),
                    Inst::RefALoad => (Ref, "u32"),
                    Inst::I64ALoad => (I64, "u64"),
                    _ => (F64, "f64"),
                };
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 2;
                let size = if matches!(k, I64 | F64) { 8 } else { 4 };
                let a = self.elem_addr(&r, &idx, size, bci, 1);
                self.cur.depth -= 2;
                let x = self.t(cls(k));
                self.emit(format!("ld.{ty} {x}, [{a}];"));
                self.push(k, &x);
            }
            Inst::I32AStore
            | Inst::F32AStore
            | Inst::RefAStore
            | Inst::I64AStore
            | Inst::F64AStore => {
                let (k, ty) = match inst {
                    Inst::I32AStore => (I32, "u32"),
                    Inst::F32AStore => (F32, "f32"),
                    Inst::RefAStore => (Ref, "u32"),
                    Inst::I64AStore => (I64, "u64"),
                    _ => (F64, "f64"),
                };
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let size = if matches!(k, I64 | F64) { 8 } else { 4 };
                let a = self.elem_addr(&r, &idx, size, bci, 2);
                self.cur.depth -= 3;
                self.emit(format!("st.{ty} [{a}], {x};"));
            }
            Inst::GetField { field } | Inst::PutField { field } => {
                let k = self.v.field(field).ty.kind();
                let put = matches!(inst, Inst::PutField { .. });
                let x = if put { Some(self.pop(k)) } else { None };
                let r = self.pop(Ref);
                let n = if put { 2 } else { 1 };
                self.cur.depth += n;
                self.null_check_unless_known(&r, bci, n - 1);
                self.cur.depth -= n;
                let base = self.obj_addr(&r);
                let off = self.prog.layout.field_offset[field.index()];
                let ty = field_ty(k);
                match x {
                    Some(x) => self.emit(format!("st.{ty} [{base}+{off}], {x};")),
                    None => {
                        let x = self.t(cls(k));
                        self.emit(format!("ld.{ty} {x}, [{base}+{off}];"));
                        self.push(k, &x);
                    }
                }
            }
            Inst::F32Sqrt => un!(F32, "sqrt.rn.f32"),
            Inst::F64Sqrt => un!(F64, "sqrt.rn.f64"),
            Inst::F32Floor => un!(F32, "cvt.rmi.f32.f32"),
            Inst::F32Ceil => un!(F32, "cvt.rpi.f32.f32"),
            Inst::F64Floor => un!(F64, "cvt.rmi.f64.f64"),
            Inst::F64Ceil => un!(F64, "cvt.rpi.f64.f64"),
            Inst::F32Min => self.fminmax(F32, false),
            Inst::F32Max => self.fminmax(F32, true),
            Inst::F64Min => self.fminmax(F64, false),
            Inst::F64Max => self.fminmax(F64, true),
            Inst::F32Exp
            | Inst::F32Log
            | Inst::F32Sin
            | Inst::F32Cos
            | Inst::F32Pow
            | Inst::F64Exp
            | Inst::F64Log
            | Inst::F64Sin
            | Inst::F64Cos
            | Inst::F64Pow => {
                let r = ptxlib::routine(inst).expect("a transcendental");
                self.transcendental(r, bci);
            }
            Inst::F32Fma | Inst::F64Fma => {
                let (k, op) = if inst == Inst::F32Fma {
                    (F32, "fma.rn.f32")
                } else {
                    (F64, "fma.rn.f64")
                };
                let c = self.pop(k);
                let b = self.pop(k);
                let a = self.pop(k);
                let r = self.t(cls(k));
                self.emit(format!("{op} {r}, {a}, {b}, {c};"));
                self.push(k, &r);
            }
            Inst::I32Abs | Inst::I64Abs => {
                let (k, ty) = if inst == Inst::I32Abs {
                    (I32, "s32")
                } else {
                    (I64, "s64")
                };
                let a = self.pop(k);
                let n = self.t(cls(k));
                self.emit(format!("neg.{ty} {n}, {a};"));
                let p = self.t(Cls::Pred);
                self.emit(format!("setp.lt.{ty} {p}, {a}, 0;"));
                let r = self.t(cls(k));
                self.emit(format!("selp.{ty} {r}, {n}, {a}, {p};"));
                self.push(k, &r);
            }
            Inst::I32Min => bin!(I32, "min.s32"),
            Inst::I32Max => bin!(I32, "max.s32"),
            Inst::I64Min => bin!(I64, "min.s64"),
            Inst::I64Max => bin!(I64, "max.s64"),
            Inst::I32ArrayAtomicAdd | Inst::I64ArrayAtomicAdd => {
                let (k, ty, size) = if inst == Inst::I32ArrayAtomicAdd {
                    (I32, "u32", 4)
                } else {
                    (I64, "u64", 8)
                };
                let x = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 3;
                let a = self.elem_addr(&r, &idx, size, bci, 2);
                self.cur.depth -= 3;
                let old = self.t(cls(k));
                self.emit(format!("atom.add.{ty} {old}, [{a}], {x};"));
                self.push(k, &old);
            }
            Inst::I32ArrayCmpxchg | Inst::I64ArrayCmpxchg => {
                let (k, ty, size) = if inst == Inst::I32ArrayCmpxchg {
                    (I32, "b32", 4)
                } else {
                    (I64, "b64", 8)
                };
                let new = self.pop(k);
                let expected = self.pop(k);
                let idx = self.pop(I32);
                let r = self.pop(Ref);
                self.cur.depth += 4;
                let a = self.elem_addr(&r, &idx, size, bci, 3);
                self.cur.depth -= 4;
                let old = self.t(cls(k));
                self.emit(format!("atom.cas.{ty} {old}, [{a}], {expected}, {new};"));
                self.push(k, &old);
            }
            Inst::FieldAtomicAdd { field } | Inst::FieldCmpxchg { field } => {
                let k = self.v.field(field).ty.kind();
                let cas = matches!(inst, Inst::FieldCmpxchg { .. });
                let new = self.pop(k);
                let expected = if cas { Some(self.pop(k)) } else { None };
                let r = self.pop(Ref);
                let n = if cas { 3 } else { 2 };
                self.cur.depth += n;
                self.null_check_unless_known(&r, bci, n - 1);
                self.cur.depth -= n;
                let base = self.obj_addr(&r);
                let off = self.prog.layout.field_offset[field.index()];
                let old = self.t(cls(k));
                let (ua, bt) = if k == I64 {
                    ("u64", "b64")
                } else {
                    ("u32", "b32")
                };
                match expected {
                    None => self.emit(format!("atom.add.{ua} {old}, [{base}+{off}], {new};")),
                    Some(e) => {
                        self.emit(format!("atom.cas.{bt} {old}, [{base}+{off}], {e}, {new};"))
                    }
                }
                self.push(k, &old);
            }
            Inst::Ret => {
                match self.cur.ret_to.clone() {
                    None => self.emit(format!("bra {L_NEXT};")),
                    Some((cont, result)) => {
                        if let (Some(t), Some(dst)) = (self.v.func(self.cur.func).ret, result) {
                            let x = self.pop(t.kind());
                            self.emit(format!("mov.{} {dst}, {x};", mov_ty(t.kind())));
                        }
                        self.emit(format!("bra {cont};"));
                    }
                }
                return Ok(true);
            }
            Inst::Call { func } => {
                if let Some(r) = self.inline(bci, func)? {
                    let k = self.v.func(func).ret.expect("returns").kind();
                    self.push(k, &r);
                }
            }
            Inst::CallVirt { method } => self.call_virtual(bci, method)?,
            Inst::Throw { .. } => {
                self.deopt_here(bci, Reason::Throw);
                return Ok(true);
            }
            Inst::InstanceOf { ty } => {
                let r = self.pop(Ref);
                let yes = self.type_test(&r, ty);
                self.emit(format!("setp.ne.and.u32 {yes}, {r}, 0, {yes};"));
                let x = self.t(Cls::B32);
                self.emit(format!("selp.b32 {x}, 1, 0, {yes};"));
                self.push(I32, &x);
            }
            Inst::CheckCast { ty } => {
                let r = self.pop(Ref);
                self.push(Ref, &r);
                let yes = self.type_test(&r, ty);
                // fail = !yes && r != 0
                let fail = self.t(Cls::Pred);
                self.emit(format!("setp.ne.u32 {fail}, {r}, 0;"));
                let nyes = self.t(Cls::Pred);
                self.emit(format!("not.pred {nyes}, {yes};"));
                self.emit(format!("and.pred {fail}, {fail}, {nyes};"));
                self.deopt_if(&fail, bci, Reason::ClassCast);
            }
            Inst::New { class } => {
                let (tag, size) = plan::new_object(self.prog, class);
                let (t, w1, words) = (self.t(Cls::B32), self.t(Cls::B32), self.t(Cls::B64));
                self.emit(format!("mov.b32 {t}, {tag};"));
                self.emit(format!("mov.b32 {w1}, {size};"));
                self.emit(format!("mov.u64 {words}, {};", size / 8));
                let r = self.allocate(bci, &t, &w1, &words);
                self.push(Ref, &r);
            }
            Inst::NewArray { elem } => {
                let (tag, esize) = plan::new_array(self.prog, elem, bci)?;
                let len = self.pop(I32);
                self.cur.depth += 1; // in the frame state for the checks
                let p = self.t(Cls::Pred);
                self.emit(format!("setp.lt.s32 {p}, {len}, 0;"));
                self.deopt_if(&p, bci, Reason::NegativeSize);
                let t = self.t(Cls::B32);
                self.emit(format!("mov.b32 {t}, {tag};"));
                // words = (len * esize + 15) / 8
                let words = self.t(Cls::B64);
                self.emit(format!("mul.wide.u32 {words}, {len}, {esize};"));
                self.emit(format!("add.u64 {words}, {words}, 15;"));
                self.emit(format!("shr.u64 {words}, {words}, 3;"));
                let r = self.allocate(bci, &t, &len, &words);
                self.cur.depth -= 1;
                self.push(Ref, &r);
            }
        }
        Ok(false)
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

#[cfg(test)]
mod ctx_layout {
    use super::{DeviceCtx, offsets};
    use std::mem::offset_of;

    #[test]
    fn the_device_context_offsets_match_its_fields() {
        let fields = [
            (offset_of!(DeviceCtx, heap_base), offsets::HEAP_BASE),
            (offset_of!(DeviceCtx, cursor), offsets::CURSOR),
            (offset_of!(DeviceCtx, end), offsets::END),
            (offset_of!(DeviceCtx, chunk), offsets::CHUNK),
            (offset_of!(DeviceCtx, control), offsets::CONTROL),
            (offset_of!(DeviceCtx, save_area), offsets::SAVE_AREA),
            (offset_of!(DeviceCtx, record_words), offsets::RECORD_WORDS),
            (offset_of!(DeviceCtx, never_ran), offsets::NEVER_RAN),
            (offset_of!(DeviceCtx, completed), offsets::COMPLETED),
            (offset_of!(DeviceCtx, captures), offsets::CAPTURES),
            (
                offset_of!(DeviceCtx, records_per_slot),
                offsets::RECORDS_PER_SLOT,
            ),
            (offset_of!(DeviceCtx, tlabs), offsets::TLABS),
            (offset_of!(DeviceCtx, tlab_group), offsets::TLAB_GROUP),
            (offset_of!(DeviceCtx, eden), offsets::EDEN),
            (offset_of!(DeviceCtx, large_words), offsets::LARGE_WORDS),
            (offset_of!(DeviceCtx, slots), offsets::SLOTS),
            (offset_of!(DeviceCtx, tlab_words), offsets::TLAB_WORDS),
            (offset_of!(DeviceCtx, exits), offsets::EXITS),
            (offset_of!(DeviceCtx, stats), offsets::STATS),
            (offset_of!(DeviceCtx, inject), offsets::INJECT),
        ];
        for (i, (at, off)) in fields.iter().enumerate() {
            assert_eq!(*at as u32, *off, "field {i}");
        }
        assert_eq!(std::mem::size_of::<DeviceCtx>(), 8 * fields.len());
    }
}
