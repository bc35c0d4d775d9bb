//! Calls: functions of the module, virtual methods, the math and `Option`
//! methods, atomics, and the macros (`throw!`, `panic!`, `assert!`,
//! `vec!`).

use crate::error::{Error, R, err, span_of};
use crate::func::Fb;
use crate::ops::{FLOAT_METHODS, INT_METHODS, Math};
use crate::ty::{ArrTy, Ty};
use offload_ir::{ExceptionKind, FuncKind, Inst};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;

type Args = Punctuated<syn::Expr, syn::Token![,]>;

impl Fb<'_, '_> {
    /// `f(args)`: a function of the module, `Some(x)`, or an atomic.
    pub fn call(&mut self, c: &syn::ExprCall, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        let syn::Expr::Path(p) = &*c.func else {
            return err(span_of(c.func.span()), "only named functions can be called");
        };
        let Some(name) = p.path.get_ident().map(|i| i.to_string()) else {
            return err(
                span_of(p.span()),
                "call a function of the file by its name (paths are not supported)",
            );
        };
        match name.as_str() {
            "Some" => {
                let [arg] = args_n::<1>(&c.args, sp, "Some")?;
                let inner = match want.map(|w| self.vars.resolve(w)) {
                    Some(Ty::Obj { class, .. }) => Some(Ty::Obj {
                        class,
                        nullable: false,
                    }),
                    _ => None,
                };
                let t = self.expr(arg, inner)?;
                return match self.vars.resolve(t) {
                    Ty::Obj {
                        class,
                        nullable: false,
                    } => Ok(Ty::Obj {
                        class,
                        nullable: true,
                    }),
                    t => Err(Error::mismatch(
                        span_of(arg.span()),
                        "`Some` wraps an object".into(),
                        "a class".into(),
                        self.ty_name(t),
                    )),
                };
            }
            "atomic_add" => return self.atomic(&c.args, false),
            "compare_exchange" => return self.atomic(&c.args, true),
            _ => {}
        }
        if self.lookup(&name).is_some() {
            return err(sp, format!("`{name}` is a variable, not a function"));
        }
        let Some(f) = self.d.function(&name) else {
            let m = self.m();
            let names = m
                .funcs
                .iter()
                .filter(|f| !matches!(f.kind, FuncKind::Method { .. }))
                .map(|f| f.name.as_str())
                .chain(["Some", "atomic_add", "compare_exchange"]);
            return err(
                span_of(p.span()),
                format!(
                    "cannot find function `{name}`{}",
                    offload_ir::did_you_mean(&name, names)
                ),
            );
        };
        if self.d.sigs[f.index()].kernel {
            return err(
                sp,
                format!("`{name}` is a kernel: kernels are launched over a range, not called"),
            );
        }
        let params: Vec<Ty> = self.d.sigs[f.index()].params.iter().map(|p| p.ty).collect();
        self.args(&c.args, &params, &name, sp)?;
        self.span = sp;
        self.emit(Inst::Call { func: f });
        Ok(self.d.sigs[f.index()].ret)
    }

    /// Lower `args` against parameter types `params`.
    fn args(&mut self, args: &Args, params: &[Ty], name: &str, sp: offload_ir::Span) -> R<()> {
        if args.len() != params.len() {
            return err(
                sp,
                format!(
                    "`{name}` takes {} argument{}, and {} {} given",
                    params.len(),
                    if params.len() == 1 { "" } else { "s" },
                    args.len(),
                    if args.len() == 1 { "is" } else { "are" }
                ),
            );
        }
        for (k, (a, p)) in args.iter().zip(params).enumerate() {
            self.expr_as(a, *p, &format!("argument {} of `{name}`", k + 1))?;
        }
        Ok(())
    }

    /// `recv.name(args)`.
    pub fn method_call(&mut self, c: &syn::ExprMethodCall, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        let name = c.method.to_string();
        let msp = span_of(c.method.span());
        // `x.is::<C>()` and `x.cast::<C>()` name a class.
        if let Some(tf) = &c.turbofish {
            return self.class_test(c, tf, &name);
        }
        let rt = self.expr(
            &c.receiver,
            if want.is_some_and(|w| self.vars.is_num(w)) {
                want
            } else {
                None
            },
        )?;
        let r = self.vars.resolve(rt);
        self.span = sp;
        // Numbers: the math methods of their family.
        let family = if self.vars.is_float(r) {
            Some((&FLOAT_METHODS[..], "floats"))
        } else if self.vars.is_int(r) {
            Some((&INT_METHODS[..], "integers"))
        } else {
            None
        };
        if let Some((methods, what)) = family {
            let Some(&(_, n, math)) = methods.iter().find(|m| m.0 == name) else {
                return err(
                    msp,
                    format!(
                        "no method `{name}` on {what}{}",
                        offload_ir::did_you_mean(&name, methods.iter().map(|m| m.0))
                    ),
                );
            };
            return self.math(c, r, n, math);
        }
        match r {
            Ty::Arr(_) if name == "len" => {
                args_n::<0>(&c.args, msp, "len")?;
                self.emit(Inst::ArrayLen);
                Ok(Ty::I32)
            }
            Ty::Arr(_) => err(
                msp,
                format!("no method `{name}` on slices (there is `len()`)"),
            ),
            Ty::Obj { nullable: true, .. } | Ty::Null => self.option_method(c, r, &name),
            Ty::Obj { class, .. } => {
                let m = self.m();
                let Some(method) = m.lookup_method(class, &name) else {
                    let all: Vec<&str> = m
                        .ancestors(class)
                        .flat_map(|k| m.class(k).methods.iter().map(|f| m.func(*f).short_name()))
                        .collect();
                    return err(
                        msp,
                        format!(
                            "class `{}` has no method `{name}`{}",
                            m.class(class).name,
                            offload_ir::did_you_mean(&name, all)
                        ),
                    );
                };
                let params: Vec<Ty> = self.d.sigs[method.index()].params[1..]
                    .iter()
                    .map(|p| p.ty)
                    .collect();
                self.args(&c.args, &params, &name, msp)?;
                self.span = sp;
                self.emit(Inst::CallVirt { method });
                Ok(self.d.sigs[method.index()].ret)
            }
            t => err(
                span_of(c.receiver.span()),
                format!("`{}` has no methods", self.ty_name(t)),
            ),
        }
    }

    /// A math method with `n - 1` arguments of the receiver's type `t`.
    fn math(&mut self, c: &syn::ExprMethodCall, t: Ty, n: usize, math: Math) -> R<Ty> {
        let sp = self.span;
        let name = c.method.to_string();
        if c.args.len() + 1 != n {
            return err(
                span_of(c.method.span()),
                format!(
                    "`{name}` takes {} argument{}",
                    n - 1,
                    if n == 2 { "" } else { "s" }
                ),
            );
        }
        for arg in &c.args {
            self.expr_as(arg, t, &format!("the argument of `{name}`"))?;
        }
        self.span = sp;
        let t = self.vars.resolve(t);
        if let Ty::Var(_) = t {
            // Rust asks for the literal's type here; the default is clear
            // enough.
            let settled = self.vars.settle(t);
            self.vars.unify(t, settled);
        }
        self.emit_typed(t, move |t| math.inst(t))?;
        Ok(t)
    }

    fn option_method(&mut self, c: &syn::ExprMethodCall, t: Ty, name: &str) -> R<Ty> {
        let sp = self.span;
        let msp = span_of(c.method.span());
        match name {
            "is_some" | "is_none" => {
                args_n::<0>(&c.args, msp, name)?;
                self.emit(Inst::RefNull);
                self.emit(if name == "is_some" {
                    Inst::RefNe
                } else {
                    Inst::RefEq
                });
                Ok(Ty::Bool)
            }
            "unwrap" | "expect" => {
                if name == "unwrap" {
                    args_n::<0>(&c.args, msp, name)?;
                } else if c.args.len() != 1
                    || !matches!(
                        &c.args[0],
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Str(_),
                            ..
                        })
                    )
                {
                    return err(msp, "`expect` takes a message, `expect(\"...\")`");
                }
                let Ty::Obj { class, .. } = t else {
                    return err(span_of(c.receiver.span()), "`None` has nothing to unwrap");
                };
                self.emit(Inst::Dup);
                let ok = self.label("some");
                self.branch(|target| Inst::BrNonNull { target }, ok);
                self.emit(Inst::Throw {
                    kind: ExceptionKind::NullPointer,
                });
                self.place(ok);
                self.span = sp;
                Ok(Ty::Obj {
                    class,
                    nullable: false,
                })
            }
            _ => err(
                msp,
                format!(
                    "no method `{name}` on `{}`: unwrap it first (`if let Some(x) = ...`), or use `is_some`, `is_none`, `unwrap`, `expect`",
                    self.ty_name(t)
                ),
            ),
        }
    }

    /// `x.is::<C>()` (instanceof) and `x.cast::<C>()` (checked downcast).
    fn class_test(
        &mut self,
        c: &syn::ExprMethodCall,
        tf: &syn::AngleBracketedGenericArguments,
        name: &str,
    ) -> R<Ty> {
        let sp = self.span;
        let msp = span_of(c.method.span());
        if name != "is" && name != "cast" {
            return err(msp, "only `is::<C>()` and `cast::<C>()` take a type");
        }
        let target = match tf.args.first() {
            Some(syn::GenericArgument::Type(t)) if tf.args.len() == 1 => {
                crate::items::parse_ty(self.m(), t)?
            }
            _ => return err(span_of(tf.span()), "name one class: `::<C>`"),
        };
        let Ty::Obj { class, .. } = target else {
            return err(span_of(tf.span()), "`is` and `cast` take a class");
        };
        args_n::<0>(&c.args, msp, name)?;
        let rt = self.expr(&c.receiver, None)?;
        let Ty::Obj { nullable, .. } = self.vars.resolve(rt) else {
            return err(
                span_of(c.receiver.span()),
                format!("`{name}` applies to objects"),
            );
        };
        self.span = sp;
        let ty = offload_ir::Type::Class(class);
        if name == "is" {
            self.emit(Inst::InstanceOf { ty });
            Ok(Ty::Bool)
        } else {
            self.emit(Inst::CheckCast { ty });
            Ok(Ty::Obj { class, nullable })
        }
    }

    /// `atomic_add(&mut place, v)` and `compare_exchange(&mut place,
    /// expected, new)`: the place is an element of an `&mut [i32]` /
    /// `&mut [i64]` or an integer field; the result is the old value.
    fn atomic(&mut self, args: &Args, cas: bool) -> R<Ty> {
        let sp = self.span;
        let name = if cas {
            "compare_exchange"
        } else {
            "atomic_add"
        };
        let want = if cas { 3 } else { 2 };
        if args.len() != want {
            return err(
                sp,
                format!(
                    "`{name}` takes {}",
                    if cas {
                        "`&mut place, expected, new`"
                    } else {
                        "`&mut place, value`"
                    }
                ),
            );
        }
        let syn::Expr::Reference(r) = &args[0] else {
            return err(
                span_of(args[0].span()),
                format!("`{name}`'s first argument is `&mut place`"),
            );
        };
        if r.mutability.is_none() {
            return err(
                span_of(r.span()),
                format!("`{name}` changes its place: write `&mut`"),
            );
        }
        let (t, inst) = match &*r.expr {
            syn::Expr::Index(i) => {
                let a: ArrTy = self.array(&i.expr)?;
                if !a.mutable {
                    return err(
                        span_of(i.expr.span()),
                        "an atomic changes the slice: declare it `&mut`",
                    );
                }
                self.index(&i.index)?;
                match (a.element(), cas) {
                    (Ty::I32, false) => (Ty::I32, Inst::I32ArrayAtomicAdd),
                    (Ty::I64, false) => (Ty::I64, Inst::I64ArrayAtomicAdd),
                    (Ty::I32, true) => (Ty::I32, Inst::I32ArrayCmpxchg),
                    (Ty::I64, true) => (Ty::I64, Inst::I64ArrayCmpxchg),
                    (t, _) => {
                        return Err(Error::mismatch(
                            span_of(r.expr.span()),
                            "atomics apply to integers".into(),
                            "`i32` or `i64`".into(),
                            self.ty_name(t),
                        ));
                    }
                }
            }
            syn::Expr::Field(f) => {
                let (field, t) = self.field_of(f)?;
                if !t.is_int() {
                    return Err(Error::mismatch(
                        span_of(r.expr.span()),
                        "atomics apply to integer fields".into(),
                        "`i32` or `i64`".into(),
                        self.ty_name(t),
                    ));
                }
                (
                    t,
                    if cas {
                        Inst::FieldCmpxchg { field }
                    } else {
                        Inst::FieldAtomicAdd { field }
                    },
                )
            }
            e => {
                return err(
                    span_of(e.span()),
                    "an atomic's place is `a[i]` or `obj.field`",
                );
            }
        };
        for a in args.iter().skip(1) {
            self.expr_as(a, t, &format!("the value of `{name}`"))?;
        }
        self.span = sp;
        self.emit(inst);
        Ok(t)
    }

    /// A macro: `throw!(Kind)`, `panic!(..)`, `unreachable!(..)`,
    /// `assert!(cond, ..)`, `vec![zero; n]`.
    pub fn mac(&mut self, m: &syn::Macro, want: Option<Ty>) -> R<Ty> {
        let sp = span_of(m.span());
        let name = m
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let saved = self.span;
        self.span = sp;
        let r = match name.as_str() {
            "throw" => {
                let kind: syn::Ident = m.parse_body().map_err(|_| {
                    Error::new(sp, "write the exception's kind: `throw!(IllegalArgument)`")
                })?;
                let k = kind.to_string();
                let Some(kind) = ExceptionKind::from_name(&k) else {
                    return err(
                        span_of(kind.span()),
                        format!(
                            "unknown exception `{k}`{}; the kinds are {}",
                            offload_ir::did_you_mean(
                                &k,
                                ExceptionKind::ALL.iter().map(|k| k.name())
                            ),
                            ExceptionKind::ALL
                                .iter()
                                .map(|k| k.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                };
                self.emit(Inst::Throw { kind });
                Ok(Ty::Never)
            }
            "panic" | "unreachable" | "todo" | "unimplemented" => {
                self.emit(Inst::Throw {
                    kind: ExceptionKind::IllegalState,
                });
                Ok(Ty::Never)
            }
            "assert" => {
                let args = m
                    .parse_body_with(Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated)
                    .map_err(|e| Error::new(sp, format!("`assert!`: {e}")))?;
                let Some(cond) = args.first() else {
                    return err(sp, "`assert!` takes a condition");
                };
                self.cond(cond)?;
                self.span = sp;
                let ok = self.label("assert_ok");
                self.branch(|target| Inst::BrIf { target }, ok);
                self.emit(Inst::Throw {
                    kind: ExceptionKind::IllegalState,
                });
                self.place(ok);
                Ok(Ty::Unit)
            }
            "vec" => self.new_array(m, want),
            _ => err(
                sp,
                format!(
                    "macro `{name}!` is not supported (kernels have `throw!`, `panic!`, `assert!`, `unreachable!` and `vec!`)"
                ),
            ),
        };
        self.span = saved;
        r
    }

    /// `vec![zero; n]`: a new heap array of `n` zeroed elements; the zero
    /// (`0`, `0.0`, `None`) gives the element type, or the context does.
    fn new_array(&mut self, m: &syn::Macro, want: Option<Ty>) -> R<Ty> {
        let sp = self.span;
        let e = m
            .parse_body_with(|input: syn::parse::ParseStream| {
                let elem: syn::Expr = input.parse()?;
                input.parse::<syn::Token![;]>()?;
                let len: syn::Expr = input.parse()?;
                Ok(Repeat { expr: elem, len })
            })
            .map_err(|_| Error::new(sp, "write a new array as `vec![0.0; n]`"))?;
        let want_elem = match want.map(|w| self.vars.resolve(w)) {
            Some(Ty::Arr(a)) => Some(a.element()),
            _ => None,
        };
        let elem = zero_type(&e.expr, want_elem).ok_or_else(|| {
            Error::new(
                span_of(e.expr.span()),
                "a new array starts zeroed: write its element as a zero of its type (`0`, `0i64`, `0.0f32`, `None`), or give the variable a type",
            )
        })?;
        let (el, nullable, dims) = elem.slice_elem().ok_or_else(|| {
            Error::new(
                span_of(e.expr.span()),
                "this type cannot be an array's element",
            )
        })?;
        self.expr_as(&e.len, Ty::I32, "an array's length")?;
        self.span = sp;
        self.emit(Inst::NewArray {
            elem: elem.ir().expect("an element type"),
        });
        Ok(Ty::Arr(ArrTy {
            elem: el,
            elem_nullable: nullable,
            dims,
            mutable: true,
        }))
    }
}

/// `vec![expr; len]`'s two parts.
struct Repeat {
    expr: syn::Expr,
    len: syn::Expr,
}

/// The element type a zero literal spells, with the context's `want` for
/// unsuffixed ones.
fn zero_type(e: &syn::Expr, want: Option<Ty>) -> Option<Ty> {
    let is_zero_int = |i: &syn::LitInt| i.base10_digits() == "0";
    let is_zero_float = |f: &syn::LitFloat| f.base10_parse::<f64>().is_ok_and(|v| v == 0.0);
    match e {
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Int(i),
            ..
        }) if is_zero_int(i) => match i.suffix() {
            "i32" => Some(Ty::I32),
            "i64" => Some(Ty::I64),
            "f32" => Some(Ty::F32),
            "f64" => Some(Ty::F64),
            "" => Some(want.filter(|w| w.is_int()).unwrap_or(Ty::I32)),
            _ => None,
        },
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Float(f),
            ..
        }) if is_zero_float(f) => match f.suffix() {
            "f32" => Some(Ty::F32),
            "f64" => Some(Ty::F64),
            "" => Some(want.filter(|w| w.is_float()).unwrap_or(Ty::F64)),
            _ => None,
        },
        syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Bool(b),
            ..
        }) if !b.value => None,
        syn::Expr::Path(p) if p.path.is_ident("None") => {
            want.filter(|w| matches!(w, Ty::Obj { .. }))
        }
        _ => None,
    }
}

/// Exactly `N` arguments, or an error naming `name`.
fn args_n<'e, const N: usize>(
    args: &'e Args,
    sp: offload_ir::Span,
    name: &str,
) -> R<[&'e syn::Expr; N]> {
    let v: Vec<&syn::Expr> = args.iter().collect();
    v.try_into().map_err(|_| {
        Error::new(
            sp,
            format!(
                "`{name}` takes {N} argument{}",
                if N == 1 { "" } else { "s" }
            ),
        )
    })
}
