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

/// Whether running kernel `k` may allocate: a `new` or `newarray` in it or
/// in any function it may call (for a `callvirt`, every implementation any
/// class dispatches to). Compiled code brackets each workitem of such a
/// kernel with the nursery snapshot and reset (`cpu` module docs).
pub(crate) fn may_allocate(prog: &Program, k: FuncId) -> bool {
    prog.may_allocate(k)
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
            "`newarray` at bci {bci}: no array type of {}",
            prog.verified().type_name(elem)
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

/// The instructions both operand walks ([`workitem_indexed`] and
/// [`loop_predicates`]) treat alike: `dup`, `pop` and `swap` move what is
/// known of the entries; an array load or store hands the stack to `access`
/// with its array and index on top (a stored value already popped), which
/// pops them, and a load then pushes `other`. Returns false, touching
/// nothing, for any other instruction.
fn shared_step<T: Clone>(
    stack: &mut Vec<T>,
    inst: offload_ir::Inst,
    other: T,
    access: impl FnOnce(&mut Vec<T>),
) -> bool {
    use offload_ir::Inst;
    match inst {
        Inst::Dup => {
            let s = stack.last().cloned().unwrap_or(other);
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
        Inst::I32ALoad | Inst::I64ALoad | Inst::F32ALoad | Inst::F64ALoad | Inst::RefALoad => {
            access(stack);
            stack.push(other);
        }
        Inst::I32AStore | Inst::I64AStore | Inst::F32AStore | Inst::F64AStore | Inst::RefAStore => {
            stack.pop();
            access(stack);
        }
        _ => return false,
    }
    true
}

/// How many operand-stack entries below the top an instruction leaves as
/// they were, going from `depth` entries to `after`: all but its operands
/// (by its opcode's effect), or where that depends on the instruction (a
/// call), those below both depths and one more.
fn kept_below(inst: offload_ir::Inst, depth: usize, after: usize) -> usize {
    match inst.opcode().effect() {
        offload_ir::Effect::Fixed { pops, .. } => depth.saturating_sub(pops.len()),
        offload_ir::Effect::Special(_) => depth.min(after).saturating_sub(1),
    }
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

/// A loop-invariant `i32` expression over constants and locals the loop
/// never assigns, evaluated with the bytecode's wrapping arithmetic where
/// the loop is entered ([`loop_predicates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inv {
    Const(i32),
    Local(u32),
    Add(Box<Inv>, Box<Inv>),
    Sub(Box<Inv>, Box<Inv>),
    Mul(Box<Inv>, Box<Inv>),
}

impl Inv {
    fn size(&self) -> usize {
        match self {
            Inv::Const(_) | Inv::Local(_) => 1,
            Inv::Add(a, b) | Inv::Sub(a, b) | Inv::Mul(a, b) => 1 + a.size() + b.size(),
        }
    }
}

/// An index `coef * k + off` (mod 2^32) in a loop's induction variable `k`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Affine {
    pub(crate) coef: Inv,
    pub(crate) off: Inv,
}

/// An innermost loop whose array accesses can be checked once, where the
/// loop is entered, instead of in every iteration ([`loop_predicates`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PredicatedLoop {
    /// The loop header (the target of every back-edge) and the last
    /// instruction of the loop (the last back-edge).
    pub(crate) header: Bci,
    pub(crate) last: Bci,
    /// The induction variable `k` (an `i32` local): the header leaves the
    /// loop unless `k < bound`, and the loop changes `k` only by `inc k c`
    /// with `c > 0`, by at most `step` in all per iteration.
    pub(crate) iv: u32,
    pub(crate) bound: Inv,
    pub(crate) step: i64,
    /// The accesses covered: bytecode index, the array's local (a reference
    /// the loop never assigns), and the index in `k`.
    pub(crate) accesses: Vec<(Bci, u32, Affine)>,
}

/// What [`loop_predicates`] knows of a value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum LSym {
    Other,
    /// A local the loop assigns, as loaded.
    Var(u32),
    Inv(Inv),
    Aff(Affine),
    /// A reference local the loop never assigns.
    Arr(u32),
    /// An `i32` comparison of two values.
    Cmp(offload_ir::Inst, Box<LSym>, Box<LSym>),
}

/// Expressions larger than this are not tracked.
const MAX_INV_SIZE: usize = 32;

fn inv(e: Inv) -> LSym {
    if e.size() > MAX_INV_SIZE {
        LSym::Other
    } else {
        LSym::Inv(e)
    }
}

fn aff(coef: Inv, off: Inv) -> LSym {
    if coef.size() + off.size() > MAX_INV_SIZE {
        LSym::Other
    } else {
        LSym::Aff(Affine { coef, off })
    }
}

/// `a op b` for `i32.add` (`op` = 0), `i32.sub` (1) and `i32.mul` (2), in
/// the ring of integers mod 2^32 the bytecode computes in.
fn arith(op: u8, a: LSym, b: LSym, iv: u32) -> LSym {
    let b2 = |x: Inv, y: Inv| match op {
        0 => Inv::Add(Box::new(x), Box::new(y)),
        1 => Inv::Sub(Box::new(x), Box::new(y)),
        _ => Inv::Mul(Box::new(x), Box::new(y)),
    };
    let as_aff = |s: LSym| match s {
        LSym::Var(l) if l == iv => Some(Affine {
            coef: Inv::Const(1),
            off: Inv::Const(0),
        }),
        LSym::Aff(a) => Some(a),
        _ => None,
    };
    match (a, b) {
        (LSym::Inv(x), LSym::Inv(y)) => inv(b2(x, y)),
        (x, y) => match (as_aff(x.clone()), as_aff(y.clone()), x, y) {
            (Some(p), Some(q), _, _) if op < 2 => aff(b2(p.coef, q.coef), b2(p.off, q.off)),
            (Some(p), None, _, LSym::Inv(y)) => match op {
                0 | 1 => aff(p.coef, b2(p.off, y)),
                _ => aff(b2(p.coef, y.clone()), b2(p.off, y)),
            },
            (None, Some(q), LSym::Inv(x), _) => match op {
                0 => aff(q.coef, b2(x, q.off)),
                1 => aff(
                    Inv::Sub(Box::new(Inv::Const(0)), Box::new(q.coef)),
                    b2(x, q.off),
                ),
                _ => aff(b2(x.clone(), q.coef), b2(x, q.off)),
            },
            _ => LSym::Other,
        },
    }
}

/// The innermost loops of kernel `k` whose array accesses a backend may
/// check once where the loop is entered (C2's loop predication, with a
/// checked version of the loop for when the check fails).
///
/// A loop qualifies when it is a single-entry region `[header, last]`
/// (every branch into it from outside targets the header from before it;
/// every branch inside that goes backwards targets the header), its header
/// block is `k < bound` in one of the forms `load k, <bound>, i32.ge,
/// br_if out` / `i32.lt, br_unless out` (or with the operands swapped and
/// `i32.le`/`i32.gt`), where `bound` is loop-invariant, and the loop
/// changes the `i32` local `k` only by `inc k c` with `c > 0`.
///
/// An access is covered when its array is a reference local the loop never
/// assigns and its index is `coef * k + off` for loop-invariant `coef` and
/// `off`, computed before any `inc k` of the iteration (every path from the
/// header to it goes forward, so an `inc` at a later bytecode index has not
/// run). In every iteration such an access sees `k0 <= k <= bound - 1`,
/// where `k0` is `k` at entry — provided `k` cannot wrap past `i32::MAX`,
/// i.e. `bound - 1 + step <= i32::MAX`. The index the bytecode computes is
/// congruent mod 2^32 to the exact `coef * k + off` (with `coef` and `off`
/// as the bytecode computes them); so if the exact value is in `[0, len)` at
/// `k0` and at `bound - 1`, it is so for every `k` between (it is affine),
/// and as it lies in `[0, 2^31)` the wrapped index equals it. That is the
/// predicate a backend evaluates at entry (true as well when the loop does
/// not run, `k0 >= bound`).
pub(crate) fn loop_predicates(
    v: &offload_ir::Verified,
    k: FuncId,
    a: &FuncAnalysis,
) -> Vec<PredicatedLoop> {
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let frames = &v.types(k).frames;
    let leaders: std::collections::HashSet<Bci> = a.cfg.blocks.iter().map(|b| b.start).collect();
    let mut back: std::collections::BTreeMap<Bci, Bci> = std::collections::BTreeMap::new();
    for (s, inst) in f.body.iter().enumerate() {
        if let Some(t) = inst.target()
            && t as usize <= s
            && frames[s].is_some()
        {
            let e = back.entry(t).or_insert(s as Bci);
            *e = (*e).max(s as Bci);
        }
    }
    let mut out = Vec::new();
    'loops: for (&h, &b) in &back {
        let (hu, bu) = (h as usize, b as usize);
        if frames[hu].as_ref().is_none_or(|fr| !fr.stack.is_empty()) {
            continue;
        }
        for (s, inst) in f.body.iter().enumerate() {
            let Some(t) = inst.target() else { continue };
            let inside = (hu..=bu).contains(&s);
            let single_entry = if inside {
                t as usize > s || t == h
            } else {
                // Not into the middle, nor to the header from after it.
                !((h + 1..=b).contains(&t) || (t == h && s > bu))
            };
            if !single_entry {
                continue 'loops;
            }
        }
        let mut assigned = vec![false; f.locals.len()];
        for inst in &f.body[hu..=bu] {
            if let Inst::Store { local } | Inst::Inc { local, .. } = *inst {
                assigned[local.index()] = true;
            }
        }
        // A forward symbolic walk of the loop; `iv` is known once the
        // header's test is.
        let mut iv: Option<u32> = None;
        let mut bound = None;
        let mut stack: Vec<LSym> = Vec::new();
        let mut accesses = Vec::new();
        for bci in hu..=bu {
            let inst = f.body[bci];
            let Some(frame) = frames[bci].as_ref() else {
                continue;
            };
            let depth = frame.stack.len();
            if (bci != hu && leaders.contains(&(bci as Bci))) || stack.len() != depth {
                if iv.is_none() {
                    continue 'loops; // the header block ended without its test
                }
                stack.clear();
                stack.resize(depth, LSym::Other);
            }
            let ivl = iv.unwrap_or(u32::MAX);
            let pop = |s: &mut Vec<LSym>| s.pop().unwrap_or(LSym::Other);
            let mut access = |s: &mut Vec<LSym>| {
                let idx = pop(s);
                let arr = pop(s);
                let form = match idx {
                    LSym::Var(l) if l == ivl => Some(Affine {
                        coef: Inv::Const(1),
                        off: Inv::Const(0),
                    }),
                    LSym::Aff(a) => Some(a),
                    LSym::Inv(e) => Some(Affine {
                        coef: Inv::Const(0),
                        off: e,
                    }),
                    _ => None,
                };
                if let (Some(form), LSym::Arr(l)) = (form, arr) {
                    accesses.push((bci as Bci, l, form));
                }
            };
            match inst {
                Inst::Load { local } => {
                    let l = local.index();
                    stack.push(match f.locals[l].ty.kind() {
                        _ if assigned[l] => LSym::Var(l as u32),
                        Kind::I32 => LSym::Inv(Inv::Local(l as u32)),
                        Kind::Ref => LSym::Arr(l as u32),
                        _ => LSym::Other,
                    });
                }
                Inst::I32Const { value } => stack.push(LSym::Inv(Inv::Const(value))),
                Inst::I32Add | Inst::I32Sub | Inst::I32Mul => {
                    let y = pop(&mut stack);
                    let x = pop(&mut stack);
                    let op = match inst {
                        Inst::I32Add => 0,
                        Inst::I32Sub => 1,
                        _ => 2,
                    };
                    stack.push(arith(op, x, y, ivl));
                }
                Inst::I32Lt | Inst::I32Le | Inst::I32Gt | Inst::I32Ge if iv.is_none() => {
                    let y = pop(&mut stack);
                    let x = pop(&mut stack);
                    stack.push(LSym::Cmp(inst, Box::new(x), Box::new(y)));
                }
                Inst::BrIf { target } | Inst::BrUnless { target } if iv.is_none() => {
                    // The header's test: staying in the loop must mean k < n.
                    let exit_if = matches!(inst, Inst::BrIf { .. });
                    let found = match (pop(&mut stack), exit_if) {
                        (LSym::Cmp(c, x, y), _) if target.0 > b && stack.is_empty() => {
                            match (c, *x, *y, exit_if) {
                                (Inst::I32Ge, LSym::Var(l), LSym::Inv(n), true)
                                | (Inst::I32Lt, LSym::Var(l), LSym::Inv(n), false)
                                | (Inst::I32Le, LSym::Inv(n), LSym::Var(l), true)
                                | (Inst::I32Gt, LSym::Inv(n), LSym::Var(l), false) => Some((l, n)),
                                _ => None,
                            }
                        }
                        _ => None,
                    };
                    let Some((l, n)) = found else {
                        continue 'loops;
                    };
                    if f.locals[l as usize].ty.kind() != Kind::I32 {
                        continue 'loops;
                    }
                    iv = Some(l);
                    bound = Some(n);
                }
                _ if iv.is_none() => continue 'loops, // anything else in the header
                _ if shared_step(&mut stack, inst, LSym::Other, &mut access) => {}
                _ => {
                    let after = frames
                        .get(bci + 1)
                        .and_then(|fr| fr.as_ref())
                        .map_or(0, |fr| fr.stack.len());
                    stack.truncate(kept_below(inst, depth, after));
                    stack.resize(after, LSym::Other);
                }
            }
        }
        let (Some(iv), Some(bound)) = (iv, bound) else {
            continue;
        };
        // The induction variable moves only by positive increments; an
        // access is covered only before every one of them.
        let mut step = 0i64;
        let mut first_inc = usize::MAX;
        for (bci, inst) in f.body.iter().enumerate().take(bu + 1).skip(hu) {
            match *inst {
                Inst::Inc { local, delta } if local.index() == iv as usize => {
                    if delta <= 0 {
                        continue 'loops;
                    }
                    step += i64::from(delta);
                    first_inc = first_inc.min(bci);
                }
                Inst::Store { local } if local.index() == iv as usize => continue 'loops,
                _ => {}
            }
        }
        accesses.retain(|&(bci, _, _)| (bci as usize) < first_inc);
        if !accesses.is_empty() {
            out.push(PredicatedLoop {
                header: h,
                last: b,
                iv,
                bound,
                step,
                accesses,
            });
        }
    }
    out
}

/// The longest loop (in bytecode instructions) [`loop_unroll`] unrolls.
pub(crate) const LOOP_UNROLL_MAX_INSTS: u32 = 96;

/// How many copies of predicated loop `lp`'s unchecked version a backend
/// lowers, polling for safepoints on the back-edges of the last copy only:
/// [`UNROLL`] for a loop of at most [`LOOP_UNROLL_MAX_INSTS`] instructions,
/// else 1. Each copy keeps the header's test, so the loop still leaves
/// after any iteration; only the poll is paid once per `UNROLL` iterations
/// (a safepoint request waits for at most that many more iterations).
pub(crate) fn loop_unroll(lp: &PredicatedLoop) -> u32 {
    if lp.last - lp.header < LOOP_UNROLL_MAX_INSTS {
        UNROLL
    } else {
        1
    }
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

/// What [`vectorizable`] and the vector lowering know of a value: the same
/// for every workitem of a group (`U`), one per workitem (`V`), the workitem
/// number (`Idx`, as `i64`; `Idx32`, as `i32`), or an array parameter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum VKind {
    U(offload_ir::Kind),
    V(offload_ir::Kind),
    Idx,
    Idx32,
    Arr,
}

/// Whether the unchecked item loop of kernel `k` can run a group of
/// [`UNROLL`] workitems as one SIMD body, a lane per workitem (a GPU warp on
/// a CPU vector unit): the body is one basic block ending in `ret`, its
/// values are `i32` or `f32`, its arithmetic is `add`, `sub`, `mul`, `div`
/// (`f32`) or `add`, `sub`, `and`, `or`, `xor` (`i32`), and every array
/// access is one of `unchecked` (indexed by the workitem number, proven in
/// bounds for the chunk) into a reference parameter. Such a body has no
/// deopt site left, and workitem `w` touches only element `w` of any array,
/// so running the lanes in lockstep is the same as running the workitems
/// one after another.
pub(crate) fn vectorizable(
    v: &offload_ir::Verified,
    k: FuncId,
    unchecked: &std::collections::BTreeSet<Bci>,
) -> bool {
    use VKind::{Arr, Idx, Idx32, U, V};
    use offload_ir::{Inst, Kind};
    let f = v.func(k);
    let params = f.param_count as usize;
    let mut env: Vec<VKind> = f
        .locals
        .iter()
        .enumerate()
        .map(|(l, loc)| match loc.ty.kind() {
            _ if l == 0 => Idx,
            Kind::Ref if l < params => Arr,
            k => U(k),
        })
        .collect();
    let mut stack: Vec<VKind> = Vec::new();
    let num = |x: VKind| matches!(x, U(Kind::I32 | Kind::F32) | V(Kind::I32 | Kind::F32));
    let kind = |x: VKind| match x {
        U(k) | V(k) => Some(k),
        _ => None,
    };
    for (bci, &inst) in f.body.iter().enumerate() {
        let last = bci + 1 == f.body.len();
        match inst {
            Inst::Load { local } => stack.push(env[local.index()]),
            Inst::Store { local } => {
                let Some(x) = stack.pop() else { return false };
                let l = local.index();
                let fits = match (x, f.locals[l].ty.kind()) {
                    (U(a) | V(a), b) => num(x) && a == b,
                    (Idx32, Kind::I32) | (Idx, Kind::I64) | (Arr, Kind::Ref) => true,
                    _ => false,
                };
                if !fits {
                    return false;
                }
                env[l] = x;
            }
            Inst::I32Const { .. } => stack.push(U(Kind::I32)),
            Inst::F32Const { .. } => stack.push(U(Kind::F32)),
            Inst::I64ToI32 => match stack.pop() {
                Some(Idx) => stack.push(Idx32),
                _ => return false,
            },
            Inst::F32Add | Inst::F32Sub | Inst::F32Mul | Inst::F32Div => {
                let (Some(b), Some(a)) = (stack.pop(), stack.pop()) else {
                    return false;
                };
                if kind(a) != Some(Kind::F32) || kind(b) != Some(Kind::F32) {
                    return false;
                }
                stack.push(if a == U(Kind::F32) && b == U(Kind::F32) {
                    a
                } else {
                    V(Kind::F32)
                });
            }
            Inst::I32Add | Inst::I32Sub | Inst::I32And | Inst::I32Or | Inst::I32Xor => {
                let (Some(b), Some(a)) = (stack.pop(), stack.pop()) else {
                    return false;
                };
                if kind(a) != Some(Kind::I32) || kind(b) != Some(Kind::I32) {
                    return false;
                }
                stack.push(if a == U(Kind::I32) && b == U(Kind::I32) {
                    a
                } else {
                    V(Kind::I32)
                });
            }
            Inst::I32ALoad | Inst::F32ALoad if unchecked.contains(&(bci as Bci)) => {
                let (Some(Idx32), Some(Arr)) = (stack.pop(), stack.pop()) else {
                    return false;
                };
                stack.push(V(if inst == Inst::I32ALoad {
                    Kind::I32
                } else {
                    Kind::F32
                }));
            }
            Inst::I32AStore | Inst::F32AStore if unchecked.contains(&(bci as Bci)) => {
                let want = if inst == Inst::I32AStore {
                    Kind::I32
                } else {
                    Kind::F32
                };
                let (Some(x), Some(Idx32), Some(Arr)) = (stack.pop(), stack.pop(), stack.pop())
                else {
                    return false;
                };
                if kind(x) != Some(want) {
                    return false;
                }
            }
            Inst::Dup => {
                let Some(&x) = stack.last() else { return false };
                stack.push(x);
            }
            Inst::Pop => {
                if stack.pop().is_none() {
                    return false;
                }
            }
            Inst::Swap => {
                let n = stack.len();
                if n < 2 {
                    return false;
                }
                stack.swap(n - 1, n - 2);
            }
            Inst::Ret if last && stack.is_empty() && f.ret.is_none() => {}
            _ => return false,
        }
    }
    true
}

/// SIMD bodies per control-word check when the item loop is vectorized
/// ([`vectorizable`]): a group is `UNROLL * VECTORS_PER_GROUP` workitems.
pub(crate) const VECTORS_PER_GROUP: u32 = 4;

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
                _ if shared_step(&mut stack, inst, Sym::Other, |s| access(s, bci, &mut out)) => {}
                _ => {
                    // Any other instruction pops its operands and pushes at
                    // most one result: keep what lies below its operands.
                    let after = frames
                        .get(bci + 1)
                        .and_then(|fr| fr.as_ref())
                        .map_or(0, |fr| fr.stack.len());
                    stack.truncate(kept_below(inst, depth, after));
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

    /// `loop_predicates` of the first function of `src`.
    fn loops(src: &str) -> Vec<super::PredicatedLoop> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        super::loop_predicates(&v, k, &a)
    }

    fn example(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../examples/kernels/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }

    #[test]
    fn matmul_and_nbody_inner_loops_are_predicated() {
        use super::{Affine, Inv};
        let l = |x: u32| Box::new(Inv::Local(x));
        let c = |x: i32| Box::new(Inv::Const(x));
        // matmul: a[row * n + k], b[k * n + col]; row = 5, col = 6, k = 7, n = 1.
        let mm = loops(&example("matmul.obc"));
        assert_eq!(mm.len(), 1);
        let lp = &mm[0];
        assert_eq!((lp.iv, lp.step, &lp.bound), (7, 1, &Inv::Local(1)));
        let forms: Vec<(u32, Affine)> = lp.accesses.iter().map(|a| (a.1, a.2.clone())).collect();
        assert_eq!(
            forms,
            vec![
                (
                    2,
                    Affine {
                        coef: Inv::Const(1),
                        off: Inv::Add(Box::new(Inv::Mul(l(5), l(1))), c(0)),
                    }
                ),
                (
                    3,
                    Affine {
                        coef: Inv::Mul(c(1), l(1)),
                        off: Inv::Add(Box::new(Inv::Mul(c(0), l(1))), l(6)),
                    }
                ),
            ]
        );
        // nbody: px[j], px[b], py[j], py[b], pz[j], pz[b], m[j].
        let nb = loops(&example("nbody.obc"));
        assert_eq!(nb.len(), 1);
        assert_eq!(nb[0].accesses.len(), 7, "{:?}", nb[0].accesses);
    }

    #[test]
    fn loops_that_do_not_qualify_are_not_predicated() {
        let k = |body: &str| {
            loops(&format!(
                "kernel k(i: i64, n: i32, a: i32[], b: i32[]) {{\n local j: i32\n local t: i32\n i32.const 0\n store j\n{body}\n done:\n ret\n}}"
            ))
        };
        let accesses = |body: &str| -> Vec<u32> {
            k(body)
                .iter()
                .flat_map(|l| l.accesses.iter().map(|a| a.0))
                .collect()
        };
        // The plain shape, in both header forms and with swapped operands.
        let plain = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(plain), vec![8]);
        let lt = " top:\n load j\n load n\n i32.lt\n br_unless done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(lt), vec![8]);
        let swapped = " top:\n load n\n load j\n i32.le\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert_eq!(accesses(swapped), vec![8]);
        // `j <= n` lets j reach n: not k < bound.
        let le = " top:\n load j\n load n\n i32.gt\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert!(k(le).is_empty());
        // An access after the increment, a decrement, a store to j, a bound
        // or an array the loop assigns.
        let after = " top:\n load j\n load n\n i32.ge\n br_if done\n inc j 1\n load a\n load j\n i32.aload\n pop\n br top";
        assert!(k(after).is_empty());
        let down = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n inc j -1\n br top";
        assert!(k(down).is_empty());
        let stored = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n load j\n i32.const 1\n i32.add\n store j\n br top";
        assert!(k(stored).is_empty());
        let bound = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n store n\n inc j 1\n br top";
        assert!(k(bound).is_empty());
        let array = " top:\n load j\n load n\n i32.ge\n br_if done\n load a\n load j\n i32.aload\n pop\n load b\n store a\n inc j 1\n br top";
        assert!(accesses(array).is_empty());
        // An index through a local the loop assigns is not followed.
        let via = " top:\n load j\n load n\n i32.ge\n br_if done\n load j\n store t\n load a\n load t\n i32.aload\n pop\n inc j 1\n br top";
        assert!(accesses(via).is_empty());
        // An outer loop is not innermost; its inner loop is.
        let nested = " outer:\n load j\n load n\n i32.ge\n br_if done\n i32.const 0\n store t\n inner:\n load t\n load n\n i32.ge\n br_if next\n load a\n load t\n i32.aload\n pop\n inc t 1\n br inner\n next:\n load a\n load j\n i32.aload\n pop\n inc j 1\n br outer";
        let n = k(nested);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].iv, 5);
        // A second entry into the loop's middle.
        let entered = " load n\n br_if mid\n top:\n load j\n load n\n i32.ge\n br_if done\n mid:\n load a\n load j\n i32.aload\n pop\n inc j 1\n br top";
        assert!(k(entered).is_empty());
    }

    /// `vectorizable` of the first function of `src`, with its
    /// workitem-indexed accesses unchecked.
    fn vector(src: &str) -> bool {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        let k = offload_ir::FuncId::new(0);
        let a = offload_ir::analysis::analyze(&v, k);
        let unchecked = workitem_indexed(&v, k, &a).into_keys().collect();
        super::vectorizable(&v, k, &unchecked)
    }

    #[test]
    fn straight_32_bit_kernels_over_their_own_elements_vectorize() {
        assert!(vector(&example("saxpy.obc")));

        let k = |body: &str| {
            vector(&format!(
                "kernel k(i: i64, a: f32, x: f32[], y: f32[], p: i32[], d: f64[]) {{\n local j: i32\n load i\n i64.to_i32\n store j\n{body}\n ret\n}}"
            ))
        };
        assert!(k(
            "load p\n load j\n load p\n load j\n i32.aload\n i32.const 3\n i32.xor\n i32.astore"
        ));
        assert!(
            k("load y\n load j\n load a\n f32.astore"),
            "a uniform value stored"
        );
        // An index other than the workitem's own, a 64-bit value, an integer
        // multiply, a branch, a call-free but unsupported instruction.
        assert!(!k("load y\n i32.const 0\n load a\n f32.astore"));
        assert!(!k("load d\n load j\n f64.const 1.0\n f64.astore"));
        assert!(!k(
            "load p\n load j\n load p\n load j\n i32.aload\n i32.const 3\n i32.mul\n i32.astore"
        ));
        assert!(!k(
            "load j\n br_if out\n load y\n load j\n load a\n f32.astore\n out:"
        ));
        assert!(!k(
            "load y\n load j\n load x\n load j\n f32.aload\n f32.sqrt\n f32.astore"
        ));
    }

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
        // Below a stored value that pops nothing (a constant) or pops only
        // values above it (an add, a call), the index and array are kept.
        let stored = k("load a\n load i\n i64.to_i32\n i32.const 7\n i32.astore");
        assert_eq!(stored, BTreeMap::from([(4, 1)]));
        let summed =
            k("load a\n load i\n i64.to_i32\n i32.const 7\n i32.const 8\n i32.add\n i32.astore");
        assert_eq!(summed, BTreeMap::from([(6, 1)]));
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
