//! Lowering decisions both backends share, so that the CPU and the PTX
//! backend compile the same kernel into the same shape: which calls are
//! inlined (and which are refused), which classes a virtual call or a type
//! test matches, the headers and sizes allocations write, and how deopt
//! sites in inlined code are numbered. A backend asks these functions and
//! only decides how to spell the answer in its own code.
//!
//! The numbering matters beyond tidiness: the deopt metadata (site ids,
//! frame layouts) of a kernel version is what the host replays records
//! with, so a CPU and a CUDA version of the same kernel must produce the
//! same metadata when compiled with the same options (a test checks it on
//! every example and on generated programs).

use crate::JitError;
use crate::cpu::{CompileOptions, MAX_INLINE_DEPTH, MAX_INLINED_INSTS};
use crate::spec::Speculations;
use offload_deopt::{Assumption, DeoptMetadata, Reason};
use offload_host_interp::Program;
use offload_ir::analysis::{DeoptSite, FuncAnalysis};
use offload_ir::{Bci, ClassId, FuncId, SiteId, Type};
use std::collections::HashMap;

/// A site in inlined code: the callers' (function, call bci) chain, the
/// inlined function and its bci.
type InlinedSiteKey = (Vec<(FuncId, Bci)>, FuncId, Bci);

/// Inlining state of one compilation: the instruction budget and the ids
/// of the sites made in inlined code.
#[derive(Debug, Default)]
pub(crate) struct Inliner {
    insts: usize,
    sites: HashMap<InlinedSiteKey, SiteId>,
}

impl Inliner {
    /// Start another version of the kernel's body: the instruction budget
    /// is per version (the sites made so far are shared by all of them).
    pub(crate) fn next_version(&mut self) {
        self.insts = 0;
    }

    /// May `callee` be inlined at `bci` of the innermost function of
    /// `chain` (the kernel first)? Returns the callee's analysis, or why not.
    pub(crate) fn enter<'p>(
        &mut self,
        prog: &'p Program,
        chain: &[FuncId],
        callee: FuncId,
        bci: Bci,
    ) -> Result<&'p FuncAnalysis, JitError> {
        let f = prog.verified().func(callee);
        let name = &f.name;
        if chain.contains(&callee) {
            return Err(JitError::Unsupported(format!(
                "call of `{name}` at bci {bci}: recursive calls are not compiled"
            )));
        }
        if chain.len() > MAX_INLINE_DEPTH {
            return Err(JitError::Unsupported(format!(
                "call of `{name}` at bci {bci}: calls nest deeper than {MAX_INLINE_DEPTH}"
            )));
        }
        self.insts += f.body.len();
        if self.insts > MAX_INLINED_INSTS {
            return Err(JitError::Unsupported(format!(
                "call of `{name}` at bci {bci}: more than {MAX_INLINED_INSTS} instructions inlined"
            )));
        }
        prog.analysis(callee)
            .ok_or_else(|| JitError::Unsupported(format!("call of abstract `{name}` at bci {bci}")))
    }

    /// The id of the site at `bci` of `cur`, called through `outer` (each
    /// caller with its analysis and call bci, the kernel first): a kernel
    /// site, or one made for this call chain on first use. An instruction
    /// that is not a potential site of the analysis (a branch speculated
    /// on) gets a site with the frame state at its entry, numbered after
    /// the analysis' sites.
    pub(crate) fn site(
        &mut self,
        prog: &Program,
        meta: &mut DeoptMetadata,
        outer: &[(FuncId, &FuncAnalysis, Bci)],
        cur: FuncId,
        analysis: &FuncAnalysis,
        bci: Bci,
    ) -> SiteId {
        if outer.is_empty()
            && let Some(s) = meta.site_at(bci)
        {
            return s.id;
        }
        let chain: Vec<(FuncId, Bci)> = outer.iter().map(|&(f, _, b)| (f, b)).collect();
        let key = (chain, cur, bci);
        if let Some(&id) = self.sites.get(&key) {
            return id;
        }
        let callers: Vec<(FuncId, &DeoptSite)> = outer
            .iter()
            .map(|&(f, a, b)| (f, a.site_at(b).expect("calls are deopt sites")))
            .collect();
        let own = offload_ir::analysis::site_or_frame(prog.verified(), cur, analysis, bci)
            .expect("deopt exits are at reachable instructions");
        let id = meta.add_inlined(&callers, cur, &own);
        self.sites.insert(key, id);
        id
    }
}

/// Check the options against the kernel's sites.
pub(crate) fn check_options(meta: &DeoptMetadata, opts: &CompileOptions) -> Result<(), JitError> {
    if let Some(inj) = opts.inject
        && (meta.site_at(inj.site_bci).is_none() || inj.modulus <= 0)
    {
        return Err(JitError::Unsupported(format!(
            "injection at bci {}: not a deopt site, or modulus not positive",
            inj.site_bci
        )));
    }
    Ok(())
}

/// The implementations a `callvirt method` at `bci` can reach (class
/// hierarchy analysis over the module), each with the global class ids of
/// the receivers that select it. A receiver of any other class deopts.
pub(crate) fn virtual_targets(
    prog: &Program,
    method: FuncId,
    bci: Bci,
) -> Result<Vec<(FuncId, Vec<u32>)>, JitError> {
    let v = prog.verified();
    let m = v.func(method);
    let offload_ir::FuncKind::Method { class: decl, .. } = m.kind else {
        return Err(JitError::Unsupported(format!(
            "callvirt of non-method `{}` at bci {bci}",
            m.name
        )));
    };
    let mut targets: Vec<(FuncId, Vec<u32>)> = Vec::new();
    for c in 0..v.classes.len() {
        let c = ClassId::new(c);
        if !v.is_subclass(c, decl) {
            continue;
        }
        let Some(imp) = prog.dispatch(c, method) else {
            continue;
        };
        if v.func(imp).is_abstract() {
            continue;
        }
        let id = prog.global_class(c);
        match targets.iter_mut().find(|(f, _)| *f == imp) {
            Some((_, ids)) => ids.push(id),
            None => targets.push((imp, vec![id])),
        }
    }
    Ok(targets)
}

/// What a backend compiles at a `callvirt`: the implementations to inline,
/// each with the global class ids that select it; the reason any other
/// receiver deopts with; and the speculation to record, if the call is
/// guarded for the receiver classes the profile saw.
pub(crate) struct VirtualCall {
    pub(crate) targets: Vec<(FuncId, Vec<u32>)>,
    pub(crate) miss: Reason,
    pub(crate) assumed: Option<Assumption>,
}

/// The `callvirt method` at `bci` of `func`: guarded for the profiled
/// receiver classes when `spec` speculates on them (others fail the guard,
/// `TypeGuard`), else the class hierarchy's every implementation (a class
/// none was compiled for deopts with `Throw` and the interpreter calls).
pub(crate) fn virtual_call(
    prog: &Program,
    spec: &Speculations,
    func: FuncId,
    method: FuncId,
    bci: Bci,
) -> Result<VirtualCall, JitError> {
    Ok(match spec.receivers(func, bci) {
        Some(classes) => VirtualCall {
            targets: speculated_targets(prog, method, classes),
            miss: Reason::TypeGuard,
            assumed: Some(Assumption::Receivers(classes.to_vec())),
        },
        None => VirtualCall {
            targets: virtual_targets(prog, method, bci)?,
            miss: Reason::Throw,
            assumed: None,
        },
    })
}

/// What a null dereferenced at `bci` of `func` deopts with: a failed
/// non-null speculation (`TypeGuard`, with the speculation to record) where
/// `spec` assumes the value is never null, else a null check.
pub(crate) fn null_check(
    spec: &Speculations,
    func: FuncId,
    bci: Bci,
) -> (Reason, Option<Assumption>) {
    if spec.non_null(func, bci) {
        (Reason::TypeGuard, Some(Assumption::NonNull))
    } else {
        (Reason::NullCheck, None)
    }
}

/// The implementations a speculated `callvirt method` inlines: for each
/// receiver class the profile saw (module class ids, most frequent first),
/// the implementation it dispatches to, with the global class ids that
/// select it. Any other receiver fails the guard.
fn speculated_targets(
    prog: &Program,
    method: FuncId,
    classes: &[ClassId],
) -> Vec<(FuncId, Vec<u32>)> {
    let v = prog.verified();
    let mut targets: Vec<(FuncId, Vec<u32>)> = Vec::new();
    for &c in classes {
        let Some(imp) = prog
            .dispatch(c, method)
            .filter(|&f| !v.func(f).is_abstract())
        else {
            continue;
        };
        let id = prog.global_class(c);
        match targets.iter_mut().find(|(f, _)| *f == imp) {
            Some((_, ids)) => ids.push(id),
            None => targets.push((imp, vec![id])),
        }
    }
    targets
}

/// How `instanceof`/`checkcast ty` tests a (non-null) object's header tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TypeTest {
    /// The tag is one of these global class ids.
    Classes(Vec<u32>),
    /// The tag equals this array tag.
    Tag(u32),
    /// Every object passes.
    Always,
    /// No object passes (a type no header can have).
    Never,
}

/// The header test for type `ty`.
pub(crate) fn type_test(prog: &Program, ty: Type) -> TypeTest {
    match ty {
        Type::Class(c) => {
            let v = prog.verified();
            TypeTest::Classes(
                (0..v.classes.len())
                    .map(ClassId::new)
                    .filter(|&s| v.is_subclass(s, c))
                    .map(|s| prog.global_class(s))
                    .collect(),
            )
        }
        Type::Array(e, d) => {
            let h = offload_tlab::Header::Array {
                elem: prog.global_elem(e),
                dims: d,
                len: 0,
            };
            match h.encode() {
                Some((want, _)) => TypeTest::Tag(want),
                None => TypeTest::Never,
            }
        }
        Type::Ref => TypeTest::Always,
        // The verifier only lets reference types reach type tests.
        _ => TypeTest::Never,
    }
}

/// `new class`: the header tag (global class id) and the size in bytes.
pub(crate) fn new_object(prog: &Program, class: ClassId) -> (u32, u32) {
    (
        prog.global_class(class),
        prog.layout.class_size[class.index()],
    )
}

/// `newarray elem` at `bci`: the header tag and the element size in bytes.
/// An array of `len` elements takes `(8 + len * esize + 7) / 8` words.
pub(crate) fn new_array(prog: &Program, elem: Type, bci: Bci) -> Result<(u32, u32), JitError> {
    let Some(Type::Array(e, d)) = elem.array_of() else {
        return Err(JitError::Unsupported(format!(
            "`newarray` at bci {bci}: no array type of {elem:?}"
        )));
    };
    let h = offload_tlab::Header::Array {
        elem: prog.global_elem(e),
        dims: d,
        len: 0,
    };
    let Some((tag, _)) = h.encode() else {
        return Err(JitError::Unsupported(format!(
            "`newarray` at bci {bci}: element type has no header encoding"
        )));
    };
    let esize = offload_tlab::layout::kind_size(offload_tlab::layout::array_elem_kind(
        prog.global_elem(e),
        d,
    ));
    Ok((tag, esize))
}

/// What [`workitem_indexed`] knows of a value.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
enum Sym {
    Other,
    /// The workitem number (parameter 0, never assigned).
    Workitem,
    /// The workitem number as `i32` (`i64.to_i32` of it).
    WorkitemI32,
    /// The value of reference parameter `l`, which the kernel never assigns.
    Param(u32),
}

/// The most bytecode instructions a kernel may have for its unchecked item
/// loop to be unrolled.
pub(crate) const UNROLL_MAX_INSTS: usize = 64;

/// How many workitems the unchecked version of kernel `k`'s item loop runs
/// per control-word check: [`UNROLL`] for a small kernel (at most
/// [`UNROLL_MAX_INSTS`] instructions) with no loop and no call, else 1.
///
/// For such a kernel the per-workitem work of the loop (the chunk-end
/// compare, the control-word load and test, the branch back) is as large as
/// the body itself (saxpy's body is six machine instructions); with the
/// body repeated `UNROLL` times between checks, that work is paid once per
/// group. The control word is still read before every group, so a
/// safepoint or another slot's deopt waits for at most `UNROLL - 1` more
/// straight-line workitems. Kernels with loops gain nothing (the body
/// dominates) and calls would be inlined `UNROLL` more times.
pub(crate) fn unroll_factor(v: &offload_ir::Verified, k: FuncId) -> u32 {
    use offload_ir::isa::hz;
    let f = v.func(k);
    let small = f.body.len() <= UNROLL_MAX_INSTS;
    let straight = f.body.iter().enumerate().all(|(bci, inst)| {
        inst.target().is_none_or(|t| t as usize > bci) && !inst.opcode().hazards().has(hz::CALLS)
    });
    if small && straight { UNROLL } else { 1 }
}

/// Workitems per control-word check in an unrolled item loop.
pub(crate) const UNROLL: u32 = 4;

/// The array accesses of kernel `k` whose index is the workitem number
/// (converted to `i32`) and whose array is a reference parameter the kernel
/// never assigns, by bytecode index, with that parameter's local index.
///
/// For a chunk `[lo, hi)` with `0 <= lo` and `hi <= length` of each such
/// array, none of these accesses can fail (a null array has length 0, so
/// the condition also excludes null), and a backend may run the chunk in a
/// version of the body without their checks. The analysis is a forward
/// walk of the operand stack within each basic block (a value crossing a
/// block boundary is unknown), and a local counts as the workitem number
/// only when every store to it stores that number and nothing increments it
/// (the verifier's definite assignment rules out a read before the first
/// store). Accesses in inlined callees are not covered.
pub(crate) fn workitem_indexed(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> std::collections::BTreeMap<Bci, u32> {
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let frames = &v.types(k).frames;
    let params = f.param_count as usize;
    let mut assigned = vec![false; f.locals.len()];
    for inst in &f.body {
        if let Inst::Store { local } | Inst::Inc { local, .. } = *inst {
            assigned[local.index()] = true;
        }
    }
    let mut out = std::collections::BTreeMap::new();
    if params == 0 || assigned[0] || f.locals[0].ty.kind() != Kind::I64 {
        return out;
    }
    let leaders: std::collections::HashSet<Bci> = a.cfg.blocks.iter().map(|b| b.start).collect();
    // Candidates for "holds the workitem number as i32": assigned, non-
    // parameter i32 locals; refined until every store to one stores it.
    let mut wi32: Vec<bool> = (0..f.locals.len())
        .map(|l| l >= params && f.locals[l].ty.kind() == Kind::I32)
        .collect();
    loop {
        out.clear();
        let mut changed = false;
        let mut stack: Vec<Sym> = Vec::new();
        for (bci, &inst) in f.body.iter().enumerate() {
            let Some(frame) = frames[bci].as_ref() else {
                continue;
            };
            let depth = frame.stack.len();
            if leaders.contains(&(bci as Bci)) || stack.len() != depth {
                stack.clear();
                stack.resize(depth, Sym::Other);
            }
            let pop = |s: &mut Vec<Sym>| s.pop().unwrap_or(Sym::Other);
            // Pop an access's index and array; note it if it qualifies.
            let access =
                |s: &mut Vec<Sym>, bci: usize, out: &mut std::collections::BTreeMap<Bci, u32>| {
                    let idx = pop(s);
                    if let (Sym::WorkitemI32, Sym::Param(p)) = (idx, pop(s)) {
                        out.insert(bci as Bci, p);
                    }
                };
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    stack.push(if l == 0 {
                        Sym::Workitem
                    } else if wi32[l] {
                        Sym::WorkitemI32
                    } else if l < params && !assigned[l] && f.locals[l].ty.kind() == Kind::Ref {
                        Sym::Param(l as u32)
                    } else {
                        Sym::Other
                    });
                }
                Inst::Store { local } => {
                    let s = pop(&mut stack);
                    if wi32[local.index()] && s != Sym::WorkitemI32 {
                        wi32[local.index()] = false;
                        changed = true;
                    }
                }
                Inst::Inc { local, .. } => {
                    if wi32[local.index()] {
                        wi32[local.index()] = false;
                        changed = true;
                    }
                }
                Inst::I64ToI32 => {
                    let s = pop(&mut stack);
                    stack.push(if s == Sym::Workitem {
                        Sym::WorkitemI32
                    } else {
                        Sym::Other
                    });
                }
                Inst::Dup => {
                    let s = stack.last().copied().unwrap_or(Sym::Other);
                    stack.push(s);
                }
                Inst::Pop => {
                    stack.pop();
                }
                Inst::Swap => {
                    let n = stack.len();
                    if n >= 2 {
                        stack.swap(n - 1, n - 2);
                    }
                }
                Inst::I32ALoad
                | Inst::I64ALoad
                | Inst::F32ALoad
                | Inst::F64ALoad
                | Inst::RefALoad => {
                    access(&mut stack, bci, &mut out);
                    stack.push(Sym::Other);
                }
                Inst::I32AStore
                | Inst::I64AStore
                | Inst::F32AStore
                | Inst::F64AStore
                | Inst::RefAStore => {
                    pop(&mut stack);
                    access(&mut stack, bci, &mut out);
                }
                _ => {
                    // Any other instruction pops some operands and pushes at
                    // most one result: keep what lies below both depths.
                    let after = frames
                        .get(bci + 1)
                        .and_then(|fr| fr.as_ref())
                        .map_or(0, |fr| fr.stack.len());
                    stack.truncate(depth.min(after).saturating_sub(1));
                    stack.resize(after, Sym::Other);
                }
            }
        }
        if !changed {
            return out;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{UNROLL, UNROLL_MAX_INSTS, unroll_factor, workitem_indexed};
    use offload_ir::{Bci, parse_module, verify};
    use std::collections::BTreeMap;

    /// `unroll_factor` of the first function of `src`.
    fn unroll(src: &str) -> u32 {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        unroll_factor(&v, offload_ir::FuncId::new(0))
    }

    #[test]
    fn small_straight_kernels_unroll_and_loops_calls_and_big_bodies_do_not() {
        let saxpy = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/kernels/saxpy.obc"
        ))
        .unwrap();
        assert_eq!(unroll(&saxpy), UNROLL);
        // A forward branch is fine.
        let fwd = "kernel k(i: i64, a: i32[]) {\n load i\n i64.const 3\n i64.lt\n br_if out\n load a\n i32.const 0\n i32.const 1\n i32.astore\n out:\n ret\n}";
        assert_eq!(unroll(fwd), UNROLL);
        let looped = "kernel k(i: i64, a: i32[]) {\n local k: i32\n i32.const 0\n store k\n top:\n inc k 1\n load k\n i32.const 9\n i32.lt\n br_if top\n ret\n}";
        assert_eq!(unroll(looped), 1);
        let called = "func f(x: i32) -> i32 {\n load x\n ret\n}\nkernel k(i: i64, a: i32[]) {\n i32.const 1\n call f\n pop\n ret\n}";
        let v = verify(parse_module("t.obc", called).unwrap()).unwrap();
        let k = (0..2)
            .map(offload_ir::FuncId::new)
            .find(|&f| v.func(f).name == "k")
            .unwrap();
        assert_eq!(unroll_factor(&v, k), 1);
        let big = format!(
            "kernel k(i: i64, a: i32[]) {{\n{}\n ret\n}}",
            "i32.const 1\n pop\n".repeat(UNROLL_MAX_INSTS / 2)
        );
        assert_eq!(unroll(&big), 1);
    }

    /// `workitem_indexed` of the first function of `src`.
    fn indexed(src: &str) -> BTreeMap<Bci, u32> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        workitem_indexed(&v, k, &a)
    }

    #[test]
    fn saxpy_has_all_three_accesses_through_a_local() {
        let src = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/kernels/saxpy.obc"
        ))
        .unwrap();
        // x[j] (param 2), y[j] loaded and stored (param 3).
        assert_eq!(indexed(&src), BTreeMap::from([(8, 2), (12, 3), (14, 3)]));
    }

    #[test]
    fn only_the_workitem_number_itself_and_fixed_arrays_count() {
        let k = |body: &str| {
            indexed(&format!(
                "kernel k(i: i64, a: i32[], b: i32[]) {{\n local j: i32\n{body}\n ret\n}}"
            ))
        };
        // Directly, with dup and swap in between.
        let direct = k("load a\n load i\n i64.to_i32\n dup\n pop\n i32.aload\n pop");
        assert_eq!(direct, BTreeMap::from([(5, 1)]));
        let swapped = k("load i\n i64.to_i32\n load a\n swap\n i32.aload\n pop");
        assert_eq!(swapped, BTreeMap::from([(4, 1)]));
        // i + 1 is not i.
        assert!(
            k("load a\n load i\n i64.to_i32\n i32.const 1\n i32.add\n i32.aload\n pop").is_empty()
        );
        // A local that is also incremented, or also stored something else.
        assert!(
            k("load i\n i64.to_i32\n store j\n inc j 1\n load a\n load j\n i32.aload\n pop")
                .is_empty()
        );
        assert!(
            k("load i\n i64.to_i32\n store j\n i32.const 0\n store j\n load a\n load j\n i32.aload\n pop")
                .is_empty()
        );
        // An array parameter the kernel assigns.
        assert!(k("load b\n store a\n load a\n load i\n i64.to_i32\n i32.aload\n pop").is_empty());
        // A workitem number that is assigned.
        assert!(
            k("i64.const 3\n store i\n load a\n load i\n i64.to_i32\n i32.aload\n pop").is_empty()
        );
    }

    #[test]
    fn values_do_not_cross_block_boundaries() {
        // The index is pushed before a branch target; the access after it
        // does not know what is on the stack.
        let src = "kernel k(i: i64, a: i32[]) {
    load a
    load i
    i64.to_i32
    load i
    i64.const 0
    i64.lt
    br_if skip
  skip:
    i32.aload
    pop
    ret
}";
        assert!(indexed(src).is_empty());
    }
}
