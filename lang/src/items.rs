//! The items of a source file: classes (structs), their fields and methods
//! (impl blocks), functions and kernels. This pass makes the module's
//! skeleton — every class, field and function with its signature, no body
//! yet — so that bodies can name anything declared anywhere in the file.

use crate::error::{Error, R, err, span_of};
use crate::ty::{ArrTy, Ty};
use offload_ir::module::{FuncDebug, Meta};
use offload_ir::{Class, ClassId, Field, FieldId, FuncId, FuncKind, Function, Local, Module, Span};
use syn::spanned::Spanned;

/// A parameter of a function, as written.
#[derive(Clone, Debug)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Declared `mut`: the body may assign it.
    pub mutable: bool,
    /// Where it is declared.
    pub span: Span,
}

/// A function's signature in source types.
#[derive(Clone, Debug)]
pub struct Sig {
    /// Parameters, `self` first for a method.
    pub params: Vec<Param>,
    /// The result type (`()` when none).
    pub ret: Ty,
    /// Whether it is a kernel.
    pub kernel: bool,
    /// Where the function is declared (its name).
    pub span: Span,
}

/// What the bodies are lowered against: the module's skeleton and the
/// source types of its fields and functions.
pub struct Decls<'a> {
    /// Classes, fields and functions (bodies empty).
    pub module: Module,
    /// The source type of each field, by [`FieldId`].
    pub field_tys: Vec<Ty>,
    /// The signature of each function, by [`FuncId`].
    pub sigs: Vec<Sig>,
    /// The body of each function (`None`: an abstract method).
    pub bodies: Vec<Option<&'a syn::Block>>,
    /// Each function by name (`Class.method` for methods): a file of many
    /// functions is declared and lowered in linear time, not by a scan of
    /// the module per name.
    pub by_name: std::collections::HashMap<String, FuncId>,
}

impl std::fmt::Debug for Decls<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decls")
            .field("module", &self.module)
            .field("field_tys", &self.field_tys)
            .field("sigs", &self.sigs)
            .finish_non_exhaustive()
    }
}

impl Decls<'_> {
    /// The class named `name`.
    pub fn class(&self, name: &str) -> Option<ClassId> {
        self.module.class_named(name)
    }

    /// A free function (static or kernel) named `name`.
    pub fn function(&self, name: &str) -> Option<FuncId> {
        self.by_name
            .get(name)
            .copied()
            .filter(|&f| !matches!(self.module.func(f).kind, FuncKind::Method { .. }))
    }
}

fn ident_span(i: &syn::Ident) -> Span {
    span_of(i.span())
}

/// Attributes the front end reads (`#[kernel]`, `#[extends(C)]`); doc
/// comments pass; anything else is an error.
fn check_attrs(attrs: &[syn::Attribute], allowed: &[&str]) -> R<()> {
    for a in attrs {
        let name = a
            .path()
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        if name == "doc" || allowed.contains(&name.as_str()) {
            continue;
        }
        let what = if allowed.is_empty() {
            "no attributes are allowed here".to_string()
        } else {
            format!(
                "the attributes allowed here are {}",
                allowed
                    .iter()
                    .map(|a| format!("`#[{a}]`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return err(
            span_of(a.span()),
            format!("unknown attribute `{name}`: {what}"),
        );
    }
    Ok(())
}

fn has_attr(attrs: &[syn::Attribute], name: &str) -> bool {
    attrs.iter().any(|a| a.path().is_ident(name))
}

/// A source type, as written, against the classes of `m`.
pub fn parse_ty(m: &Module, t: &syn::Type) -> R<Ty> {
    let sp = span_of(t.span());
    match t {
        syn::Type::Paren(p) => parse_ty(m, &p.elem),
        syn::Type::Group(g) => parse_ty(m, &g.elem),
        syn::Type::Tuple(t) if t.elems.is_empty() => Ok(Ty::Unit),
        syn::Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let seg = &p.path.segments[0];
            let name = seg.ident.to_string();
            if name == "Option" {
                let inner = match &seg.arguments {
                    syn::PathArguments::AngleBracketed(a) if a.args.len() == 1 => {
                        match &a.args[0] {
                            syn::GenericArgument::Type(t) => t,
                            _ => return err(sp, "`Option` takes one class: `Option<C>`"),
                        }
                    }
                    _ => return err(sp, "`Option` takes one class: `Option<C>`"),
                };
                return match parse_ty(m, inner)? {
                    Ty::Obj { class, .. } => Ok(Ty::Obj {
                        class,
                        nullable: true,
                    }),
                    _ => err(
                        span_of(inner.span()),
                        "`Option` holds a class here (a reference that may be null); numbers and slices are never null",
                    ),
                };
            }
            if !seg.arguments.is_empty() {
                return err(sp, format!("`{name}` takes no type arguments"));
            }
            match name.as_str() {
                "i32" => Ok(Ty::I32),
                "i64" => Ok(Ty::I64),
                "f32" => Ok(Ty::F32),
                "f64" => Ok(Ty::F64),
                "bool" => Ok(Ty::Bool),
                "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "isize" | "u128"
                | "i128" => err(
                    sp,
                    format!(
                        "`{name}` is not a kernel type: the numbers are `i32`, `i64`, `f32` and `f64`"
                    ),
                ),
                _ => match m.class_named(&name) {
                    Some(class) => Ok(Ty::Obj {
                        class,
                        nullable: false,
                    }),
                    None => err(
                        sp,
                        format!(
                            "unknown type `{name}`{}",
                            offload_ir::did_you_mean(
                                &name,
                                ["i32", "i64", "f32", "f64", "bool"]
                                    .into_iter()
                                    .chain(m.classes.iter().map(|c| c.name.as_str()))
                            )
                        ),
                    ),
                },
            }
        }
        syn::Type::Reference(r) => {
            let syn::Type::Slice(s) = &*r.elem else {
                return err(
                    sp,
                    "a reference in a kernel is a slice, `&[T]` or `&mut [T]` (objects are already references: write `C`, not `&C`)",
                );
            };
            let elem = parse_ty(m, &s.elem)?;
            let (elem, elem_nullable, dims) = match elem {
                Ty::Bool => {
                    return err(
                        span_of(s.elem.span()),
                        "slices of `bool` are not supported: use `&[i32]` holding 0 and 1",
                    );
                }
                t => t.slice_elem().ok_or_else(|| {
                    Error::new(
                        span_of(s.elem.span()),
                        "this type cannot be a slice's element",
                    )
                })?,
            };
            Ok(Ty::Arr(ArrTy {
                elem,
                elem_nullable,
                dims,
                mutable: r.mutability.is_some(),
            }))
        }
        syn::Type::Slice(_) => err(sp, "a slice is written `&[T]` or `&mut [T]`"),
        syn::Type::Array(_) => err(
            sp,
            "fixed-size arrays are not supported: use a slice, `&[T]` or `&mut [T]`",
        ),
        _ => err(
            sp,
            "this type is not in the kernel subset: use `i32`, `i64`, `f32`, `f64`, `bool`, `&[T]`, `&mut [T]`, a class or `Option<Class>`",
        ),
    }
}

struct ClassDecl<'a> {
    item: &'a syn::ItemStruct,
    extends: Option<(String, Span)>,
}

struct FnDecl<'a> {
    /// Borrowed from the file, or parsed from an abstract method's tokens.
    sig: std::borrow::Cow<'a, syn::Signature>,
    body: Option<&'a syn::Block>,
    class: Option<ClassId>,
    kernel: bool,
}

/// The `#[extends(C)]` of a struct.
fn extends_of(attrs: &[syn::Attribute]) -> R<Option<(String, Span)>> {
    for a in attrs {
        if a.path().is_ident("extends") {
            let id: syn::Ident = a.parse_args().map_err(|_| {
                Error::new(
                    span_of(a.span()),
                    "write the superclass as `#[extends(Parent)]`",
                )
            })?;
            return Ok(Some((id.to_string(), ident_span(&id))));
        }
    }
    Ok(None)
}

/// Read every item of `file` into the module's skeleton.
pub fn declare<'a>(file: &'a syn::File, name: &str) -> R<Decls<'a>> {
    let mut classes: Vec<ClassDecl<'a>> = Vec::new();
    let mut fns: Vec<FnDecl<'a>> = Vec::new();
    let mut impls: Vec<&'a syn::ItemImpl> = Vec::new();
    for item in &file.items {
        match item {
            syn::Item::Struct(s) => {
                check_attrs(&s.attrs, &["extends"])?;
                if !s.generics.params.is_empty() {
                    return err(span_of(s.generics.span()), "classes cannot be generic");
                }
                if !matches!(s.fields, syn::Fields::Named(_) | syn::Fields::Unit) {
                    return err(
                        span_of(s.fields.span()),
                        "a class has named fields: `struct C { x: f64 }`",
                    );
                }
                classes.push(ClassDecl {
                    item: s,
                    extends: extends_of(&s.attrs)?,
                });
            }
            syn::Item::Impl(i) => {
                check_attrs(&i.attrs, &[])?;
                if let Some((_, path, _)) = &i.trait_ {
                    return err(
                        span_of(path.span()),
                        "trait impls are not supported: methods go in `impl C { ... }`, and a subclass overrides by defining the same method",
                    );
                }
                impls.push(i);
            }
            syn::Item::Fn(f) => {
                check_attrs(&f.attrs, &["kernel"])?;
                fns.push(FnDecl {
                    sig: std::borrow::Cow::Borrowed(&f.sig),
                    body: Some(&f.block),
                    class: None,
                    kernel: has_attr(&f.attrs, "kernel"),
                });
            }
            other => {
                return err(
                    span_of(other.span()),
                    "only `struct`, `impl` and `fn` items are allowed in a kernel file",
                );
            }
        }
    }

    let mut module = Module {
        source: Meta(name.into()),
        ..Module::default()
    };
    // Classes first (types name them), then superclasses.
    for c in &classes {
        let name = c.item.ident.to_string();
        if module.class_named(&name).is_some() {
            return err(
                ident_span(&c.item.ident),
                format!("class `{name}` is defined twice"),
            );
        }
        module.classes.push(Class {
            name,
            superclass: None,
            fields: Vec::new(),
            methods: Vec::new(),
            span: Meta(ident_span(&c.item.ident)),
            comments: Meta::default(),
        });
    }
    for (i, c) in classes.iter().enumerate() {
        if let Some((sup, sp)) = &c.extends {
            let Some(s) = module.class_named(sup) else {
                return err(
                    *sp,
                    format!(
                        "unknown class `{sup}`{}",
                        offload_ir::did_you_mean(
                            sup,
                            module.classes.iter().map(|c| c.name.as_str())
                        )
                    ),
                );
            };
            module.classes[i].superclass = Some(s);
        }
    }
    for (i, c) in module.classes.iter().enumerate() {
        if module.ancestors(ClassId::new(i)).count() > module.classes.len() {
            return err(*c.span, format!("class `{}` inherits from itself", c.name));
        }
    }
    // Fields.
    let mut field_tys = Vec::new();
    for (i, c) in classes.iter().enumerate() {
        let class = ClassId::new(i);
        for f in c.item.fields.iter() {
            check_attrs(&f.attrs, &[])?;
            let id = f.ident.as_ref().expect("named fields");
            let ty = parse_ty(&module, &f.ty)?;
            let name = id.to_string();
            if let Some(prev) = module.lookup_field(class, &name) {
                let owner = module.field(prev).class;
                return err(
                    ident_span(id),
                    if owner == class {
                        format!("field `{name}` is declared twice")
                    } else {
                        format!(
                            "field `{name}` is already declared by `{}`, which `{}` extends",
                            module.class(owner).name,
                            module.class(class).name
                        )
                    },
                );
            }
            let fid = FieldId::new(module.fields.len());
            module.fields.push(Field {
                name,
                class,
                ty: ty.ir().expect("field types are values"),
                span: Meta(ident_span(id)),
                comments: Meta::default(),
            });
            module.classes[i].fields.push(fid);
            field_tys.push(ty);
        }
    }
    // Methods, from impl blocks.
    let mut methods: Vec<FnDecl<'a>> = Vec::new();
    for i in &impls {
        let syn::Type::Path(p) = &*i.self_ty else {
            return err(span_of(i.self_ty.span()), "`impl` names a class");
        };
        let name = p
            .path
            .get_ident()
            .map(|i| i.to_string())
            .unwrap_or_default();
        let Some(class) = module.class_named(&name) else {
            return err(
                span_of(p.span()),
                format!(
                    "unknown class `{name}`{}",
                    offload_ir::did_you_mean(&name, module.classes.iter().map(|c| c.name.as_str()))
                ),
            );
        };
        for item in &i.items {
            match item {
                syn::ImplItem::Fn(f) => {
                    check_attrs(&f.attrs, &[])?;
                    methods.push(FnDecl {
                        sig: std::borrow::Cow::Borrowed(&f.sig),
                        body: Some(&f.block),
                        class: Some(class),
                        kernel: false,
                    });
                }
                syn::ImplItem::Verbatim(v) => {
                    // `fn area(&self) -> f64;`: an abstract method.
                    let f: syn::TraitItemFn = syn::parse2(v.clone()).map_err(|_| {
                        Error::new(
                            span_of(v.span()),
                            "expected a method: `fn name(&self, ...) { ... }`",
                        )
                    })?;
                    check_attrs(&f.attrs, &[])?;
                    if let Some(b) = &f.default {
                        return err(span_of(b.span()), "expected `;` or a body, not both");
                    }
                    methods.push(FnDecl {
                        sig: std::borrow::Cow::Owned(f.sig),
                        body: None,
                        class: Some(class),
                        kernel: false,
                    });
                }
                other => {
                    return err(
                        span_of(other.span()),
                        "an `impl` block holds methods: `fn name(&self, ...) { ... }`",
                    );
                }
            }
        }
    }
    let mut decls = Decls {
        module,
        field_tys,
        sigs: Vec::new(),
        bodies: Vec::new(),
        by_name: std::collections::HashMap::new(),
    };
    for d in methods.iter().chain(fns.iter()) {
        declare_fn(&mut decls, &d.sig, d.body, d.class, d.kernel)?;
    }
    Ok(decls)
}

/// Declare the free functions of `part`, after everything [`declare`]
/// declared from a file that held the rest of the items: the front end
/// reads a file a part at a time (`crate::compile`), and a part's syntax
/// tree is dropped once its functions are declared.
pub fn declare_fns(d: &mut Decls<'_>, part: &syn::File) -> R<()> {
    for item in &part.items {
        if let syn::Item::Fn(f) = item {
            check_attrs(&f.attrs, &["kernel"])?;
            declare_fn(d, &f.sig, None, None, has_attr(&f.attrs, "kernel"))?;
        }
    }
    Ok(())
}

fn declare_fn<'a>(
    d: &mut Decls<'a>,
    sig: &syn::Signature,
    body: Option<&'a syn::Block>,
    class: Option<ClassId>,
    kernel: bool,
) -> R<()> {
    let sp = ident_span(&sig.ident);
    if !sig.generics.params.is_empty() {
        return err(
            span_of(sig.generics.span()),
            "kernel functions cannot be generic",
        );
    }
    if let Some(a) = &sig.asyncness {
        return err(span_of(a.span()), "kernel functions cannot be `async`");
    }
    if let Some(u) = &sig.unsafety {
        return err(span_of(u.span()), "kernel functions need no `unsafe`");
    }
    let short = sig.ident.to_string();
    let name = match class {
        Some(c) => format!("{}.{short}", d.module.class(c).name),
        None => short.clone(),
    };
    if d.by_name.contains_key(&name) {
        return err(
            sp,
            match class {
                Some(_) => format!("method `{name}` is defined twice"),
                None => format!("function `{name}` is defined twice"),
            },
        );
    }
    let mut params = Vec::new();
    for (k, input) in sig.inputs.iter().enumerate() {
        match input {
            syn::FnArg::Receiver(r) => {
                let Some(c) = class else {
                    return err(
                        span_of(r.span()),
                        "`self` is a method's receiver: put the function in `impl C { ... }`",
                    );
                };
                params.push(Param {
                    name: "self".into(),
                    ty: Ty::Obj {
                        class: c,
                        nullable: false,
                    },
                    mutable: false,
                    span: span_of(r.span()),
                });
            }
            syn::FnArg::Typed(pt) => {
                let syn::Pat::Ident(pi) = &*pt.pat else {
                    return err(span_of(pt.pat.span()), "a parameter is a name: `x: f32`");
                };
                if k == 0 && class.is_some() {
                    return err(
                        span_of(pt.span()),
                        "a method takes `&self` first (associated functions are not supported: write a free function)",
                    );
                }
                let ty = parse_ty(&d.module, &pt.ty)?;
                if ty == Ty::Unit {
                    return err(span_of(pt.ty.span()), "a parameter cannot be `()`");
                }
                let pname = pi.ident.to_string();
                if params.iter().any(|p: &Param| p.name == pname) {
                    return err(
                        ident_span(&pi.ident),
                        format!("parameter `{pname}` is declared twice"),
                    );
                }
                params.push(Param {
                    name: pname,
                    ty,
                    mutable: pi.mutability.is_some(),
                    span: ident_span(&pi.ident),
                });
            }
        }
    }
    if class.is_some() && params.first().is_none_or(|p| p.name != "self") {
        return err(
            sp,
            "a method takes `&self` first (associated functions are not supported: write a free function)",
        );
    }
    let ret = match &sig.output {
        syn::ReturnType::Default => Ty::Unit,
        syn::ReturnType::Type(_, t) => parse_ty(&d.module, t)?,
    };
    if kernel {
        match params.first() {
            Some(p) if p.ty == Ty::I32 || p.ty == Ty::I64 => {}
            _ => {
                return err(
                    sp,
                    "a kernel's first parameter is the workitem index, `i: i32` or `i: i64`",
                );
            }
        }
        if !matches!(ret, Ty::Unit | Ty::I32 | Ty::I64 | Ty::F32 | Ty::F64) {
            return err(
                sp,
                "a kernel returns nothing (it writes its results to the heap), or a number its launches reduce (`i32`, `i64`, `f32`, `f64`)",
            );
        }
    }
    let kind = match class {
        Some(c) => FuncKind::Method {
            class: c,
            is_abstract: body.is_none(),
        },
        None if kernel => FuncKind::Kernel,
        None => FuncKind::Static,
    };
    let id = FuncId::new(d.module.funcs.len());
    if let Some(c) = class {
        d.module.classes[c.index()].methods.push(id);
    }
    // The bytecode's parameters; a kernel with an `i32` index takes the
    // `i64` the runtime passes and narrows it in its prologue.
    let locals = params
        .iter()
        .enumerate()
        .map(|(k, p)| Local {
            name: if k == 0 && class.is_some() {
                "this".into()
            } else if k == 0 && kernel && p.ty == Ty::I32 {
                format!("{}_i64", p.name)
            } else {
                p.name.clone()
            },
            ty: if k == 0 && kernel {
                offload_ir::Type::I64
            } else {
                p.ty.ir().expect("parameters are values")
            },
        })
        .collect::<Vec<_>>();
    d.by_name
        .insert(name.clone(), FuncId::new(d.module.funcs.len()));
    d.module.funcs.push(Function {
        name,
        kind,
        param_count: locals.len() as u32,
        locals,
        ret: ret.ir(),
        body: Vec::new(),
        debug: Meta(FuncDebug {
            span: sp,
            ..FuncDebug::default()
        }),
    });
    d.sigs.push(Sig {
        params,
        ret,
        kernel,
        span: sp,
    });
    d.bodies.push(body);
    Ok(())
}
