//! The builder that one function body is lowered into: locals and scopes,
//! instructions with their source spans, forward labels, and instructions
//! whose type waits for an unsuffixed literal's type to settle.

use crate::error::{Error, R, err};
use crate::items::Decls;
use crate::ty::{Ty, Vars};
use offload_ir::module::{FuncDebug, Meta};
use offload_ir::{Bci, FuncId, Inst, Label, Local, LocalId, Module, Span};
use std::collections::BTreeMap;

/// A name in scope.
#[derive(Copy, Clone, Debug)]
pub struct Binding {
    /// Its local.
    pub local: LocalId,
    /// Its type (may be an unsettled literal type).
    pub ty: Ty,
    /// Declared `mut`.
    pub mutable: bool,
}

/// A loop that `break` and `continue` can leave or restart.
#[derive(Clone, Debug)]
pub struct Loop {
    /// Its label (`'outer`), without the quote.
    pub label: Option<String>,
    /// Where `break` goes.
    pub exit: usize,
    /// Where `continue` goes.
    pub next: usize,
}

/// An instruction that depends on a type not settled yet: made by `make`
/// once it is.
struct Patch {
    at: usize,
    ty: Ty,
    span: Span,
    make: Box<dyn Fn(Ty) -> Result<Inst, String>>,
}

/// One function being lowered.
pub struct Fb<'d, 'a> {
    /// What the file declares.
    pub d: &'d Decls<'a>,
    /// The function.
    pub func: FuncId,
    /// Its locals (parameters first); types are set when it is finished.
    locals: Vec<Local>,
    /// The source type of each local.
    local_tys: Vec<Ty>,
    code: Vec<Inst>,
    spans: Vec<Span>,
    /// Each label's position, once placed.
    labels: Vec<Option<Bci>>,
    /// Each label's name, for the printed bytecode.
    label_names: Vec<String>,
    /// Whether a branch goes to each label.
    label_used: Vec<bool>,
    fixups: Vec<(usize, usize)>,
    patches: Vec<Patch>,
    scopes: Vec<Vec<(String, Binding)>>,
    /// The loops around the code being lowered, innermost last.
    pub loops: Vec<Loop>,
    /// Unsuffixed literals' types.
    pub vars: Vars,
    /// Whether control can reach the next instruction.
    pub reachable: bool,
    /// The function's result type.
    pub ret: Ty,
    /// The span the next instructions are attributed to.
    pub span: Span,
    label_count: usize,
}

impl<'d, 'a> Fb<'d, 'a> {
    /// A builder for `func`, with its parameters bound.
    pub fn new(d: &'d Decls<'a>, func: FuncId) -> Self {
        let f = d.module.func(func);
        let sig = &d.sigs[func.index()];
        let mut fb = Fb {
            d,
            func,
            locals: f.locals.clone(),
            local_tys: sig.params.iter().map(|p| p.ty).collect(),
            code: Vec::new(),
            spans: Vec::new(),
            labels: Vec::new(),
            label_names: Vec::new(),
            label_used: Vec::new(),
            fixups: Vec::new(),
            patches: Vec::new(),
            scopes: vec![Vec::new()],
            loops: Vec::new(),
            vars: Vars::default(),
            reachable: true,
            ret: sig.ret,
            span: sig.span,
            label_count: 0,
        };
        if sig.kernel {
            fb.local_tys[0] = Ty::I64;
        }
        for (k, p) in sig.params.iter().enumerate() {
            fb.bind(
                &p.name,
                Binding {
                    local: LocalId::new(k),
                    ty: fb.local_tys[k],
                    mutable: p.mutable,
                },
            );
        }
        fb
    }

    /// The module's skeleton.
    pub fn m(&self) -> &'d Module {
        &self.d.module
    }

    /// The name of `t` as a user writes it.
    pub fn ty_name(&self, t: Ty) -> String {
        let t = self.vars.resolve(t);
        match t {
            Ty::Var(_) if self.vars.is_float(t) => "{float}".into(),
            Ty::Var(_) => "{integer}".into(),
            t => t.name(self.m()),
        }
    }

    // ---- locals and scopes ----

    /// A new local of type `ty` named after `name` (made unique).
    pub fn new_local(&mut self, name: &str, ty: Ty) -> LocalId {
        let mut n = name.to_string();
        let mut k = 1;
        while self.locals.iter().any(|l| l.name == n) {
            n = format!("{name}_{k}");
            k += 1;
        }
        self.locals.push(Local {
            name: n,
            ty: offload_ir::Type::I32,
        });
        self.local_tys.push(ty);
        LocalId::new(self.locals.len() - 1)
    }

    /// A scratch local for the lowering's own use.
    pub fn temp(&mut self, ty: Ty) -> LocalId {
        self.new_local("tmp", ty)
    }

    /// Bind `name` in the innermost scope (shadowing as `let` does).
    pub fn bind(&mut self, name: &str, b: Binding) {
        self.scopes
            .last_mut()
            .expect("a scope")
            .push((name.to_string(), b));
    }

    /// The binding `name` refers to here.
    pub fn lookup(&self, name: &str) -> Option<Binding> {
        self.scopes
            .iter()
            .rev()
            .flat_map(|s| s.iter().rev())
            .find(|(n, _)| n == name)
            .map(|(_, b)| *b)
    }

    /// Every name in scope (for suggestions).
    pub fn names_in_scope(&self) -> Vec<String> {
        self.scopes
            .iter()
            .flat_map(|s| s.iter().map(|(n, _)| n.clone()))
            .collect()
    }

    /// Open a block scope.
    pub fn push_scope(&mut self) {
        self.scopes.push(Vec::new());
    }

    /// Close the innermost block scope.
    pub fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    // ---- code ----

    /// Append `inst`, attributed to the current span.
    pub fn emit(&mut self, inst: Inst) {
        let flow_ends = matches!(inst, Inst::Br { .. } | Inst::Ret | Inst::Throw { .. });
        self.code.push(inst);
        self.spans.push(self.span);
        if flow_ends {
            self.reachable = false;
        }
    }

    /// Append the instruction `make` gives for type `ty`, now if `ty` is
    /// settled, else once it is (`make`'s error: the type does not fit).
    pub fn emit_typed(
        &mut self,
        ty: Ty,
        make: impl Fn(Ty) -> Result<Inst, String> + 'static,
    ) -> R<()> {
        let t = self.vars.resolve(ty);
        if let Ty::Var(_) = t {
            self.patches.push(Patch {
                at: self.code.len(),
                ty: t,
                span: self.span,
                make: Box::new(make),
            });
            self.emit(Inst::Pop);
            Ok(())
        } else {
            let inst = make(t).map_err(|m| Error::new(self.span, m))?;
            self.emit(inst);
            Ok(())
        }
    }

    /// A new label, named after `what` in the printed bytecode.
    pub fn label(&mut self, what: &str) -> usize {
        self.label_count += 1;
        self.labels.push(None);
        self.label_names
            .push(format!("{what}_{}", self.label_count));
        self.label_used.push(false);
        self.labels.len() - 1
    }

    /// Place `l` at the next instruction.
    pub fn place(&mut self, l: usize) {
        self.labels[l] = Some(self.code.len() as Bci);
        if self.label_used[l] {
            self.reachable = true;
        }
    }

    /// A branch instruction (`Br`, `BrIf`, ...) to `l`.
    pub fn branch(&mut self, make: fn(Label) -> Inst, l: usize) {
        self.label_used[l] = true;
        self.fixups.push((self.code.len(), l));
        self.emit(make(Label(0)));
    }

    /// Whether a branch to `l` has been emitted.
    pub fn is_used(&self, l: usize) -> bool {
        self.label_used[l]
    }

    /// The finished function: branch targets resolved, literal-typed
    /// instructions and locals settled.
    pub fn finish(mut self) -> R<offload_ir::Function> {
        if self.reachable {
            if self.ret == Ty::Unit || self.ret == Ty::Never {
                self.emit(Inst::Ret);
            } else {
                let sig = &self.d.sigs[self.func.index()];
                return err(
                    sig.span,
                    format!(
                        "this function must return a `{}`, but its end can be reached without a value",
                        self.ty_name(self.ret)
                    ),
                );
            }
        }
        let mut names = BTreeMap::new();
        for (l, pos) in self.labels.iter().enumerate() {
            if let Some(p) = pos
                && self.label_used[l]
            {
                names
                    .entry(*p)
                    .or_insert_with(|| self.label_names[l].clone());
            }
        }
        for &(at, l) in &self.fixups {
            let target = self.labels[l].expect("every used label is placed");
            let inst = &mut self.code[at];
            *inst = match *inst {
                Inst::Br { .. } => Inst::Br {
                    target: Label(target),
                },
                Inst::BrIf { .. } => Inst::BrIf {
                    target: Label(target),
                },
                Inst::BrUnless { .. } => Inst::BrUnless {
                    target: Label(target),
                },
                Inst::BrNull { .. } => Inst::BrNull {
                    target: Label(target),
                },
                Inst::BrNonNull { .. } => Inst::BrNonNull {
                    target: Label(target),
                },
                other => other,
            };
        }
        for p in std::mem::take(&mut self.patches) {
            let t = self.vars.settle(p.ty);
            self.code[p.at] = (p.make)(t).map_err(|m| Error::new(p.span, m))?;
        }
        for (l, t) in self.locals.iter_mut().zip(&self.local_tys) {
            if let Some(ir) = self.vars.settle(*t).ir() {
                l.ty = ir;
            }
        }
        // The kernel's `i64` index parameter keeps its bytecode type.
        let mut f = self.d.module.func(self.func).clone();
        let params = f.param_count as usize;
        for (k, l) in self.locals.iter_mut().enumerate().take(params) {
            l.ty = f.locals[k].ty;
        }
        f.locals = self.locals;
        f.body = self.code;
        f.debug = Meta(FuncDebug {
            span: f.debug.span,
            inst_spans: self.spans,
            labels: names,
            ..FuncDebug::default()
        });
        Ok(f)
    }
}
