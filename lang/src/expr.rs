//! Expressions: each leaves its value on the operand stack (nothing for
//! `()` and the never type) and returns its type. `want` is the type the
//! context asks for; it settles unsuffixed literals, as Rust's inference
//! does, and is checked by the caller.

use crate::error::{Error, R, err, expr_span, span_of};
use crate::func::Fb;
use crate::ops;
use crate::ty::{ArrTy, Ty};
use offload_ir::isa::{BinOp, CmpOp};
use offload_ir::{ExceptionKind, Inst};
use syn::spanned::Spanned;

impl Fb<'_, '_> {
    /// Lower `e`; its instructions are attributed to its span.
    pub fn expr(&mut self, e: &syn::Expr, want: Option<Ty>) -> R<Ty> {
        let saved = self.span;
        self.span = expr_span(e);
        let r = self.expr_here(e, want);
        self.span = saved;
        r
    }

    /// Lower `e` as a value of type `want` (`what` names the place in a
    /// mismatch: "the argument", "this `let`").
    pub fn expr_as(&mut self, e: &syn::Expr, want: Ty, what: &str) -> R<()> {
        let t = self.expr(e, Some(want))?;
        self.coerce(t, want, expr_span(e), what).map(|_| ())
    }

    /// Check that a value of type `have` can be used as a `want`; settles
    /// literal types. Returns the type the value now has.
    pub fn coerce(&mut self, have: Ty, want: Ty, span: offload_ir::Span, what: &str) -> R<Ty> {
        let (h, w) = (self.vars.resolve(have), self.vars.resolve(want));
        let ok = match (h, w) {
            (Ty::Never, _) => true,
            (Ty::Null, Ty::Obj { nullable: true, .. }) => true,
            (
                Ty::Obj {
                    class: a,
                    nullable: an,
                },
                Ty::Obj {
                    class: b,
                    nullable: bn,
                },
            ) => {
                if an && !bn {
                    return Err(Error::mismatch(
                        span,
                        format!(
                            "{what} may be `None`: unwrap it first (`if let Some(x) = ...` or `.unwrap()`)"
                        ),
                        self.ty_name(want),
                        self.ty_name(have),
                    ));
                }
                self.m().is_subclass(a, b)
            }
            (Ty::Arr(a), Ty::Arr(b)) => {
                if !a.mutable && b.mutable && a.elem == b.elem && a.dims == b.dims {
                    return Err(Error::mismatch(
                        span,
                        format!("{what} must be mutable, and this slice is `&`: declare it `&mut`"),
                        self.ty_name(want),
                        self.ty_name(have),
                    ));
                }
                // Element nullability is not checked: a heap array of
                // objects may hold nulls either way.
                a.elem == b.elem && a.dims == b.dims
            }
            _ => self.vars.unify(h, w).is_some(),
        };
        if ok {
            return Ok(if h == Ty::Never {
                w
            } else {
                self.vars.resolve(h)
            });
        }
        let mut msg = format!("mismatched types in {what}");
        if self.vars.is_int(h) && self.vars.is_float(w) {
            msg.push_str(": an integer is not a float (write `2.0`, or convert with `as`)");
        } else if h.is_num() && w.is_num() {
            msg.push_str(": numbers convert only with `as`");
        }
        Err(Error::mismatch(
            span,
            msg,
            self.ty_name(want),
            self.ty_name(have),
        ))
    }

    fn expr_here(&mut self, e: &syn::Expr, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        match e {
            syn::Expr::Lit(l) => self.lit(&l.lit, false, want),
            syn::Expr::Paren(p) => self.expr(&p.expr, want),
            syn::Expr::Group(g) => self.expr(&g.expr, want),
            syn::Expr::Path(p) => self.path(p),
            syn::Expr::Unary(u) => self.unary(u, want),
            syn::Expr::Binary(b) => self.binary(b, want),
            syn::Expr::Cast(c) => self.cast(c),
            syn::Expr::Index(i) => {
                let a = self.array(&i.expr)?;
                self.index(&i.index)?;
                self.emit(ops::aload(a.elem, a.dims));
                Ok(a.element())
            }
            syn::Expr::Field(f) => {
                let (field, ty) = self.field_of(f)?;
                self.span = sp;
                self.emit(Inst::GetField { field });
                Ok(ty)
            }
            syn::Expr::Struct(s) => self.new_object(s),
            syn::Expr::Assign(a) => self.assign(a).map(|_| Ty::Unit),
            syn::Expr::Block(b) => {
                if let Some(l) = &b.label {
                    return err(span_of(l.span()), "labeled blocks are not supported");
                }
                self.block(&b.block, want)
            }
            syn::Expr::If(i) => self.if_expr(i, want),
            syn::Expr::While(w) => self.while_loop(w),
            syn::Expr::Loop(l) => self.loop_expr(l),
            syn::Expr::ForLoop(f) => self.for_loop(f),
            syn::Expr::Break(b) => self.break_expr(b),
            syn::Expr::Continue(c) => self.continue_expr(c),
            syn::Expr::Return(r) => self.return_expr(r),
            syn::Expr::Call(c) => self.call(c, want),
            syn::Expr::MethodCall(c) => self.method_call(c, want),
            syn::Expr::Macro(m) => self.mac(&m.mac, want),
            syn::Expr::Tuple(t) if t.elems.is_empty() => Ok(Ty::Unit),
            syn::Expr::Let(_) => err(
                sp,
                "`let` in an expression goes in `if let Some(x) = ...` or `while let Some(x) = ...`",
            ),
            syn::Expr::Reference(_) => err(
                sp,
                "references are made only for atomics (`atomic_add(&mut a[i], 1)`); slices and objects are passed as they are",
            ),
            syn::Expr::Closure(_) => err(sp, "closures inside kernels are not supported"),
            syn::Expr::Range(_) => err(sp, "a range goes in `for k in a..b`"),
            syn::Expr::Tuple(_) => err(sp, "tuples are not supported"),
            syn::Expr::Array(_) | syn::Expr::Repeat(_) => err(
                sp,
                "array literals are not supported: make a heap array with `vec![0.0; n]`",
            ),
            syn::Expr::Match(_) => err(sp, "`match` is not supported: use `if`/`else`"),
            syn::Expr::Unsafe(_) => err(sp, "kernels need no `unsafe`"),
            _ => err(sp, "this expression is not in the kernel subset"),
        }
    }

    /// A literal; `negative` when under a unary minus (so that `i32::MIN`
    /// can be written).
    fn lit(&mut self, l: &syn::Lit, negative: bool, want: Option<Ty>) -> R<Ty> {
        let sp = span_of(l.span());
        match l {
            syn::Lit::Bool(b) => {
                self.emit(Inst::I32Const {
                    value: i32::from(b.value),
                });
                Ok(Ty::Bool)
            }
            syn::Lit::Int(i) => {
                let ty = match i.suffix() {
                    "" => self.fresh_for(false, want),
                    "i32" => Ty::I32,
                    "i64" => Ty::I64,
                    "f32" | "f64" => {
                        let t = if i.suffix() == "f32" {
                            Ty::F32
                        } else {
                            Ty::F64
                        };
                        let digits =
                            format!("{}{}", if negative { "-" } else { "" }, i.base10_digits());
                        self.emit_typed(t, move |t| ops::float_const(&digits, t))?;
                        return Ok(t);
                    }
                    s => {
                        return err(
                            sp,
                            format!("`{s}` is not a kernel type: use `i32` or `i64`"),
                        );
                    }
                };
                let v: i128 = i
                    .base10_digits()
                    .parse()
                    .map_err(|_| Error::new(sp, "this integer is too large"))?;
                let v = if negative { -v } else { v };
                self.emit_typed(ty, move |t| ops::int_const(v, t))?;
                Ok(ty)
            }
            syn::Lit::Float(f) => {
                let ty = match f.suffix() {
                    "" => self.fresh_for(true, want),
                    "f32" => Ty::F32,
                    "f64" => Ty::F64,
                    s => return err(sp, format!("`{s}` is not a float type: use `f32` or `f64`")),
                };
                let digits = format!("{}{}", if negative { "-" } else { "" }, f.base10_digits());
                self.emit_typed(ty, move |t| ops::float_const(&digits, t))?;
                Ok(ty)
            }
            _ => err(sp, "only number and `bool` literals are supported"),
        }
    }

    /// An unsuffixed literal's type: what `want` says when it is a number
    /// of the same family, else a fresh variable.
    fn fresh_for(&mut self, float: bool, want: Option<Ty>) -> Ty {
        let t = self.vars.fresh(float);
        if let Some(w) = want
            && self.vars.is_num(w)
        {
            let _ = self.vars.unify(t, w);
        }
        self.vars.resolve(t)
    }

    fn path(&mut self, p: &syn::ExprPath) -> R<Ty> {
        let sp = self.span;
        if p.qself.is_some() {
            return err(sp, "qualified paths are not supported");
        }
        let segs: Vec<String> = p
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if segs.len() == 1 {
            let name = &segs[0];
            if name == "None" {
                self.emit(Inst::RefNull);
                return Ok(Ty::Null);
            }
            if let Some(b) = self.lookup(name) {
                self.emit(Inst::Load { local: b.local });
                return Ok(b.ty);
            }
            if self.d.function(name).is_some() {
                return err(
                    sp,
                    format!("`{name}` is a function: call it, `{name}(...)`"),
                );
            }
            let names = self.names_in_scope();
            return err(
                sp,
                format!(
                    "cannot find `{name}` in this scope{}",
                    offload_ir::did_you_mean(name, names.iter().map(String::as_str))
                ),
            );
        }
        self.constant(&segs.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// `i32::MAX`, `f64::consts::PI` and the like.
    fn constant(&mut self, segs: &[&str]) -> R<Ty> {
        let sp = self.span;
        let segs: Vec<&str> = match segs {
            ["std" | "core", rest @ ..] => rest.to_vec(),
            s => s.to_vec(),
        };
        let (ty, name) = match segs.as_slice() {
            [t, n] => (*t, *n),
            [t, "consts", n] => (*t, *n),
            _ => return err(sp, "this path is not a value"),
        };
        let inst = match (ty, name) {
            ("i32", "MAX") => Inst::I32Const { value: i32::MAX },
            ("i32", "MIN") => Inst::I32Const { value: i32::MIN },
            ("i64", "MAX") => Inst::I64Const { value: i64::MAX },
            ("i64", "MIN") => Inst::I64Const { value: i64::MIN },
            ("f32", n) => Inst::F32Const {
                value: offload_ir::F32::new(match n {
                    "MAX" => f32::MAX,
                    "MIN" => f32::MIN,
                    "EPSILON" => f32::EPSILON,
                    "INFINITY" => f32::INFINITY,
                    "NEG_INFINITY" => f32::NEG_INFINITY,
                    "NAN" => f32::NAN,
                    "PI" => std::f32::consts::PI,
                    "E" => std::f32::consts::E,
                    "TAU" => std::f32::consts::TAU,
                    _ => return err(sp, format!("unknown constant `f32::{n}`")),
                }),
            },
            ("f64", n) => Inst::F64Const {
                value: offload_ir::F64::new(match n {
                    "MAX" => f64::MAX,
                    "MIN" => f64::MIN,
                    "EPSILON" => f64::EPSILON,
                    "INFINITY" => f64::INFINITY,
                    "NEG_INFINITY" => f64::NEG_INFINITY,
                    "NAN" => f64::NAN,
                    "PI" => std::f64::consts::PI,
                    "E" => std::f64::consts::E,
                    "TAU" => std::f64::consts::TAU,
                    _ => return err(sp, format!("unknown constant `f64::{n}`")),
                }),
            },
            _ => return err(sp, format!("unknown constant `{ty}::{name}`")),
        };
        let t = match inst {
            Inst::I32Const { .. } => Ty::I32,
            Inst::I64Const { .. } => Ty::I64,
            Inst::F32Const { .. } => Ty::F32,
            _ => Ty::F64,
        };
        self.emit(inst);
        Ok(t)
    }

    fn unary(&mut self, u: &syn::ExprUnary, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        match u.op {
            syn::UnOp::Neg(_) => {
                if let syn::Expr::Lit(l) = &*u.expr {
                    return self.lit(&l.lit, true, want);
                }
                let t = self.expr(&u.expr, want)?;
                if !self.vars.is_num(t) {
                    return Err(Error::mismatch(
                        sp,
                        "`-` applies to numbers".into(),
                        "a number".into(),
                        self.ty_name(t),
                    ));
                }
                self.emit_typed(t, ops::neg)?;
                Ok(t)
            }
            syn::UnOp::Not(_) => {
                let t = self.expr(&u.expr, want)?;
                let t = self.vars.resolve(t);
                if t == Ty::Bool {
                    self.emit(Inst::I32Const { value: 1 });
                    self.emit(Inst::I32Xor);
                } else if self.vars.is_int(t) {
                    self.emit_typed(t, |t| ops::int_const(-1, t))?;
                    self.emit_typed(t, |t| ops::arith(BinOp::Xor, t))?;
                } else {
                    return Err(Error::mismatch(
                        sp,
                        "`!` applies to `bool` and integers".into(),
                        "`bool` or an integer".into(),
                        self.ty_name(t),
                    ));
                }
                Ok(t)
            }
            syn::UnOp::Deref(_) => err(
                sp,
                "`*` is not needed: kernels have no references to dereference",
            ),
            _ => err(sp, "this operator is not supported"),
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        match b.op {
            syn::BinOp::And(_) | syn::BinOp::Or(_) => {
                let and = matches!(b.op, syn::BinOp::And(_));
                self.cond(&b.left)?;
                let short = self.label(if and { "and_false" } else { "or_true" });
                let end = self.label(if and { "and_end" } else { "or_end" });
                self.branch(
                    if and {
                        |target| Inst::BrUnless { target }
                    } else {
                        |target| Inst::BrIf { target }
                    },
                    short,
                );
                self.cond(&b.right)?;
                self.branch(|target| Inst::Br { target }, end);
                self.place(short);
                self.span = sp;
                self.emit(Inst::I32Const {
                    value: i32::from(!and),
                });
                self.place(end);
                return Ok(Ty::Bool);
            }
            _ => {}
        }
        if let Some(c) = ops::cmp_of(&b.op) {
            let lt = self.expr(&b.left, None)?;
            let rt = self.expr(&b.right, Some(lt))?;
            self.span = sp;
            let t = self.operands(lt, rt, c != CmpOp::Eq && c != CmpOp::Ne, &b.op)?;
            self.emit_typed(t, move |t| ops::compare(c, t))?;
            return Ok(Ty::Bool);
        }
        let Some((op, assign)) = ops::arith_of(&b.op) else {
            return err(sp, "this operator is not supported");
        };
        if assign {
            self.compound(&b.left, op, &b.right)?;
            return Ok(Ty::Unit);
        }
        let lt = self.expr(&b.left, want)?;
        if matches!(op, BinOp::Shl | BinOp::Shr) {
            let rt = self.expr(&b.right, None)?;
            self.span = sp;
            self.shift_count(lt, rt)?;
            self.emit_typed(lt, move |t| ops::arith(op, t))?;
            return Ok(lt);
        }
        let rt = self.expr(&b.right, Some(lt))?;
        self.span = sp;
        let t = self.arith_type(op, lt, rt, &b.op)?;
        self.emit_typed(t, move |t| ops::arith(op, t))?;
        Ok(t)
    }

    /// The common type of two operands of an operator (numbers; `ordered`
    /// excludes `bool` and references).
    fn operands(&mut self, lt: Ty, rt: Ty, ordered: bool, op: &syn::BinOp) -> R<Ty> {
        let sp = self.span;
        let (l, r) = (self.vars.resolve(lt), self.vars.resolve(rt));
        if l.is_ref() || r.is_ref() {
            if ordered {
                return err(
                    sp,
                    "references cannot be ordered, only compared with `==` and `!=`",
                );
            }
            if (l.is_ref() || l == Ty::Null) && (r.is_ref() || r == Ty::Null) {
                return Ok(if l == Ty::Null { r } else { l });
            }
        }
        if ordered && (l == Ty::Bool || r == Ty::Bool) {
            return err(sp, "`bool`s cannot be ordered");
        }
        self.vars.unify(lt, rt).ok_or_else(|| {
            Error::mismatch(
                sp,
                format!(
                    "the two sides of `{}` must have the same type (convert one with `as`)",
                    quote_op(op)
                ),
                self.ty_name(lt),
                self.ty_name(rt),
            )
        })
    }

    /// The type of `l op r` for an arithmetic or bitwise operator.
    fn arith_type(&mut self, op: BinOp, lt: Ty, rt: Ty, syn_op: &syn::BinOp) -> R<Ty> {
        let sp = self.span;
        let t = self.operands(lt, rt, false, syn_op)?;
        let bitwise = ops::is_bitwise(op);
        let fits = if bitwise {
            self.vars.is_int(t) || self.vars.resolve(t) == Ty::Bool
        } else {
            self.vars.is_num(t)
        };
        if !fits {
            return Err(Error::mismatch(
                sp,
                format!("`{}` does not apply to this type", ops::symbol(op)),
                if bitwise {
                    "an integer or `bool`".into()
                } else {
                    "a number".into()
                },
                self.ty_name(t),
            ));
        }
        Ok(t)
    }

    /// Bring a shift count of type `count` to the shifted value's type
    /// `value` (the bytecode shifts by the same type; the count's low bits
    /// count, as Rust's `wrapping_shl` does).
    pub fn shift_count(&mut self, value: Ty, count: Ty) -> R<()> {
        let sp = self.span;
        if !self.vars.is_int(value) || !self.vars.is_int(count) {
            return err(sp, "shifts apply to integers");
        }
        let (v, c) = (self.vars.resolve(value), self.vars.resolve(count));
        match (v, c) {
            (Ty::I64, Ty::I32) => self.emit(Inst::I32ToI64),
            (Ty::I32, Ty::I64) => self.emit(Inst::I64ToI32),
            _ => {
                self.vars.unify(v, c);
            }
        }
        Ok(())
    }

    fn cast(&mut self, c: &syn::ExprCast) -> R<Ty> {
        let sp = self.span;
        let to = crate::items::parse_ty(self.m(), &c.ty)?;
        let from = self.expr(&c.expr, Some(to))?;
        self.span = sp;
        let from = self.vars.settle(from);
        // A literal settles to the target if it can (`1 as f32` is 1.0).
        let _ = self.vars.unify(from, from);
        if from.is_ref() || to.is_ref() {
            return err(
                sp,
                "`as` converts numbers; to convert an object to a subclass use `.cast::<C>()`",
            );
        }
        if to == Ty::Bool {
            return err(
                sp,
                "numbers do not convert to `bool`: compare instead (`x != 0`)",
            );
        }
        match ops::convert(from, to) {
            Ok(Some(i)) => self.emit(i),
            Ok(None) => {}
            Err(m) => {
                return Err(Error::mismatch(sp, m, self.ty_name(to), self.ty_name(from)));
            }
        }
        Ok(to)
    }

    /// The array value of `e` on the stack, and its type.
    pub fn array(&mut self, e: &syn::Expr) -> R<ArrTy> {
        let t = self.expr(e, None)?;
        match self.vars.resolve(t) {
            Ty::Arr(a) => Ok(a),
            t => Err(Error::mismatch(
                span_of(e.span()),
                "only slices can be indexed".into(),
                "a slice".into(),
                self.ty_name(t),
            )),
        }
    }

    /// An index, as the `i32` the bytecode takes. An `i64` index is
    /// narrowed with a check: one outside `i32` throws `IndexOutOfBounds`
    /// (no array is that long) instead of wrapping to another element.
    pub fn index(&mut self, e: &syn::Expr) -> R<()> {
        let sp = expr_span(e);
        if let syn::Expr::Range(_) = e {
            return err(sp, "sub-slices are not supported: index one element");
        }
        let t = self.expr(e, Some(Ty::I32))?;
        let saved = self.span;
        self.span = sp;
        match self.vars.resolve(t) {
            Ty::I32 => {}
            Ty::Var(_) if self.vars.is_int(t) => {
                self.vars.unify(t, Ty::I32);
            }
            Ty::I64 => self.narrow_checked(ExceptionKind::IndexOutOfBounds),
            t => {
                return Err(Error::mismatch(
                    sp,
                    "an index is an integer".into(),
                    "`i32` or `i64`".into(),
                    self.ty_name(t),
                ));
            }
        }
        self.span = saved;
        Ok(())
    }

    /// Narrow the `i64` on the stack to `i32`, throwing `kind` when it
    /// does not fit.
    pub fn narrow_checked(&mut self, kind: ExceptionKind) {
        let wide = self.new_local("wide", Ty::I64);
        let narrow = self.new_local("narrow", Ty::I32);
        self.emit(Inst::Store { local: wide });
        self.emit(Inst::Load { local: wide });
        self.emit(Inst::I64ToI32);
        self.emit(Inst::Store { local: narrow });
        self.emit(Inst::Load { local: narrow });
        self.emit(Inst::I32ToI64);
        self.emit(Inst::Load { local: wide });
        self.emit(Inst::I64Eq);
        let ok = self.label("fits");
        self.branch(|target| Inst::BrIf { target }, ok);
        self.emit(Inst::Throw { kind });
        self.place(ok);
        self.emit(Inst::Load { local: narrow });
    }

    /// The object of a field access on the stack; returns the field and its
    /// type.
    pub fn field_of(&mut self, f: &syn::ExprField) -> R<(offload_ir::FieldId, Ty)> {
        let syn::Member::Named(name) = &f.member else {
            return err(span_of(f.member.span()), "tuple fields are not supported");
        };
        let name = name.to_string();
        let t = self.expr(&f.base, None)?;
        let sp = span_of(f.member.span());
        let class = match self.vars.resolve(t) {
            Ty::Obj {
                class,
                nullable: false,
            } => class,
            Ty::Obj { nullable: true, .. } => {
                return err(
                    span_of(f.base.span()),
                    format!(
                        "this `{}` may be `None`: unwrap it before reading `.{name}` (`if let Some(x) = ...` or `.unwrap()`)",
                        self.ty_name(t)
                    ),
                );
            }
            Ty::Arr(_) if name == "len" => {
                return err(sp, "the length of a slice is `.len()`");
            }
            t => {
                return err(
                    span_of(f.base.span()),
                    format!("`{}` has no fields", self.ty_name(t)),
                );
            }
        };
        let field = self.field_named(class, &name, sp)?;
        Ok((field, self.d.field_tys[field.index()]))
    }

    /// The field `name` of `class` (declared there or inherited), or an
    /// error at `sp` that suggests the nearest name.
    fn field_named(
        &self,
        class: offload_ir::ClassId,
        name: &str,
        sp: offload_ir::Span,
    ) -> R<offload_ir::FieldId> {
        let m = self.m();
        m.lookup_field(class, name).ok_or_else(|| {
            let all: Vec<&str> = m
                .ancestors(class)
                .flat_map(|c| m.class(c).fields.iter().map(|f| m.field(*f).name.as_str()))
                .collect();
            Error::new(
                sp,
                format!(
                    "class `{}` has no field `{name}`{}",
                    m.class(class).name,
                    offload_ir::did_you_mean(name, all)
                ),
            )
        })
    }

    fn new_object(&mut self, s: &syn::ExprStruct) -> R<Ty> {
        let sp = self.span;
        if let Some(r) = &s.rest {
            return err(
                span_of(r.span()),
                "`..` is not supported: fields left out are zero (`None` for objects)",
            );
        }
        let name = s
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let Some(class) = self.d.class(&name) else {
            return err(
                span_of(s.path.span()),
                format!(
                    "unknown class `{name}`{}",
                    offload_ir::did_you_mean(
                        &name,
                        self.m().classes.iter().map(|c| c.name.as_str())
                    )
                ),
            );
        };
        let m = self.m();
        if let Some(abs) = m
            .vtable(class)
            .into_iter()
            .find(|&f| m.func(f).is_abstract())
        {
            return err(
                sp,
                format!(
                    "cannot make an object of `{name}`: its method `{}` is abstract (make an object of a subclass that defines it)",
                    m.func(abs).short_name()
                ),
            );
        }
        self.emit(Inst::New { class });
        let mut seen = Vec::new();
        for fv in &s.fields {
            let syn::Member::Named(fname) = &fv.member else {
                return err(span_of(fv.member.span()), "fields are named");
            };
            let fname = fname.to_string();
            let fsp = span_of(fv.member.span());
            if seen.contains(&fname) {
                return err(fsp, format!("field `{fname}` is given twice"));
            }
            let field = self.field_named(class, &fname, fsp)?;
            seen.push(fname.clone());
            self.span = sp;
            self.emit(Inst::Dup);
            let fty = self.d.field_tys[field.index()];
            self.expr_as(&fv.expr, fty, &format!("field `{fname}`"))?;
            self.span = sp;
            self.emit(Inst::PutField { field });
        }
        Ok(Ty::Obj {
            class,
            nullable: false,
        })
    }

    /// A condition: a `bool` on the stack.
    pub fn cond(&mut self, e: &syn::Expr) -> R<()> {
        self.expr_as(e, Ty::Bool, "this condition")
    }
}

/// An operator's symbol, for messages.
fn quote_op(op: &syn::BinOp) -> &'static str {
    use syn::BinOp as B;
    match op {
        B::Eq(_) => "==",
        B::Ne(_) => "!=",
        B::Lt(_) => "<",
        B::Le(_) => "<=",
        B::Gt(_) => ">",
        B::Ge(_) => ">=",
        B::Add(_) | B::AddAssign(_) => "+",
        B::Sub(_) | B::SubAssign(_) => "-",
        B::Mul(_) | B::MulAssign(_) => "*",
        B::Div(_) | B::DivAssign(_) => "/",
        B::Rem(_) | B::RemAssign(_) => "%",
        B::BitAnd(_) | B::BitAndAssign(_) => "&",
        B::BitOr(_) | B::BitOrAssign(_) => "|",
        B::BitXor(_) | B::BitXorAssign(_) => "^",
        B::Shl(_) | B::ShlAssign(_) => "<<",
        B::Shr(_) | B::ShrAssign(_) => ">>",
        B::And(_) => "&&",
        B::Or(_) => "||",
        _ => "this operator",
    }
}
