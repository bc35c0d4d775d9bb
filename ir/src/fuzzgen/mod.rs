//! Random *valid* modules, for round-trip, robustness and (later) differential
//! testing, driven by [`arbitrary::Unstructured`] so that the same generator
//! serves proptest-style smoke tests and `cargo fuzz`.
//!
//! Every generated module verifies, prints and parses back to itself, and its
//! code terminates: loops are counted with a dedicated counter and a small
//! constant bound, static functions only call functions defined before them,
//! and methods make no calls. Generated code may throw (division by zero,
//! bounds, null, explicit `throw`), as real kernels do.
//!
//! Beside it (`garbage.rs`): [`arbitrary_insts`], arbitrary (mostly invalid) instruction
//! sequences with arbitrary operands, for checking that the verifier rejects
//! garbage without panicking.

use crate::isa::{Inst, Label, Op, Opcode};
use crate::module::{Class, Field, FuncDebug, FuncKind, Function, Local, Meta, Module};
use crate::types::{ClassId, ExceptionKind, F32, F64, FieldId, FuncId, LocalId, Type};
use arbitrary::{Result, Unstructured};
use std::sync::Arc;

mod garbage;
pub use garbage::arbitrary_insts;

/// Bounds on what [`arbitrary_module`] makes.
#[derive(Copy, Clone, Debug)]
pub struct GenConfig {
    /// At most this many classes.
    pub max_classes: usize,
    /// At most this many static helper functions.
    pub max_helpers: usize,
    /// At most this many kernels (at least one is made).
    pub max_kernels: usize,
    /// At most this many statements per block.
    pub max_stmts: usize,
    /// Expression nesting depth.
    pub max_depth: usize,
    /// Control-flow nesting depth (ifs and loops).
    pub max_nesting: usize,
    /// `Some(w)`: kernels are *race-free* — workitem `i` touches only
    /// elements `i·w .. i·w + w` of every array. Each generated index `x`
    /// becomes `i·w + x mod w` when `0 ≤ x`, and `-1` (out of bounds)
    /// otherwise; the workitem number is never assigned; helpers take no
    /// arrays. A launch of `n` workitems over arrays of `n·w` elements
    /// then ends the same whichever workitems run where, in whatever
    /// order: what a launch split over several devices is checked with.
    pub private_window: Option<i32>,
    /// Whether code may allocate (`new`, `newarray`); without, an object or
    /// array no local holds is `null`.
    pub allocates: bool,
    /// Whether code may use array atomics.
    pub atomics: bool,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            max_classes: 3,
            max_helpers: 2,
            max_kernels: 2,
            max_stmts: 6,
            max_depth: 3,
            max_nesting: 2,
            private_window: None,
            allocates: true,
            atomics: true,
        }
    }
}

impl GenConfig {
    /// Kernels a launch split over devices runs split (no classes, no
    /// allocation, no atomics) and whose workitems touch only their own
    /// `window` elements of each array ([`GenConfig::private_window`]).
    pub fn splittable(window: i32) -> GenConfig {
        GenConfig {
            max_classes: 0,
            private_window: Some(window.max(1)),
            allocates: false,
            atomics: false,
            ..GenConfig::default()
        }
    }
}

const SCALARS: [Type; 4] = [Type::I32, Type::I64, Type::F32, Type::F64];

/// Generate a random valid module.
pub fn arbitrary_module(u: &mut Unstructured<'_>, cfg: &GenConfig) -> Result<Module> {
    let mut m = Module {
        source: Meta(Arc::from("<generated>")),
        ..Module::default()
    };
    let method_bodies = gen_classes(u, cfg, &mut m)?;
    let nclasses = m.classes.len();
    // Static helpers, then kernels.
    let nhelpers = u.int_in_range(0..=cfg.max_helpers)?;
    let mut helpers = Vec::new();
    for h in 0..nhelpers {
        let params = (0..u.int_in_range(0..=3)?)
            .map(|p| {
                let ty = gen_capture_type(u, nclasses, false)?;
                Ok(Local {
                    name: format!("a{p}"),
                    // Arrays a helper is passed would be shared between
                    // workitems.
                    ty: match ty {
                        Type::Array(..) if cfg.private_window.is_some() => {
                            ty.array_elem().expect("an array")
                        }
                        t => t,
                    },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ret = if u.ratio(3, 4)? {
            Some(*u.choose(&SCALARS)?)
        } else {
            None
        };
        helpers.push(FuncId::new(m.funcs.len()));
        m.funcs.push(Function {
            name: format!("helper{h}"),
            kind: FuncKind::Static,
            param_count: params.len() as u32,
            locals: params,
            ret,
            body: Vec::new(),
            debug: Meta(FuncDebug::default()),
        });
    }
    let nkernels = u.int_in_range(1..=cfg.max_kernels.max(1))?;
    let mut kernels = Vec::new();
    for k in 0..nkernels {
        let mut params = vec![Local {
            name: "i".into(),
            ty: Type::I64,
        }];
        // Race-free kernels are there to write their windows: each has an
        // array at least.
        let first = usize::from(cfg.private_window.is_some());
        for p in 0..u.int_in_range(first..=4)? {
            let ty = gen_capture_type(u, nclasses, true)?;
            let ty = match ty {
                Type::Array(..) => ty,
                t if p == 0 && first == 1 => {
                    t.array_of().unwrap_or(Type::I32.array_of().expect("array"))
                }
                t => t,
            };
            params.push(Local {
                name: format!("c{p}"),
                ty,
            });
        }
        kernels.push(FuncId::new(m.funcs.len()));
        m.funcs.push(Function {
            name: format!("kernel{k}"),
            kind: FuncKind::Kernel,
            param_count: params.len() as u32,
            locals: params,
            ret: None,
            body: Vec::new(),
            debug: Meta(FuncDebug::default()),
        });
    }
    let methods: Vec<FuncId> = method_bodies.clone();
    for &f in &method_bodies {
        gen_body(u, cfg, &mut m, f, &[], &[])?;
    }
    for (h, &f) in helpers.iter().enumerate() {
        gen_body(u, cfg, &mut m, f, &helpers[..h], &methods)?;
    }
    for &f in &kernels {
        gen_body(u, cfg, &mut m, f, &helpers, &methods)?;
    }
    Ok(m)
}

/// The module's classes (each extending an earlier one or nothing), their
/// fields and their methods' signatures (new methods or overrides). Returns
/// the methods, whose bodies come later.
fn gen_classes(u: &mut Unstructured<'_>, cfg: &GenConfig, m: &mut Module) -> Result<Vec<FuncId>> {
    // Classes, each extending an earlier one or nothing.
    let nclasses = u.int_in_range(0..=cfg.max_classes)?;
    for c in 0..nclasses {
        let superclass = if c > 0 && u.ratio(1, 2)? {
            Some(ClassId::new(u.choose_index(c)?))
        } else {
            None
        };
        m.classes.push(Class {
            name: format!("C{c}"),
            superclass,
            fields: Vec::new(),
            methods: Vec::new(),
            span: Meta::default(),
            comments: Meta::default(),
        });
    }
    for c in 0..nclasses {
        for k in 0..u.int_in_range(0..=3)? {
            let ty = gen_field_type(u, nclasses)?;
            let id = FieldId::new(m.fields.len());
            m.fields.push(Field {
                name: format!("f{c}_{k}"),
                class: ClassId::new(c),
                ty,
                span: Meta::default(),
                comments: Meta::default(),
            });
            m.classes[c].fields.push(id);
        }
    }
    // Method signatures: new methods or overrides of an inherited one.
    let mut method_bodies = Vec::new();
    for c in 0..nclasses {
        let cid = ClassId::new(c);
        for k in 0..u.int_in_range(0..=2)? {
            let inherited: Vec<FuncId> = match m.classes[c].superclass {
                Some(s) => m.vtable(s),
                None => Vec::new(),
            };
            let (short, params, ret) = if !inherited.is_empty() && u.ratio(1, 2)? {
                let o = m.func(*u.choose(&inherited)?);
                let short = o.short_name().to_string();
                if m.classes[c]
                    .methods
                    .iter()
                    .any(|&x| m.func(x).short_name() == short)
                {
                    continue;
                }
                (short, o.params()[1..].to_vec(), o.ret)
            } else {
                let params = (0..u.int_in_range(0..=2)?)
                    .map(|p| {
                        Ok(Local {
                            name: format!("p{p}"),
                            ty: *u.choose(&SCALARS)?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let ret = if u.ratio(3, 4)? {
                    Some(*u.choose(&SCALARS)?)
                } else {
                    None
                };
                (format!("m{c}_{k}"), params, ret)
            };
            let id = FuncId::new(m.funcs.len());
            let mut locals = vec![Local {
                name: "this".into(),
                ty: Type::Class(cid),
            }];
            locals.extend(params);
            m.funcs.push(Function {
                name: format!("C{c}.{short}"),
                kind: FuncKind::Method {
                    class: cid,
                    is_abstract: false,
                },
                param_count: locals.len() as u32,
                locals,
                ret,
                body: Vec::new(),
                debug: Meta(FuncDebug::default()),
            });
            m.classes[c].methods.push(id);
            method_bodies.push(id);
        }
    }
    Ok(method_bodies)
}

fn gen_field_type(u: &mut Unstructured<'_>, nclasses: usize) -> Result<Type> {
    Ok(match u.int_in_range(0..=9)? {
        0..=5 => *u.choose(&SCALARS)?,
        6 | 7 if nclasses > 0 => Type::Class(ClassId::new(u.choose_index(nclasses)?)),
        _ => u.choose(&SCALARS)?.array_of().expect("scalar arrays exist"),
    })
}

fn gen_capture_type(
    u: &mut Unstructured<'_>,
    nclasses: usize,
    arrays_likely: bool,
) -> Result<Type> {
    let t = *u.choose(&SCALARS)?;
    Ok(match u.int_in_range(0..=3)? {
        0 if nclasses > 0 => Type::Class(ClassId::new(u.choose_index(nclasses)?)),
        0 | 1 => t,
        2 if !arrays_likely => t,
        _ => t.array_of().expect("scalar arrays exist"),
    })
}

struct Body<'m, 'u, 'a> {
    u: &'a mut Unstructured<'u>,
    m: &'m Module,
    cfg: GenConfig,
    insts: Vec<Inst>,
    locals: Vec<Local>,
    assigned: Vec<bool>,
    /// Loop counters: never stored to by generated statements.
    reserved: Vec<bool>,
    calls: &'m [FuncId],
    virtuals: &'m [FuncId],
    nesting: usize,
    /// A kernel: local 0 is its workitem number.
    workitem: bool,
    /// Instructions left before the generator stops adding statements.
    budget: usize,
    /// The local an index is kept in while it is mapped into the
    /// workitem's window ([`GenConfig::private_window`]).
    window_tmp: Option<usize>,
}

fn gen_body(
    u: &mut Unstructured<'_>,
    cfg: &GenConfig,
    m: &mut Module,
    f: FuncId,
    calls: &[FuncId],
    virtuals: &[FuncId],
) -> Result<()> {
    let func = m.func(f).clone();
    let mut locals = func.locals.clone();
    let nparams = locals.len();
    for l in 0..u.int_in_range(1..=5)? {
        let ty = gen_field_type(u, m.classes.len())?;
        locals.push(Local {
            name: format!("l{l}"),
            ty,
        });
    }
    let snapshot = m.clone();
    let mut b = Body {
        u,
        m: &snapshot,
        cfg: *cfg,
        insts: Vec::new(),
        assigned: (0..locals.len()).map(|i| i < nparams).collect(),
        reserved: vec![false; locals.len()],
        locals,
        calls,
        virtuals,
        nesting: 0,
        workitem: func.kind == FuncKind::Kernel
            && func.locals.first().map(|l| l.ty) == Some(Type::I64),
        budget: 400,
        window_tmp: None,
    };
    // Make sure each body has something in it when the input allows.
    b.stmt()?;
    b.block()?;
    if let Some(t) = func.ret {
        b.expr(t, 0)?;
    }
    b.insts.push(Inst::Ret);
    let target = &mut m.funcs[f.index()];
    target.locals = b.locals;
    target.body = b.insts;
    Ok(())
}

impl Body<'_, '_, '_> {
    fn emit(&mut self, i: Inst) {
        self.insts.push(i);
        self.budget = self.budget.saturating_sub(1);
    }

    fn here(&self) -> u32 {
        self.insts.len() as u32
    }

    fn patch(&mut self, at: usize, to: u32) {
        let t = self.insts[at].target_mut().expect("patching a branch");
        *t = Label(to);
    }

    fn block(&mut self) -> Result<()> {
        let n = self.u.int_in_range(0..=self.cfg.max_stmts)?;
        for _ in 0..n {
            if self.budget < 40 || self.u.is_empty() {
                break;
            }
            self.stmt()?;
        }
        Ok(())
    }

    fn locals_where(&self, pred: impl Fn(&Local, bool) -> bool) -> Vec<usize> {
        (0..self.locals.len())
            .filter(|&i| pred(&self.locals[i], self.assigned[i]))
            .collect()
    }

    fn stmt(&mut self) -> Result<()> {
        match self.u.int_in_range(0..=9)? {
            0..=2 => {
                let cands = self.locals_where(|_, _| true);
                let keep_workitem = self.workitem && self.cfg.private_window.is_some();
                // Without allocation an array local holds a capture or
                // null: only the captures are kept in array locals.
                let no_arrays = !self.cfg.allocates;
                let cands: Vec<usize> = cands
                    .into_iter()
                    .filter(|&i| !self.reserved[i])
                    .filter(|&i| !(keep_workitem && i == 0))
                    .filter(|&i| !(no_arrays && matches!(self.locals[i].ty, Type::Array(..))))
                    .collect();
                if let Ok(&l) = self.u.choose(&cands) {
                    let ty = self.locals[l].ty;
                    self.expr(ty, 0)?;
                    self.emit(Inst::Store {
                        local: LocalId::new(l),
                    });
                    self.assigned[l] = true;
                }
            }
            3 if !self.cfg.allocates && !self.arrays_held() => {
                // No array in reach to store into (it would be null).
            }
            3 => {
                // Array store.
                let t = self.pick_array_type()?;
                let e = t.array_elem().expect("array");
                self.array_operand(t, 1)?;
                self.index()?;
                self.expr(e, 1)?;
                self.emit(store_inst(e));
            }
            4 => {
                // putfield.
                if let Ok(f) = self.u.choose_index(self.m.fields.len()) {
                    let fd = &self.m.fields[f];
                    let (class, ty) = (fd.class, fd.ty);
                    self.expr(Type::Class(class), 1)?;
                    self.expr(ty, 1)?;
                    self.emit(Inst::PutField {
                        field: FieldId::new(f),
                    });
                }
            }
            5 if self.nesting < self.cfg.max_nesting => self.if_stmt()?,
            6 if self.nesting < self.cfg.max_nesting => self.loop_stmt()?,
            7 if self.cfg.atomics => {
                // Atomic update whose old value is dropped.
                let t = *self.u.choose(&[Type::I32, Type::I64])?;
                self.array_operand(t.array_of().expect("array"), 1)?;
                self.index()?;
                self.expr(t, 1)?;
                if self.u.ratio(1, 2)? {
                    self.emit(if t == Type::I32 {
                        Inst::I32ArrayAtomicAdd
                    } else {
                        Inst::I64ArrayAtomicAdd
                    });
                } else {
                    self.expr(t, 1)?;
                    self.emit(if t == Type::I32 {
                        Inst::I32ArrayCmpxchg
                    } else {
                        Inst::I64ArrayCmpxchg
                    });
                }
                self.emit(Inst::Pop);
            }
            _ => {
                let t = *self.u.choose(&SCALARS)?;
                self.expr(t, 0)?;
                self.emit(Inst::Pop);
            }
        }
        Ok(())
    }

    /// An `if` on an `i32` (or a `br_null` on a reference), with a block
    /// (or, one time in six, a `throw`) in each branch.
    fn if_stmt(&mut self) -> Result<()> {
        self.nesting += 1;
        let before = self.assigned.clone();
        if self.u.ratio(1, 4)? {
            let t = self.pick_ref_type()?;
            self.expr(t, 1)?;
            self.emit(Inst::BrNull { target: Label(0) });
        } else {
            self.expr(Type::I32, 1)?;
            self.emit(Inst::BrUnless { target: Label(0) });
        }
        // The branch just emitted, patched to the else part below.
        let branch_at = self.insts.len() - 1;
        if self.u.ratio(1, 6)? {
            let kind = *self.u.choose(&ExceptionKind::ALL)?;
            self.emit(Inst::Throw { kind });
        } else {
            self.block()?;
        }
        let mut before = before;
        // Counters of loops nested in the branch are not assigned outside it.
        before.resize(self.assigned.len(), false);
        let then_assigned = std::mem::replace(&mut self.assigned, before);
        let jump_at = self.insts.len();
        self.emit(Inst::Br { target: Label(0) });
        let else_start = self.here();
        self.patch(branch_at, else_start);
        self.block()?;
        let end = self.here();
        self.patch(jump_at, end);
        let mut then_assigned = then_assigned;
        then_assigned.resize(self.assigned.len(), false);
        for (a, t) in self.assigned.iter_mut().zip(then_assigned) {
            *a = *a && t;
        }
        self.nesting -= 1;
        Ok(())
    }

    /// A counted loop with a fresh counter and a bound of at most 4.
    fn loop_stmt(&mut self) -> Result<()> {
        // Counted loop with a fresh counter.
        self.nesting += 1;
        let c = self.locals.len();
        self.locals.push(Local {
            name: format!("n{c}"),
            ty: Type::I32,
        });
        self.assigned.push(true);
        self.reserved.push(true);
        let before = self.assigned.clone();
        let bound = self.u.int_in_range(0..=4)?;
        self.emit(Inst::I32Const { value: 0 });
        self.emit(Inst::Store {
            local: LocalId::new(c),
        });
        let head = self.here();
        self.emit(Inst::Load {
            local: LocalId::new(c),
        });
        self.emit(Inst::I32Const { value: bound });
        self.emit(Inst::I32Ge);
        let exit_at = self.insts.len();
        self.emit(Inst::BrIf { target: Label(0) });
        self.block()?;
        self.emit(Inst::Inc {
            local: LocalId::new(c),
            delta: 1,
        });
        self.emit(Inst::Br {
            target: Label(head),
        });
        let exit = self.here();
        self.patch(exit_at, exit);
        // The body may not run: keep only what was assigned before it.
        let mut before = before;
        before.resize(self.assigned.len(), false);
        for (a, b) in self.assigned.iter_mut().zip(before) {
            *a = *a && b;
        }
        self.nesting -= 1;
        Ok(())
    }

    /// Loop counters readable here (assigned), oldest first.
    fn counters(&self) -> Vec<usize> {
        (0..self.locals.len())
            .filter(|&l| self.reserved[l] && self.assigned[l])
            .collect()
    }

    /// Push an array index: [`Body::raw_index`], mapped into the workitem's
    /// window when the configuration asks for one.
    fn index(&mut self) -> Result<()> {
        self.raw_index()?;
        let Some(w) = self.cfg.private_window.filter(|_| self.workitem) else {
            return Ok(());
        };
        let tmp = match self.window_tmp {
            Some(t) => t,
            None => {
                let t = self.locals.len();
                self.locals.push(Local {
                    name: format!("w{t}"),
                    ty: Type::I32,
                });
                // Never read by generated statements: only here, after
                // the store below.
                self.assigned.push(false);
                self.reserved.push(false);
                self.window_tmp = Some(t);
                t
            }
        };
        let tmp = LocalId::new(tmp);
        // (i·w + x mod w + 1) · (0 ≤ x) − 1: a negative index stays out
        // of bounds (−1), the rest wrap into the window.
        let i = LocalId::new(0);
        for inst in [
            Inst::Store { local: tmp },
            Inst::Load { local: i },
            Inst::I64ToI32,
            Inst::I32Const { value: w },
            Inst::I32Mul,
            Inst::Load { local: tmp },
            Inst::I32Const { value: w },
            Inst::I32Rem,
            Inst::I32Add,
            Inst::I32Const { value: 1 },
            Inst::I32Add,
            Inst::Load { local: tmp },
            Inst::I32Const { value: 0 },
            Inst::I32Ge,
            Inst::I32Mul,
            Inst::I32Const { value: 1 },
            Inst::I32Sub,
        ] {
            self.emit(inst);
        }
        Ok(())
    }

    /// Push an index as the program computes it.
    fn raw_index(&mut self) -> Result<()> {
        if self.workitem && self.u.ratio(1, 4)? {
            // The workitem number: the indexing compiled code may prove in
            // bounds for a whole chunk (and so check once per chunk).
            self.emit(Inst::Load {
                local: LocalId::new(0),
            });
            self.emit(Inst::I64ToI32);
            Ok(())
        } else if let Some(&c) = self.counters().last()
            && self.u.ratio(1, 3)?
        {
            // The innermost loop's counter, scaled and shifted: the indexing
            // compiled code may check once where the loop is entered (and
            // must fall back to checking every iteration when that fails).
            self.emit(Inst::Load {
                local: LocalId::new(c),
            });
            let scale = self.u.int_in_range(1..=3)?;
            if scale != 1 {
                self.emit(Inst::I32Const { value: scale });
                self.emit(Inst::I32Mul);
            }
            let shift = self.u.int_in_range(-1..=2)?;
            if shift != 0 {
                self.emit(Inst::I32Const { value: shift });
                self.emit(Inst::I32Add);
            }
            Ok(())
        } else if self.u.ratio(3, 4)? {
            let value = self.u.int_in_range(0..=3)?;
            self.emit(Inst::I32Const { value });
            Ok(())
        } else {
            self.expr(Type::I32, 2)
        }
    }

    /// The array an access indexes: most often a local (or parameter) of
    /// type `t` where one is assigned — the arrays a loop's accesses can be
    /// checked once for on entry — else any expression of type `t`.
    fn array_operand(&mut self, t: Type, depth: usize) -> Result<()> {
        let locals = self.locals_where(|l, a| a && l.ty == t);
        if !locals.is_empty() && self.u.ratio(2, 3)? {
            let l = *self.u.choose(&locals)?;
            self.emit(Inst::Load {
                local: LocalId::new(l),
            });
            Ok(())
        } else {
            self.expr(t, depth)
        }
    }

    /// Whether an array is in reach (an assigned local holds one).
    fn arrays_held(&self) -> bool {
        !self
            .locals_where(|l, a| a && matches!(l.ty, Type::Array(..)))
            .is_empty()
    }

    fn pick_array_type(&mut self) -> Result<Type> {
        if !self.cfg.allocates {
            // The types of the arrays in reach, mostly: others are null.
            let held: Vec<Type> = self
                .locals_where(|l, a| a && matches!(l.ty, Type::Array(..)))
                .into_iter()
                .map(|l| self.locals[l].ty)
                .collect();
            if !held.is_empty() {
                return Ok(*self.u.choose(&held)?);
            }
        }
        let mut opts: Vec<Type> = SCALARS
            .iter()
            .map(|t| t.array_of().expect("array"))
            .collect();
        for l in &self.locals {
            if matches!(l.ty, Type::Array(..)) {
                opts.push(l.ty);
            }
        }
        Ok(*self.u.choose(&opts)?)
    }

    fn pick_ref_type(&mut self) -> Result<Type> {
        if !self.m.classes.is_empty() && self.u.ratio(1, 2)? {
            Ok(Type::Class(ClassId::new(
                self.u.choose_index(self.m.classes.len())?,
            )))
        } else {
            self.pick_array_type()
        }
    }

    /// Push code that leaves one value of type `t` (or a subtype) on the stack.
    fn expr(&mut self, t: Type, depth: usize) -> Result<()> {
        let leaf = depth >= self.cfg.max_depth || self.budget < 30 || self.u.is_empty();
        // Assigned locals of an assignable type.
        let m = self.m;
        let locals = self.locals_where(|l, a| a && crate::verifier::assignable(m, l.ty, t));
        if !locals.is_empty() && self.u.ratio(1, 3)? {
            let l = *self.u.choose(&locals)?;
            self.emit(Inst::Load {
                local: LocalId::new(l),
            });
            return Ok(());
        }
        match t {
            Type::Class(c) => {
                let subs: Vec<ClassId> = (0..m.classes.len())
                    .map(ClassId::new)
                    .filter(|&s| m.is_subclass(s, c))
                    .collect();
                if !self.cfg.allocates {
                    self.emit(Inst::RefNull);
                } else if leaf || self.u.ratio(1, 2)? {
                    if self.u.ratio(1, 5)? {
                        self.emit(Inst::RefNull);
                    } else {
                        let class = *self.u.choose(&subs)?;
                        self.emit(Inst::New { class });
                    }
                } else {
                    // A class-typed field read, or a cast.
                    let fields: Vec<usize> = (0..m.fields.len())
                        .filter(|&f| crate::verifier::assignable(m, m.fields[f].ty, t))
                        .collect();
                    if let Ok(&f) = self.u.choose(&fields) {
                        self.expr(Type::Class(m.fields[f].class), depth + 1)?;
                        self.emit(Inst::GetField {
                            field: FieldId::new(f),
                        });
                    } else {
                        let class = *self.u.choose(&subs)?;
                        self.emit(Inst::New { class });
                        self.emit(Inst::CheckCast { ty: t });
                    }
                }
            }
            // Without allocation, an array no local holds would be null:
            // the kernel's arrays, wherever they are in reach.
            Type::Array(..) if !self.cfg.allocates => match self.u.choose(&locals) {
                Ok(&l) if self.u.ratio(7, 8)? => self.emit(Inst::Load {
                    local: LocalId::new(l),
                }),
                _ => self.emit(Inst::RefNull),
            },
            Type::Array(..) => {
                let elem = t.array_elem().expect("array");
                let len = self.u.int_in_range(0..=4)?;
                self.emit(Inst::I32Const { value: len });
                self.emit(Inst::NewArray { elem });
            }
            Type::Ref | Type::Null => self.emit(Inst::RefNull),
            scalar if leaf => self.constant(scalar)?,
            scalar => self.scalar(scalar, depth)?,
        }
        Ok(())
    }

    fn constant(&mut self, t: Type) -> Result<()> {
        let i = match t {
            Type::I32 => Inst::I32Const {
                value: if self.u.ratio(3, 4)? {
                    self.u.int_in_range(-4..=9)?
                } else {
                    self.u.arbitrary()?
                },
            },
            Type::I64 => Inst::I64Const {
                value: if self.u.ratio(3, 4)? {
                    self.u.int_in_range(-4..=9)?
                } else {
                    self.u.arbitrary()?
                },
            },
            Type::F32 => Inst::F32Const {
                value: if self.u.ratio(3, 4)? {
                    F32::new(f32::from(self.u.int_in_range(-8i16..=8)?) * 0.5)
                } else {
                    F32(self.u.arbitrary()?)
                },
            },
            _ => Inst::F64Const {
                value: if self.u.ratio(3, 4)? {
                    F64::new(f64::from(self.u.int_in_range(-8i16..=8)?) * 0.25)
                } else {
                    F64(self.u.arbitrary()?)
                },
            },
        };
        self.emit(i);
        Ok(())
    }

    fn scalar(&mut self, t: Type, depth: usize) -> Result<()> {
        let d = depth + 1;
        match self.u.int_in_range(0..=9)? {
            0 | 1 => {
                self.expr(t, d)?;
                self.expr(t, d)?;
                let op = *self.u.choose(&binops(t))?;
                self.emit(op);
            }
            2 => {
                self.expr(t, d)?;
                let op = *self.u.choose(&unops(t))?;
                self.emit(op);
            }
            3 => {
                // Conversion from another scalar.
                let from = *self.u.choose(&SCALARS)?;
                self.expr(from, d)?;
                // Converting a type to itself needs no instruction.
                if let Some(c) = convert(from, t) {
                    self.emit(c);
                }
            }
            4 if t == Type::I32 => {
                let from = *self.u.choose(&SCALARS)?;
                self.expr(from, d)?;
                self.expr(from, d)?;
                let op = *self.u.choose(&compares(from))?;
                self.emit(op);
            }
            5 if !self.cfg.allocates
                && self
                    .locals_where(|l, a| a && Some(l.ty) == t.array_of())
                    .is_empty() =>
            {
                // No array of `t` in reach: it would be null.
                self.constant(t)?;
            }
            5 => {
                let arr = t.array_of().expect("array");
                self.array_operand(arr, d)?;
                self.index()?;
                self.emit(load_inst(t));
            }
            6 => {
                let fields: Vec<usize> = (0..self.m.fields.len())
                    .filter(|&f| self.m.fields[f].ty == t)
                    .collect();
                if let Ok(&f) = self.u.choose(&fields) {
                    self.expr(Type::Class(self.m.fields[f].class), d)?;
                    self.emit(Inst::GetField {
                        field: FieldId::new(f),
                    });
                } else {
                    self.constant(t)?;
                }
            }
            7 => {
                let calls: Vec<FuncId> = self
                    .calls
                    .iter()
                    .copied()
                    .filter(|&f| self.m.func(f).ret == Some(t))
                    .collect();
                let virts: Vec<FuncId> = self
                    .virtuals
                    .iter()
                    .copied()
                    .filter(|&f| self.m.func(f).ret == Some(t))
                    .collect();
                let (callee, virt) = match (calls.is_empty(), virts.is_empty()) {
                    (false, true) => (*self.u.choose(&calls)?, false),
                    (true, false) => (*self.u.choose(&virts)?, true),
                    (false, false) if self.u.ratio(1, 2)? => (*self.u.choose(&calls)?, false),
                    (false, false) => (*self.u.choose(&virts)?, true),
                    (true, true) => return self.constant(t),
                };
                let params: Vec<Type> = self.m.func(callee).param_types().collect();
                for p in params {
                    self.expr(p, d)?;
                }
                self.emit(if virt {
                    Inst::CallVirt { method: callee }
                } else {
                    Inst::Call { func: callee }
                });
            }
            8 if t == Type::I32 => {
                if !self.cfg.allocates && !self.arrays_held() {
                    self.constant(t)?;
                } else if self.u.ratio(1, 2)? {
                    let a = self.pick_array_type()?;
                    self.expr(a, d)?;
                    self.emit(Inst::ArrayLen);
                } else {
                    let r = self.pick_ref_type()?;
                    self.expr(r, d)?;
                    let ty = self.pick_ref_type()?;
                    self.emit(Inst::InstanceOf { ty });
                }
            }
            _ => self.constant(t)?,
        }
        Ok(())
    }
}

/// The instructions of the table whose operation class `class` accepts
/// (arithmetic with a fixed effect, so no operands), in table order.
fn table_insts(class: impl Fn(Op) -> bool) -> Vec<Inst> {
    Opcode::ALL
        .iter()
        .filter(|o| class(o.op()))
        .filter_map(|o| o.bare())
        .collect()
}

/// The binary operations on values of type `t`.
fn binops(t: Type) -> Vec<Inst> {
    table_insts(|op| matches!(op, Op::Binary(k, _) if k == t.kind()))
}

/// The unary operations on values of type `t`.
fn unops(t: Type) -> Vec<Inst> {
    table_insts(|op| matches!(op, Op::Unary(k, _) if k == t.kind()))
}

/// The comparisons of values of type `t`.
fn compares(t: Type) -> Vec<Inst> {
    table_insts(|op| matches!(op, Op::Compare(k, _) if k == t.kind()))
}

/// The conversion from `from` to `to`, if there is one.
fn convert(from: Type, to: Type) -> Option<Inst> {
    table_insts(|op| op == Op::Convert(from.kind(), to.kind()))
        .first()
        .copied()
}

fn load_inst(t: Type) -> Inst {
    match t {
        Type::I32 => Inst::I32ALoad,
        Type::I64 => Inst::I64ALoad,
        Type::F32 => Inst::F32ALoad,
        Type::F64 => Inst::F64ALoad,
        _ => Inst::RefALoad,
    }
}

fn store_inst(t: Type) -> Inst {
    match t {
        Type::I32 => Inst::I32AStore,
        Type::I64 => Inst::I64AStore,
        Type::F32 => Inst::F32AStore,
        Type::F64 => Inst::F64AStore,
        _ => Inst::RefAStore,
    }
}
