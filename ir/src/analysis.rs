//! Analyses shared by every consumer: basic blocks and the CFG, loop back-edges
//! (safepoint poll sites), liveness of locals, and the potential deopt sites with
//! their frame states.
//!
//! # Conventions
//!
//! - A **back-edge** is a branch whose target is at or before the branch
//!   (`target <= bci`). Every cycle in a bytecode CFG contains one, so polling
//!   on each back-edge bounds the time between polls by the length of an
//!   acyclic path. The poll happens on the edge, before control reaches the
//!   target, so the workitem resumes at the **loop header** (the target) with
//!   the frame at the header's entry.
//! - A **deopt site** is a reachable bytecode index where a workitem can stop:
//!   the entry (bci 0, a poll), every loop header (a poll), and every
//!   instruction with hazards (it can throw, allocate, or call). One site per
//!   bci: an instruction that is both a loop header and, say, a bounds check has
//!   one site with both reasons. Sites are numbered in bytecode order.
//! - A site's **frame state** is the state at the *entry* of its bci: the
//!   interpreter resumes by re-executing that instruction. It lists the live
//!   locals (assigned, and read before written on some path onward) and every
//!   operand-stack slot (all are live: a stack machine consumes its stack), with
//!   the verifier's types; [`FrameState::values`] numbers them in save-record
//!   order, locals first. For a call site the state is the caller's before the
//!   call; a deopt inside the callee composes the callee's frame on top of it.

use crate::isa::{Hazards, Inst};
use crate::module::{Function, Module};
use crate::printer::{inst_text, label_names, type_name};
use crate::types::{Bci, FuncId, LocalId, SiteId, Type};
use crate::verifier::Verified;
use fixedbitset::FixedBitSet;
use std::fmt::Write;

/// A basic block: a maximal straight-line run of instructions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// First instruction.
    pub start: Bci,
    /// One past the last instruction.
    pub end: Bci,
    /// Successor blocks.
    pub succs: Vec<u32>,
    /// Predecessor blocks.
    pub preds: Vec<u32>,
}

/// The control-flow graph of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cfg {
    /// Blocks in bytecode order; block 0 is the entry.
    pub blocks: Vec<Block>,
    /// The block of each bytecode index.
    pub block_of: Vec<u32>,
}

impl Cfg {
    /// Build the CFG of a (verified) function body.
    pub fn new(f: &Function) -> Cfg {
        let n = f.body.len();
        let mut leader = vec![false; n + 1];
        leader[0] = true;
        for (bci, inst) in f.body.iter().enumerate() {
            if let Some(t) = inst.target() {
                leader[t as usize] = true;
            }
            if inst.opcode().flow() != crate::isa::Flow::Next {
                leader[bci + 1] = true;
            }
        }
        let mut blocks = Vec::new();
        let mut block_of = vec![0u32; n];
        let mut start = 0;
        for bci in 1..=n {
            if leader[bci] || bci == n {
                if start < bci {
                    for b in &mut block_of[start..bci] {
                        *b = blocks.len() as u32;
                    }
                    blocks.push(Block {
                        start: start as Bci,
                        end: bci as Bci,
                        succs: Vec::new(),
                        preds: Vec::new(),
                    });
                }
                start = bci;
            }
        }
        for b in 0..blocks.len() {
            let last = blocks[b].end - 1;
            let succs: Vec<u32> = f.body[last as usize]
                .successors(last)
                .into_iter()
                .filter(|&s| (s as usize) < n)
                .map(|s| block_of[s as usize])
                .collect();
            for &s in &succs {
                blocks[s as usize].preds.push(b as u32);
            }
            blocks[b].succs = succs;
        }
        Cfg { blocks, block_of }
    }
}

/// A back-edge: a branch at `from` to a loop header `to <= from`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct BackEdge {
    /// The branch instruction.
    pub from: Bci,
    /// The loop header.
    pub to: Bci,
}

/// One value of a frame state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A local.
    Local(LocalId),
    /// An operand-stack slot, 0 at the bottom.
    Stack(u32),
}

/// The live values at a deopt site.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FrameState {
    /// Live locals with their types at the site, in local order.
    pub locals: Vec<(LocalId, Type)>,
    /// The operand stack, bottom first.
    pub stack: Vec<Type>,
}

impl FrameState {
    /// All values in save-record order (locals, then stack bottom-up).
    pub fn values(&self) -> impl Iterator<Item = (Value, Type)> + '_ {
        self.locals
            .iter()
            .map(|&(l, t)| (Value::Local(l), t))
            .chain(
                self.stack
                    .iter()
                    .enumerate()
                    .map(|(i, &t)| (Value::Stack(i as u32), t)),
            )
    }
    /// Number of values.
    pub fn len(&self) -> usize {
        self.locals.len() + self.stack.len()
    }
    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The values that hold references (the collector updates these).
    pub fn refs(&self) -> impl Iterator<Item = Value> + '_ {
        self.values().filter(|(_, t)| t.is_ref()).map(|(v, _)| v)
    }
}

/// A potential deopt site.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeoptSite {
    /// Its number in the function.
    pub id: SiteId,
    /// Where.
    pub bci: Bci,
    /// A safepoint poll happens here (entry or loop header).
    pub poll: bool,
    /// What the instruction can do that stops a workitem.
    pub hazards: Hazards,
    /// The live state to save.
    pub frame: FrameState,
}

/// Every shared analysis of one function.
#[derive(Clone, Debug)]
pub struct FuncAnalysis {
    /// Basic blocks.
    pub cfg: Cfg,
    /// Back-edges, in bytecode order of the branch.
    pub back_edges: Vec<BackEdge>,
    /// Loop headers (targets of back-edges), sorted.
    pub loop_headers: Vec<Bci>,
    /// Locals live at the entry of each bytecode index.
    pub live_in: Vec<FixedBitSet>,
    /// Potential deopt sites, in bytecode order.
    pub sites: Vec<DeoptSite>,
    /// The widest frame state of any site (values).
    pub max_frame: usize,
    /// What is known of references at the entry of each bytecode index
    /// (`None` where unreachable): see [`crate::refs`].
    pub refs: Vec<Option<crate::refs::RefState>>,
    /// For a kernel, the parameters a launch may sum into
    /// ([`crate::summed::summable_params`]); empty for other functions.
    pub summable: Vec<u32>,
    /// For a kernel, how it reaches each parameter's elements, by
    /// parameter index ([`crate::own::param_access`]); empty for other
    /// functions.
    pub param_access: Vec<crate::own::ParamAccess>,
}

impl FuncAnalysis {
    /// Whether the operand-stack slot `from_top` below the top (0: the
    /// top) cannot be null at the entry of `bci` ([`crate::refs`]).
    pub fn non_null(&self, bci: Bci, from_top: usize) -> bool {
        self.refs
            .get(bci as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.non_null(from_top))
    }

    /// Whether the operand-stack slot `from_top` below the top holds, at
    /// the entry of `bci`, an object this invocation of the function
    /// allocated ([`crate::refs`]).
    pub fn fresh(&self, bci: Bci, from_top: usize) -> bool {
        self.refs
            .get(bci as usize)
            .and_then(Option::as_ref)
            .is_some_and(|s| s.fresh(from_top))
    }

    /// The site at `bci`, if there is one.
    pub fn site_at(&self, bci: Bci) -> Option<&DeoptSite> {
        self.sites
            .binary_search_by_key(&bci, |s| s.bci)
            .ok()
            .map(|i| &self.sites[i])
    }
}

/// The deopt site at `bci` of `func`, or — for an instruction that is not a
/// potential site, such as a branch the compiler speculates on — a site made
/// for it with the frame state at its entry (no hazards, no poll, and an id
/// of `u32::MAX`: the caller numbers it). `None` when `bci` is unreachable.
pub fn site_or_frame(v: &Verified, func: FuncId, a: &FuncAnalysis, bci: Bci) -> Option<DeoptSite> {
    if let Some(s) = a.site_at(bci) {
        return Some(s.clone());
    }
    let frame = v.types(func).frames.get(bci as usize)?.as_ref()?;
    let locals = a.live_in[bci as usize]
        .ones()
        .filter_map(|l| frame.locals[l].map(|t| (LocalId::new(l), t)))
        .collect();
    Some(DeoptSite {
        id: SiteId(u32::MAX),
        bci,
        poll: false,
        hazards: Hazards::default(),
        frame: FrameState {
            locals,
            stack: frame.stack.clone(),
        },
    })
}

/// Analyse function `func` of a verified module.
pub fn analyze(v: &Verified, func: FuncId) -> FuncAnalysis {
    let f = v.func(func);
    let types = v.types(func);
    let cfg = Cfg::new(f);
    let reachable = |b: usize| types.frames.get(b).is_some_and(Option::is_some);

    let mut back_edges: Vec<BackEdge> = f
        .body
        .iter()
        .enumerate()
        .filter(|&(bci, _)| reachable(bci))
        .filter_map(|(bci, inst)| {
            inst.target()
                .filter(|&t| t as usize <= bci)
                .map(|t| BackEdge {
                    from: bci as Bci,
                    to: t,
                })
        })
        .collect();
    back_edges.sort_by_key(|e| e.from);
    let mut loop_headers: Vec<Bci> = back_edges.iter().map(|e| e.to).collect();
    loop_headers.sort_unstable();
    loop_headers.dedup();

    let live_in = liveness(f);

    let mut sites = Vec::new();
    for (bci, inst) in f.body.iter().enumerate() {
        let Some(frame) = types.frames.get(bci).and_then(Option::as_ref) else {
            continue;
        };
        let poll = bci == 0 || loop_headers.binary_search(&(bci as Bci)).is_ok();
        let hazards = inst.opcode().hazards();
        if !poll && hazards.is_empty() {
            continue;
        }
        let locals = live_in[bci]
            .ones()
            .filter_map(|l| frame.locals[l].map(|t| (LocalId::new(l), t)))
            .collect();
        sites.push(DeoptSite {
            id: SiteId::new(sites.len()),
            bci: bci as Bci,
            poll,
            hazards,
            frame: FrameState {
                locals,
                stack: frame.stack.clone(),
            },
        });
    }
    let max_frame = sites.iter().map(|s| s.frame.len()).max().unwrap_or(0);
    FuncAnalysis {
        cfg,
        back_edges,
        loop_headers,
        live_in,
        sites,
        max_frame,
        refs: crate::refs::ref_facts(v, func),
        summable: if f.kind == crate::module::FuncKind::Kernel {
            crate::summed::summable_params(v, func)
        } else {
            Vec::new()
        },
        param_access: if f.kind == crate::module::FuncKind::Kernel {
            crate::own::param_access(v, func)
        } else {
            Vec::new()
        },
    }
}

/// Locals live at the entry of each bytecode index (backward dataflow).
pub fn liveness(f: &Function) -> Vec<FixedBitSet> {
    let n = f.body.len();
    let nl = f.locals.len();
    let mut live_in = vec![FixedBitSet::with_capacity(nl); n];
    let mut changed = true;
    // Iterate in reverse bytecode order to a fixed point; bodies are small and
    // this converges in (loop nesting depth + 2) rounds.
    while changed {
        changed = false;
        for bci in (0..n).rev() {
            let inst = &f.body[bci];
            let mut live = FixedBitSet::with_capacity(nl);
            for s in inst.successors(bci as Bci) {
                if let Some(l) = live_in.get(s as usize) {
                    live.union_with(l);
                }
            }
            if let Inst::Store { local } = inst
                && local.index() < nl
            {
                live.set(local.index(), false);
            }
            if let Some(l) = inst.local_read()
                && l.index() < nl
            {
                live.insert(l.index());
            }
            if live != live_in[bci] {
                live_in[bci] = live;
                changed = true;
            }
        }
    }
    live_in
}

/// A human-readable dump of every analysis of `func`, used by the `test
/// analyze` file tests and by the CLI.
pub fn dump(v: &Verified, func: FuncId) -> String {
    let m: &Module = v.module();
    let f = m.func(func);
    let a = analyze(v, func);
    let labels = label_names(f);
    let mut out = String::new();
    let _ = writeln!(out, "function {}", f.name);
    for (i, b) in a.cfg.blocks.iter().enumerate() {
        let succ: Vec<String> = b.succs.iter().map(|s| format!("b{s}")).collect();
        let _ = writeln!(
            out,
            "  b{i}: [{}, {}) -> {}",
            b.start,
            b.end,
            if succ.is_empty() {
                "exit".into()
            } else {
                succ.join(" ")
            }
        );
    }
    for e in &a.back_edges {
        let _ = writeln!(out, "  back-edge {} -> {}", e.from, e.to);
    }
    let name = |l: usize| f.locals[l].name.clone();
    for (bci, inst) in f.body.iter().enumerate() {
        let live: Vec<String> = a.live_in[bci].ones().map(name).collect();
        let _ = writeln!(
            out,
            "  {bci:>3} {:<28} live: {}",
            inst_text(m, f, &labels, inst),
            live.join(" ")
        );
    }
    for s in &a.sites {
        let mut why: Vec<&str> = Vec::new();
        if s.poll {
            why.push("poll");
        }
        why.extend(s.hazards.names());
        let vals: Vec<String> = s
            .frame
            .values()
            .map(|(val, t)| match val {
                crate::analysis::Value::Local(l) => {
                    format!("{}: {}", name(l.index()), type_name(m, t))
                }
                crate::analysis::Value::Stack(i) => format!("s{i}: {}", type_name(m, t)),
            })
            .collect();
        let _ = writeln!(
            out,
            "  site {} @{} [{}] {{{}}}",
            s.id.0,
            s.bci,
            why.join(","),
            vals.join(", ")
        );
    }
    let _ = writeln!(out, "  max frame: {}", a.max_frame);
    out
}

/// Whether kernel `f` uses its workitem index (local 0, an `i64`) only as
/// an `i32`: every `load` of it is followed at once by `i64.to_i32`, and
/// nothing stores to it. Such a kernel wraps an index outside `i32`, so
/// the runtime refuses launch ranges that do not fit (`OffloadError::
/// IndexRange`) instead of letting workitems alias.
pub fn narrows_index(f: &Function) -> bool {
    let zero = LocalId(0);
    let mut loads = 0;
    for (k, inst) in f.body.iter().enumerate() {
        match inst {
            Inst::Load { local } if *local == zero => {
                if f.body.get(k + 1) != Some(&Inst::I64ToI32) {
                    return false;
                }
                loads += 1;
            }
            Inst::Store { local } | Inst::Inc { local, .. } if *local == zero => return false,
            _ => {}
        }
    }
    loads > 0
}
