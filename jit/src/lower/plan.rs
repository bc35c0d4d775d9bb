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

use crate::CompileOptions;
use crate::lower::{MAX_INLINE_DEPTH, MAX_INLINED_INSTS};
use crate::spec::Speculations;
use crate::{JitError, Refusal};
use offload_deopt::{Assumption, DeoptMetadata, Reason};
use offload_ir::analysis::{DeoptSite, FuncAnalysis};
use offload_ir::{Bci, ClassId, FuncId, SiteId, Type};
use offload_program::Program;
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
        let v = prog.verified();
        let f = v.func(callee);
        let callee_name = f.name.clone();
        let refuse = |why: Refusal| JitError::Unsupported {
            func: chain
                .last()
                .map_or_else(String::new, |&c| v.func(c).name.clone()),
            bci,
            why,
        };
        if chain.contains(&callee) {
            return Err(refuse(Refusal::Recursive {
                callee: callee_name,
            }));
        }
        if chain.len() > MAX_INLINE_DEPTH {
            return Err(refuse(Refusal::TooDeep {
                callee: callee_name,
            }));
        }
        self.insts += f.body.len();
        if self.insts > MAX_INLINED_INSTS {
            return Err(refuse(Refusal::TooBig {
                callee: callee_name,
            }));
        }
        prog.analysis(callee).ok_or_else(|| {
            refuse(Refusal::AbstractCall {
                callee: callee_name.clone(),
            })
        })
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
        return Err(JitError::BadInjection {
            bci: inj.site_bci,
            why: "not a deopt site, or modulus not positive",
        });
    }
    if let Some(inj) = opts.inject
        && let Some(r) = inj.reason
        && meta
            .site_at(inj.site_bci)
            .is_some_and(|s| !s.reasons.contains(&r))
    {
        return Err(JitError::BadInjection {
            bci: inj.site_bci,
            why: "the site cannot deoptimize for the reason asked for",
        });
    }
    Ok(())
}

/// The implementations a `callvirt method` at `bci` can reach (class
/// hierarchy analysis over the module), each with the global class ids of
/// the receivers that select it. A receiver of any other class deopts.
pub(crate) fn virtual_targets(
    prog: &Program,
    func: FuncId,
    method: FuncId,
    bci: Bci,
) -> Result<Vec<(FuncId, Vec<u32>)>, JitError> {
    let v = prog.verified();
    let m = v.func(method);
    let offload_ir::FuncKind::Method { class: decl, .. } = m.kind else {
        return Err(JitError::Unsupported {
            func: v.func(func).name.clone(),
            bci,
            why: Refusal::NotAMethod {
                callee: m.name.clone(),
            },
        });
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
            targets: virtual_targets(prog, func, method, bci)?,
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
            let h = offload_heap::Header::Array {
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
pub(crate) fn new_array(
    prog: &Program,
    func: FuncId,
    elem: Type,
    bci: Bci,
) -> Result<(u32, u32), JitError> {
    let refuse = || JitError::Unsupported {
        func: prog.verified().func(func).name.clone(),
        bci,
        why: Refusal::NoArrayHeader {
            elem: prog.verified().type_name(elem),
        },
    };
    let Some(Type::Array(e, d)) = elem.array_of() else {
        return Err(refuse());
    };
    let h = offload_heap::Header::Array {
        elem: prog.global_elem(e),
        dims: d,
        len: 0,
    };
    let Some((tag, _)) = h.encode() else {
        return Err(refuse());
    };
    let esize = offload_heap::layout::kind_size(offload_heap::layout::array_elem_kind(
        prog.global_elem(e),
        d,
    ));
    Ok((tag, esize))
}
