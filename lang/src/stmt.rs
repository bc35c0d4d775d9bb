//! Statements and control flow: blocks, `let`, assignment, `if`, the
//! loops, `break`, `continue` and `return`.

use crate::error::{Error, R, err, expr_span, span_of};
use crate::func::{Binding, Fb, Loop};
use crate::ops;
use crate::ty::Ty;
use offload_ir::isa::{BinOp, CmpOp};
use offload_ir::{Inst, LocalId};
use syn::spanned::Spanned;

impl Fb<'_, '_> {
    /// A block: its statements in a scope of their own; its value is its
    /// tail expression's (or `()`).
    pub fn block(&mut self, b: &syn::Block, want: Option<Ty>) -> R<Ty> {
        self.push_scope();
        let r = self.stmts(&b.stmts, want);
        self.pop_scope();
        r
    }

    fn stmts(&mut self, stmts: &[syn::Stmt], want: Option<Ty>) -> R<Ty> {
        let mut ty = Ty::Unit;
        let mut diverged = false;
        for (k, s) in stmts.iter().enumerate() {
            let last = k + 1 == stmts.len();
            let saved = self.span;
            self.span = match s {
                syn::Stmt::Expr(e, _) => expr_span(e),
                syn::Stmt::Local(l) => span_of(
                    l.let_token
                        .span
                        .join(l.semi_token.span)
                        .unwrap_or(l.let_token.span),
                ),
                s => span_of(s.span()),
            };
            let t = match s {
                syn::Stmt::Local(l) => self.let_stmt(l).map(|_| Ty::Unit),
                syn::Stmt::Expr(e, None) if last => self.expr(e, want),
                syn::Stmt::Expr(e, None) => {
                    let t = self.expr(e, Some(Ty::Unit))?;
                    let r = self.vars.resolve(t);
                    if r != Ty::Unit && r != Ty::Never {
                        return Err(Error::mismatch(
                            span_of(e.span()),
                            "this expression's value is unused: end it with `;`".into(),
                            "()".into(),
                            self.ty_name(t),
                        ));
                    }
                    Ok(r)
                }
                syn::Stmt::Expr(e, Some(_)) => {
                    let t = self.expr(e, None)?;
                    self.drop_value(t);
                    Ok(if self.vars.resolve(t) == Ty::Never {
                        Ty::Never
                    } else {
                        Ty::Unit
                    })
                }
                syn::Stmt::Macro(m) => {
                    let t = self.mac(&m.mac, None)?;
                    self.drop_value(t);
                    Ok(if t == Ty::Never { Ty::Never } else { Ty::Unit })
                }
                syn::Stmt::Item(i) => err(
                    span_of(i.span()),
                    "items go at the top of the file, not inside a function",
                ),
            };
            self.span = saved;
            let t = t?;
            diverged |= t == Ty::Never;
            ty = if last && matches!(s, syn::Stmt::Expr(_, None)) {
                t
            } else {
                Ty::Unit
            };
        }
        Ok(if diverged { Ty::Never } else { ty })
    }

    /// Pop a value nobody uses.
    fn drop_value(&mut self, t: Ty) {
        let t = self.vars.resolve(t);
        if t != Ty::Unit && t != Ty::Never {
            self.emit(Inst::Pop);
        }
    }

    fn let_stmt(&mut self, l: &syn::Local) -> R<()> {
        let sp = self.span;
        let (pat, annot) = match &l.pat {
            syn::Pat::Type(pt) => (&*pt.pat, Some(crate::items::parse_ty(self.m(), &pt.ty)?)),
            p => (p, None),
        };
        let (name, mutable, psp) = match pat {
            syn::Pat::Ident(pi) => {
                if pi.by_ref.is_some() || pi.subpat.is_some() {
                    return err(span_of(pi.span()), "a `let` binds a plain name here");
                }
                (
                    Some(pi.ident.to_string()),
                    pi.mutability.is_some(),
                    span_of(pi.ident.span()),
                )
            }
            syn::Pat::Wild(w) => (None, false, span_of(w.span())),
            p => {
                return err(
                    span_of(p.span()),
                    "a `let` binds one name (patterns are not supported)",
                );
            }
        };
        let Some(init) = &l.init else {
            return err(
                psp,
                "give the variable its first value where it is declared: `let x = ...;`",
            );
        };
        if let Some((_, e)) = &init.diverge {
            return err(span_of(e.span()), "`let ... else` is not supported");
        }
        let t = match annot {
            Some(want) => {
                self.expr_as(&init.expr, want, "this `let`")?;
                want
            }
            None => self.expr(&init.expr, None)?,
        };
        self.span = sp;
        let r = self.vars.resolve(t);
        match r {
            Ty::Unit => {
                return err(
                    span_of(init.expr.span()),
                    "this expression has no value to bind",
                );
            }
            Ty::Null => {
                return err(
                    psp,
                    "type annotations needed: write the class, `let x: Option<C> = None;`",
                );
            }
            _ => {}
        }
        let Some(name) = name else {
            self.drop_value(t);
            return Ok(());
        };
        if r == Ty::Never {
            return Ok(());
        }
        let local = self.new_local(&name, t);
        self.emit(Inst::Store { local });
        self.bind(
            &name,
            Binding {
                local,
                ty: t,
                mutable,
            },
        );
        Ok(())
    }

    /// The local a place expression names, for assignment: checks `mut`.
    fn local_place(&mut self, p: &syn::ExprPath) -> R<Binding> {
        let sp = span_of(p.span());
        let name = p
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let Some(b) = self.lookup(&name) else {
            let names = self.names_in_scope();
            return err(
                sp,
                format!(
                    "cannot find `{name}` in this scope{}",
                    offload_ir::did_you_mean(&name, names.iter().map(String::as_str))
                ),
            );
        };
        if !b.mutable {
            return err(
                sp,
                if name == "self" {
                    "cannot assign to `self`".to_string()
                } else {
                    format!(
                        "cannot assign twice to immutable variable `{name}`: declare it `let mut {name}`"
                    )
                },
            );
        }
        Ok(b)
    }

    /// `place = value`.
    pub fn assign(&mut self, a: &syn::ExprAssign) -> R<()> {
        let sp = self.span;
        match &*a.left {
            syn::Expr::Path(p) => {
                let b = self.local_place(p)?;
                self.expr_as(&a.right, b.ty, "this assignment")?;
                self.span = sp;
                self.emit(Inst::Store { local: b.local });
            }
            syn::Expr::Index(i) => {
                let arr = self.array(&i.expr)?;
                self.check_mutable(arr, &i.expr)?;
                self.index(&i.index)?;
                self.expr_as(&a.right, arr.element(), "this element")?;
                self.span = sp;
                self.emit(ops::astore(arr.elem, arr.dims));
            }
            syn::Expr::Field(f) => {
                let (field, ty) = self.field_of(f)?;
                let name = self.m().field(field).name.clone();
                self.expr_as(&a.right, ty, &format!("field `{name}`"))?;
                self.span = sp;
                self.emit(Inst::PutField { field });
            }
            syn::Expr::Infer(_) => {
                let t = self.expr(&a.right, None)?;
                self.drop_value(t);
            }
            syn::Expr::Paren(p) => {
                let inner = syn::ExprAssign {
                    attrs: Vec::new(),
                    left: p.expr.clone(),
                    eq_token: a.eq_token,
                    right: a.right.clone(),
                };
                return self.assign(&inner);
            }
            other => return err(span_of(other.span()), "cannot assign to this expression"),
        }
        Ok(())
    }

    fn check_mutable(&self, a: crate::ty::ArrTy, e: &syn::Expr) -> R<()> {
        if a.mutable {
            return Ok(());
        }
        err(
            span_of(e.span()),
            format!(
                "cannot assign through `{}`: declare it `&mut`",
                crate::ty::Ty::Arr(a).name(self.m())
            ),
        )
    }

    /// `place op= value`.
    pub fn compound(&mut self, place: &syn::Expr, op: BinOp, value: &syn::Expr) -> R<()> {
        let sp = self.span;
        match place {
            syn::Expr::Path(p) => {
                let b = self.local_place(p)?;
                // `k += 1` on an integer: the bytecode's `inc`.
                if matches!(op, BinOp::Add | BinOp::Sub)
                    && self.vars.is_int(b.ty)
                    && let Some(delta) = small_int(value)
                {
                    let delta = if op == BinOp::Sub { -delta } else { delta };
                    if let Some(delta) = delta.checked_mul(1).filter(|d| i32::try_from(*d).is_ok())
                    {
                        self.emit(Inst::Inc {
                            local: b.local,
                            delta: delta as i32,
                        });
                        return Ok(());
                    }
                }
                self.emit(Inst::Load { local: b.local });
                self.compound_value(op, b.ty, value)?;
                self.span = sp;
                self.emit(Inst::Store { local: b.local });
            }
            syn::Expr::Index(i) => {
                let arr = self.array(&i.expr)?;
                self.check_mutable(arr, &i.expr)?;
                let a = self.temp(Ty::Arr(arr));
                self.emit(Inst::Store { local: a });
                self.index(&i.index)?;
                self.span = sp;
                let k = self.temp(Ty::I32);
                self.emit(Inst::Store { local: k });
                for _ in 0..2 {
                    self.emit(Inst::Load { local: a });
                    self.emit(Inst::Load { local: k });
                }
                self.emit(ops::aload(arr.elem, arr.dims));
                self.compound_value(op, arr.element(), value)?;
                self.span = sp;
                self.emit(ops::astore(arr.elem, arr.dims));
            }
            syn::Expr::Field(f) => {
                let (field, ty) = self.field_of(f)?;
                self.span = sp;
                self.emit(Inst::Dup);
                self.emit(Inst::GetField { field });
                self.compound_value(op, ty, value)?;
                self.span = sp;
                self.emit(Inst::PutField { field });
            }
            syn::Expr::Paren(p) => return self.compound(&p.expr, op, value),
            other => return err(span_of(other.span()), "cannot assign to this expression"),
        }
        Ok(())
    }

    /// With the place's value (of type `t`) on the stack: push `value` and
    /// apply `op`.
    fn compound_value(&mut self, op: BinOp, t: Ty, value: &syn::Expr) -> R<()> {
        let sp = self.span;
        let vt = self.expr(value, Some(t))?;
        self.span = sp;
        if matches!(op, BinOp::Shl | BinOp::Shr) {
            self.shift_count(t, vt)?;
        } else {
            let u = self.vars.unify(t, vt).ok_or_else(|| {
                Error::mismatch(
                    span_of(value.span()),
                    format!("`{}=` needs a value of the place's type", ops::symbol(op)),
                    self.ty_name(t),
                    self.ty_name(vt),
                )
            })?;
            let bitwise = ops::is_bitwise(op);
            if !(self.vars.is_num(u) && !(bitwise && self.vars.is_float(u))
                || bitwise && self.vars.resolve(u) == Ty::Bool)
            {
                return err(
                    sp,
                    format!(
                        "`{}=` does not apply to `{}`",
                        ops::symbol(op),
                        self.ty_name(u)
                    ),
                );
            }
        }
        self.emit_typed(t, move |t| ops::arith(op, t))
    }

    /// `if` (and `if let Some(x) = e`), as a statement or with a value.
    pub fn if_expr(&mut self, i: &syn::ExprIf, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        let els = self.label("else");
        let end = self.label("end_if");
        self.push_scope();
        self.if_condition(&i.cond, els)?;
        let want = if i.else_branch.is_none() {
            Some(Ty::Unit)
        } else {
            want
        };
        let t1 = self.block(&i.then_branch, want)?;
        self.pop_scope();
        let Some((_, else_e)) = &i.else_branch else {
            let r = self.vars.resolve(t1);
            if r != Ty::Unit && r != Ty::Never {
                return Err(Error::mismatch(
                    span_of(i.then_branch.span()),
                    "an `if` without `else` has no value: add an `else`, or end the block's last expression with `;`".into(),
                    "()".into(),
                    self.ty_name(t1),
                ));
            }
            self.span = sp;
            self.place(els);
            return Ok(Ty::Unit);
        };
        self.span = sp;
        if self.reachable {
            self.branch(|target| Inst::Br { target }, end);
        }
        self.place(els);
        let want2 = match self.vars.resolve(t1) {
            Ty::Never => want,
            t => Some(want.unwrap_or(t)),
        };
        let t2 = self.expr(else_e, want2)?;
        self.span = sp;
        self.place(end);
        self.join(t1, t2, span_of(else_e.span()))
    }

    /// The type of a value that comes from either of two branches.
    fn join(&mut self, a: Ty, b: Ty, span: offload_ir::Span) -> R<Ty> {
        let (ra, rb) = (self.vars.resolve(a), self.vars.resolve(b));
        match (ra, rb) {
            (Ty::Never, t) | (t, Ty::Never) => Ok(t),
            (Ty::Null, Ty::Obj { class, .. }) | (Ty::Obj { class, .. }, Ty::Null) => Ok(Ty::Obj {
                class,
                nullable: true,
            }),
            (
                Ty::Obj {
                    class: x,
                    nullable: nx,
                },
                Ty::Obj {
                    class: y,
                    nullable: ny,
                },
            ) => {
                let m = self.m();
                let common = m.ancestors(x).find(|&c| m.is_subclass(y, c));
                match common {
                    Some(class) => Ok(Ty::Obj {
                        class,
                        nullable: nx || ny,
                    }),
                    None => Err(Error::mismatch(
                        span,
                        "the branches' classes have no common superclass".into(),
                        self.ty_name(a),
                        self.ty_name(b),
                    )),
                }
            }
            _ => self.vars.unify(a, b).ok_or_else(|| {
                Error::mismatch(
                    span,
                    "`if` and `else` have different types".into(),
                    self.ty_name(a),
                    self.ty_name(b),
                )
            }),
        }
    }

    /// Branch to `otherwise` unless `cond` holds; binds an `if let`'s name
    /// in the current scope.
    fn if_condition(&mut self, cond: &syn::Expr, otherwise: usize) -> R<()> {
        if let syn::Expr::Let(l) = cond {
            let (name, psp) = some_pattern(&l.pat)?;
            let t = self.expr(&l.expr, None)?;
            let class = match self.vars.resolve(t) {
                Ty::Obj {
                    class,
                    nullable: true,
                } => class,
                t => {
                    return Err(Error::mismatch(
                        span_of(l.expr.span()),
                        "`if let Some(x)` unwraps an `Option`".into(),
                        "an `Option<C>`".into(),
                        self.ty_name(t),
                    ));
                }
            };
            let ty = Ty::Obj {
                class,
                nullable: false,
            };
            let local = self.new_local(name.as_deref().unwrap_or("some"), ty);
            self.emit(Inst::Store { local });
            self.emit(Inst::Load { local });
            self.branch(|target| Inst::BrNull { target }, otherwise);
            if let Some(n) = name {
                self.bind(
                    &n,
                    Binding {
                        local,
                        ty,
                        mutable: false,
                    },
                );
            }
            let _ = psp;
            return Ok(());
        }
        self.cond(cond)?;
        self.branch(|target| Inst::BrUnless { target }, otherwise);
        Ok(())
    }

    fn loop_label(l: &Option<syn::Label>) -> Option<String> {
        l.as_ref().map(|l| l.name.ident.to_string())
    }

    /// `while cond { ... }` and `while let Some(x) = e { ... }`.
    pub fn while_loop(&mut self, w: &syn::ExprWhile) -> R<Ty> {
        let head = self.label("while");
        let exit = self.label("end_while");
        self.place(head);
        self.push_scope();
        self.if_condition(&w.cond, exit)?;
        self.loops.push(Loop {
            label: Self::loop_label(&w.label),
            exit,
            next: head,
        });
        let t = self.block(&w.body, Some(Ty::Unit));
        self.loops.pop();
        self.pop_scope();
        self.unit_body(t?, &w.body)?;
        if self.reachable {
            self.branch(|target| Inst::Br { target }, head);
        }
        self.place(exit);
        Ok(Ty::Unit)
    }

    fn unit_body(&mut self, t: Ty, body: &syn::Block) -> R<()> {
        let r = self.vars.resolve(t);
        if r != Ty::Unit && r != Ty::Never {
            return Err(Error::mismatch(
                span_of(body.span()),
                "a loop's body has no value: end its last expression with `;`".into(),
                "()".into(),
                self.ty_name(t),
            ));
        }
        Ok(())
    }

    /// `loop { ... }`: `()` when a `break` leaves it, else the never type.
    pub fn loop_expr(&mut self, l: &syn::ExprLoop) -> R<Ty> {
        let head = self.label("loop");
        let exit = self.label("end_loop");
        self.place(head);
        self.loops.push(Loop {
            label: Self::loop_label(&l.label),
            exit,
            next: head,
        });
        let t = self.block(&l.body, Some(Ty::Unit));
        self.loops.pop();
        self.unit_body(t?, &l.body)?;
        if self.reachable {
            self.branch(|target| Inst::Br { target }, head);
        }
        self.place(exit);
        Ok(if self.is_used(exit) {
            Ty::Unit
        } else {
            Ty::Never
        })
    }

    /// `for k in a..b { ... }` (and `a..=b`): `a` and `b` are evaluated
    /// once; `k` counts up by one.
    pub fn for_loop(&mut self, f: &syn::ExprForLoop) -> R<Ty> {
        let sp = self.span;
        let (name, _) = match &*f.pat {
            syn::Pat::Ident(pi) if pi.subpat.is_none() => {
                (Some(pi.ident.to_string()), pi.mutability.is_some())
            }
            syn::Pat::Wild(_) => (None, false),
            p => return err(span_of(p.span()), "a `for` loop binds one name"),
        };
        let syn::Expr::Range(r) = &*f.expr else {
            return err(
                span_of(f.expr.span()),
                "a `for` loop runs over a range of integers, `a..b` or `a..=b` (iterators are not supported)",
            );
        };
        let (Some(lo), Some(hi)) = (&r.start, &r.end) else {
            return err(span_of(r.span()), "a `for` range has both ends, `a..b`");
        };
        let closed = matches!(r.limits, syn::RangeLimits::Closed(_));
        let lt = self.expr(lo, None)?;
        let ht = self.expr(hi, Some(lt))?;
        self.span = sp;
        let t = self
            .vars
            .unify(lt, ht)
            .filter(|t| self.vars.is_int(*t))
            .ok_or_else(|| {
                Error::mismatch(
                    span_of(r.span()),
                    "a `for` range's ends are integers of one type".into(),
                    self.ty_name(lt),
                    self.ty_name(ht),
                )
            })?;
        let end = self.new_local("end", t);
        self.emit(Inst::Store { local: end });
        let k: LocalId = self.new_local(name.as_deref().unwrap_or("k"), t);
        self.emit(Inst::Store { local: k });
        let head = self.label("for");
        let next = self.label("next");
        let exit = self.label("end_for");
        self.place(head);
        self.emit(Inst::Load { local: k });
        self.emit(Inst::Load { local: end });
        let cmp = if closed { CmpOp::Le } else { CmpOp::Lt };
        self.emit_typed(t, move |t| ops::compare(cmp, t))?;
        self.branch(|target| Inst::BrUnless { target }, exit);
        self.push_scope();
        if let Some(n) = &name {
            self.bind(
                n,
                Binding {
                    local: k,
                    ty: t,
                    mutable: false,
                },
            );
        }
        self.loops.push(Loop {
            label: Self::loop_label(&f.label),
            exit,
            next,
        });
        let bt = self.block(&f.body, Some(Ty::Unit));
        self.loops.pop();
        self.pop_scope();
        self.unit_body(bt?, &f.body)?;
        self.span = sp;
        self.place(next);
        if self.reachable {
            if closed {
                // `a..=MAX` must end: stop after the last value instead of
                // wrapping past it.
                self.emit(Inst::Load { local: k });
                self.emit(Inst::Load { local: end });
                self.emit_typed(t, |t| ops::compare(CmpOp::Eq, t))?;
                self.branch(|target| Inst::BrIf { target }, exit);
            }
            self.emit(Inst::Inc { local: k, delta: 1 });
            self.branch(|target| Inst::Br { target }, head);
        }
        self.place(exit);
        Ok(Ty::Unit)
    }

    fn target_loop(&self, label: &Option<syn::Lifetime>, what: &str) -> R<Loop> {
        let sp = self.span;
        match label {
            None => self
                .loops
                .last()
                .cloned()
                .ok_or_else(|| Error::new(sp, format!("`{what}` outside of a loop"))),
            Some(l) => {
                let name = l.ident.to_string();
                self.loops
                    .iter()
                    .rev()
                    .find(|lp| lp.label.as_deref() == Some(name.as_str()))
                    .cloned()
                    .ok_or_else(|| {
                        Error::new(
                            span_of(l.span()),
                            format!("no loop is labeled `'{name}` here"),
                        )
                    })
            }
        }
    }

    /// `break` (`break 'label`).
    pub fn break_expr(&mut self, b: &syn::ExprBreak) -> R<Ty> {
        if let Some(e) = &b.expr {
            return err(span_of(e.span()), "`break` with a value is not supported");
        }
        let lp = self.target_loop(&b.label, "break")?;
        self.branch(|target| Inst::Br { target }, lp.exit);
        Ok(Ty::Never)
    }

    /// `continue` (`continue 'label`).
    pub fn continue_expr(&mut self, c: &syn::ExprContinue) -> R<Ty> {
        let lp = self.target_loop(&c.label, "continue")?;
        self.branch(|target| Inst::Br { target }, lp.next);
        Ok(Ty::Never)
    }

    /// `return` and `return value`.
    pub fn return_expr(&mut self, r: &syn::ExprReturn) -> R<Ty> {
        let sp = self.span;
        match &r.expr {
            Some(e) => {
                if self.ret == Ty::Unit {
                    let t = self.expr(e, Some(Ty::Unit))?;
                    if self.vars.resolve(t) != Ty::Unit {
                        return Err(Error::mismatch(
                            span_of(e.span()),
                            "this function returns nothing".into(),
                            "()".into(),
                            self.ty_name(t),
                        ));
                    }
                } else {
                    let want = self.ret;
                    self.expr_as(e, want, "the returned value")?;
                }
            }
            None if self.ret != Ty::Unit => {
                return Err(Error::mismatch(
                    sp,
                    "`return` needs a value here".into(),
                    self.ty_name(self.ret),
                    "()".into(),
                ));
            }
            None => {}
        }
        self.span = sp;
        self.emit(Inst::Ret);
        Ok(Ty::Never)
    }
}

/// The `x` of `Some(x)` (or `Some(_)`).
fn some_pattern(p: &syn::Pat) -> R<(Option<String>, offload_ir::Span)> {
    let sp = span_of(p.span());
    if let syn::Pat::TupleStruct(ts) = p
        && ts.path.is_ident("Some")
        && ts.elems.len() == 1
    {
        return match &ts.elems[0] {
            syn::Pat::Ident(pi) if pi.subpat.is_none() => Ok((Some(pi.ident.to_string()), sp)),
            syn::Pat::Wild(_) => Ok((None, sp)),
            _ => err(sp, "write `Some(name)`"),
        };
    }
    err(sp, "the pattern here is `Some(name)`")
}

/// The value of a small integer literal (`1`, `-2`), for `inc`.
fn small_int(e: &syn::Expr) -> Option<i64> {
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) if i.suffix().is_empty() || i.suffix() == "i32" || i.suffix() == "i64" => i
            .base10_parse::<i64>()
            .ok()
            .filter(|v| i32::try_from(*v).is_ok()),
        syn::Expr::Paren(p) => small_int(&p.expr),
        _ => None,
    }
}
