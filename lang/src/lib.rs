//! `offload-lang`: kernels written in Rust syntax, compiled to offload's
//! bytecode — the project's "javac". The bytecode stays the contract with
//! the runtime: what this crate makes is verified like hand-written
//! bytecode, and a verifier error in it is reported as a bug of this
//! crate, never shown to the user as bytecode.
//!
//! The language is a subset of Rust with classes; `docs/LANGUAGE.md` is
//! its reference. In short:
//!
//! ```
//! let src = r#"
//! #[kernel]
//! fn saxpy(i: i32, a: f32, x: &[f32], y: &mut [f32]) {
//!     y[i] = a * x[i] + y[i];
//! }
//! "#;
//! let module = offload_lang::compile("saxpy.ofk", src)?;
//! let verified = offload_ir::verify(module).expect("the front end's output verifies");
//! assert!(verified.func_named("saxpy").is_some());
//! # Ok::<(), offload_ir::Diagnostics>(())
//! ```
//!
//! - **Kernels** are functions marked `#[kernel]`; the first parameter is
//!   the workitem index, `i32` or `i64`. An `i32` index is narrowed once,
//!   and the runtime refuses a launch range that does not fit in `i32`
//!   (`OffloadError::IndexRange`); an `i64` index is narrowed at each use,
//!   and one that does not fit in `i32` throws `IndexOutOfBounds`.
//! - **Types**: `i32 i64 f32 f64 bool`, slices `&[T]`/`&mut [T]` (heap
//!   arrays; only `&mut` ones take stores), classes `C` and `Option<C>`.
//! - **Classes** are structs; `#[extends(Parent)]` gives single
//!   inheritance; methods go in `impl C { fn m(&self) ... }` and are all
//!   virtual; a subclass overrides by defining the same method; a method
//!   without a body (`fn area(&self) -> f64;`) is abstract. `C { f: v }`
//!   makes an object (fields left out are zero).
//! - **Arithmetic** wraps on overflow, as the bytecode does (Rust's debug
//!   builds would panic): `i32::MAX + 1 == i32::MIN`. Division by zero
//!   throws `Arithmetic`.
//! - **Errors** carry the source line and column, and render with a
//!   caret.

#![deny(missing_docs)]

mod call;
pub mod error;
mod expr;
mod free;
mod func;
pub mod items;
pub mod limits;
pub mod ops;
pub mod parts;
pub mod ranges;
mod stmt;
pub mod ty;

use error::{Error, span_of};
pub use free::free_variables;
use func::{Binding, Fb};
use offload_ir::{Diagnostic, Diagnostics, FuncId, Inst, Module};
use std::sync::Arc;
use ty::Ty;

/// The extension of source files (`saxpy.ofk`).
pub const EXTENSION: &str = "ofk";

/// Compile a source file to a bytecode module (not yet verified; see
/// [`compile_verified`]). Every function is compiled; every function's
/// first error is reported.
pub fn compile(file: &str, src: &str) -> Result<Module, Diagnostics> {
    let (file, src) = (file.to_string(), src.to_string());
    limits::on_big_stack(move || {
        let r = parts::compile(&file, &src);
        // The spans are all in the module and the diagnostics now: let
        // proc-macro2 forget this file's text (it keeps every parsed
        // file's for the thread's lifetime otherwise).
        proc_macro2::extra::invalidate_current_thread_spans();
        r
    })
}

/// [`compile`] without letting proc-macro2 forget the text (inside a
/// procedural macro, where it cannot: `kernels!` checks its module here),
/// on the compiler's thread (proc-macro2 there is the compiler's, which
/// no other thread may call): the limits keep its recursion within the
/// compiler's stack.
pub fn check_in_macro(file: &str, src: &str) -> Result<(), Diagnostics> {
    let module = compile_keeping_spans(file, src)?;
    verify_generated(module).map(|_| ())
}

/// Whether `src` is within the front end's limits ([`limits`]): for a
/// caller that parses source text itself (a procedural macro).
pub fn check_limits(file: &str, src: &str) -> Result<(), Diagnostics> {
    limits::check(src).map_err(|e| Diagnostics(vec![e.diagnostic(&file.into(), None)]))
}

/// Parse `src` (after checking it against the limits) and lower it; call
/// on a stack of [`limits::STACK_BYTES`].
fn compile_keeping_spans(file: &str, src: &str) -> Result<Module, Diagnostics> {
    let file: Arc<str> = file.into();
    limits::check(src).map_err(|e| Diagnostics(vec![e.diagnostic(&file, None)]))?;
    let parsed = syn::parse_file(src)
        .map_err(Error::from)
        .and_then(ranges::rewrite)
        .map_err(|e| Diagnostics(vec![e.diagnostic(&file, None)]))?;
    let decls =
        items::declare(&parsed, &file).map_err(|e| Diagnostics(vec![e.diagnostic(&file, None)]))?;
    let mut module = decls.module.clone();
    let mut errors = Vec::new();
    for k in 0..decls.module.funcs.len() {
        let f = FuncId::new(k);
        if decls.bodies[k].is_none() {
            continue;
        }
        match lower(&decls, f, decls.bodies[k].expect("a body")) {
            Ok(func) => module.funcs[k] = func,
            Err(e) => errors.push(e.diagnostic(&file, Some(&decls.module.func(f).name))),
        }
    }
    if errors.is_empty() {
        Ok(module)
    } else {
        Err(Diagnostics(errors))
    }
}

/// [`compile`], then verify. A verifier error here is the front end's bug:
/// it is reported as an internal error at the source position of the
/// instruction the verifier rejected.
pub fn compile_verified(file: &str, src: &str) -> Result<offload_ir::Verified, Diagnostics> {
    verify_generated(compile(file, src)?)
}

/// Verify the front end's output; an error is the front end's bug.
fn verify_generated(module: Module) -> Result<offload_ir::Verified, Diagnostics> {
    let spans: Vec<Vec<offload_ir::Span>> = module
        .funcs
        .iter()
        .map(|f| f.debug.inst_spans.clone())
        .collect();
    let names: Vec<String> = module.funcs.iter().map(|f| f.name.clone()).collect();
    offload_ir::verify(module).map_err(|ds| {
        Diagnostics(
            ds.0.into_iter()
                .map(|d| internal_error(d, &names, &spans))
                .collect(),
        )
    })
}

/// A verifier diagnostic on generated code, as the front-end bug it is.
fn internal_error(d: Diagnostic, names: &[String], spans: &[Vec<offload_ir::Span>]) -> Diagnostic {
    let span = d
        .func
        .as_ref()
        .and_then(|f| names.iter().position(|n| n == f))
        .and_then(|k| d.bci.and_then(|b| spans[k].get(b as usize).copied()))
        .unwrap_or(d.span);
    Diagnostic {
        phase: offload_ir::Phase::Compile,
        span,
        bci: None,
        message: format!(
            "internal compiler error: offload-lang made bytecode the verifier rejects (a bug in the front end; please report it with this source): {}",
            d.detail()
        ),
        expected: None,
        found: None,
        ..d
    }
}

/// Lower function `f`'s body.
fn lower(
    d: &items::Decls<'_>,
    f: FuncId,
    body: &syn::Block,
) -> Result<offload_ir::Function, Error> {
    let mut fb = Fb::new(d, f);
    let sig = &d.sigs[f.index()];
    if sig.kernel && sig.params[0].ty == Ty::I32 {
        // The runtime passes the index as `i64`: narrow it once, as a
        // hand-written kernel does (the runtime refuses ranges that do not
        // fit such a kernel: `offload_ir::analysis::narrows_index`), so
        // the CPU device's vectorizer sees the same code.
        let p = &sig.params[0];
        fb.span = p.span;
        fb.emit(Inst::Load {
            local: offload_ir::LocalId(0),
        });
        fb.emit(Inst::I64ToI32);
        let local = fb.new_local(&p.name, Ty::I32);
        fb.emit(Inst::Store { local });
        fb.bind(
            &p.name,
            Binding {
                local,
                ty: Ty::I32,
                mutable: p.mutable,
            },
        );
    }
    let want = sig.ret;
    fb.span = sig.span;
    let t = fb.block(body, Some(want))?;
    let tail = body
        .stmts
        .last()
        .map(|s| span_of(syn::spanned::Spanned::span(s)))
        .unwrap_or(sig.span);
    let got = fb.vars.resolve(t);
    if want == Ty::Unit && got != Ty::Unit && got != Ty::Never {
        // A literal's type as Rust would default it.
        let named = match fb.ty_name(t).as_str() {
            "{integer}" => "i32".to_string(),
            "{float}" => "f64".to_string(),
            n => n.to_string(),
        };
        return Err(Error::mismatch(
            tail,
            format!(
                "`{}` returns nothing, but its body ends in a value: end it with `;`, or declare the result (`-> {named}`)",
                d.module.func(f).short_name(),
            ),
            "()".into(),
            fb.ty_name(t),
        ));
    }
    if fb.reachable && want != Ty::Unit {
        if fb.vars.resolve(t) == Ty::Unit {
            return Err(Error::new(
                tail,
                format!(
                    "`{}` must return `{}`, but its end is reached without a value",
                    d.module.func(f).short_name(),
                    fb.ty_name(want)
                ),
            ));
        }
        fb.coerce(t, want, tail, "the function's result")?;
        fb.span = tail;
        fb.emit(Inst::Ret);
    }
    fb.finish()
}

/// The names a source text defines, one per item (`fn` and `struct`
/// names; `impl C` for an impl block), each with the line it starts on,
/// in order; a syntax error is a diagnostic. For tools that keep
/// definitions by name (the REPL).
pub fn item_names(file: &str, src: &str) -> Result<Vec<(String, u32)>, Diagnostics> {
    let (file, src) = (file.to_string(), src.to_string());
    limits::on_big_stack(move || {
        let r = item_names_keeping_spans(&file, &src);
        proc_macro2::extra::invalidate_current_thread_spans();
        r
    })
}

fn item_names_keeping_spans(file: &str, src: &str) -> Result<Vec<(String, u32)>, Diagnostics> {
    let file: Arc<str> = file.into();
    limits::check(src).map_err(|e| Diagnostics(vec![e.diagnostic(&file, None)]))?;
    let parsed = syn::parse_file(src)
        .map_err(|e| Diagnostics(vec![Error::from(e).diagnostic(&file, None)]))?;
    Ok(parsed
        .items
        .iter()
        .filter_map(|item| {
            let name = match item {
                syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
                syn::Item::Struct(s) => Some(s.ident.to_string()),
                syn::Item::Impl(i) => match &*i.self_ty {
                    syn::Type::Path(p) => p.path.get_ident().map(|c| format!("impl {c}")),
                    _ => None,
                },
                _ => None,
            }?;
            let line = match item {
                syn::Item::Fn(f) => span_of(f.sig.ident.span()).line,
                syn::Item::Struct(s) => span_of(s.ident.span()).line,
                _ => span_of(syn::spanned::Spanned::span(item)).line,
            };
            Some((name, line))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verifier error in generated code is the front end's bug: it is
    /// reported at the source position of the instruction, as an internal
    /// error, never as bytecode.
    #[test]
    fn a_verifier_error_in_generated_code_points_at_the_source() {
        let src = "#[kernel]\nfn k(i: i32, out: &mut [i32]) {\n    out[i] = i;\n}\n";
        let mut m = compile("k.ofk", src).unwrap();
        // Break the output as a front-end bug would: the store's value
        // becomes an f32.
        let f = &mut m.funcs[0];
        let at = f
            .body
            .iter()
            .position(|i| *i == Inst::I32AStore)
            .expect("a store");
        f.body.insert(at, Inst::I32ToF32);
        let sp = f.debug.inst_spans[at];
        f.debug.inst_spans.insert(at, sp);
        let d = verify_generated(m).unwrap_err();
        let d = &d.0[0];
        assert!(
            d.message.starts_with("internal compiler error"),
            "{}",
            d.message
        );
        assert_eq!(d.phase, offload_ir::Phase::Compile);
        assert_eq!(d.bci, None, "no bytecode index reaches the user");
        assert_eq!(d.span.line, 3, "{d}");
        assert_eq!(&*d.file, "k.ofk", "the file's name, not its text");
    }

    /// User mistakes that once reached the verifier are the front end's
    /// errors, at the right place in the right file.
    #[test]
    fn a_tail_value_in_a_function_without_a_result_is_a_user_error() {
        for (src, found, suggest) in [
            (
                "fn k(i: i64, out: &mut [i64]) { -1 }\n",
                "{integer}",
                "-> i32",
            ),
            (
                "fn k(i: i64) { if i > 0 { 1.0 } else { 2.0 } }\n",
                "{float}",
                "-> f64",
            ),
            ("fn k(i: i64) { let x = i; x }\n", "i64", "-> i64"),
        ] {
            let d = &compile_verified("t.ofk", src).unwrap_err().0[0];
            let text = d.to_string();
            assert!(
                d.message
                    .starts_with("`k` returns nothing, but its body ends in a value")
                    && d.message.contains(suggest)
                    && d.found.as_deref() == Some(found)
                    && text.contains("t.ofk:1:"),
                "{text}"
            );
        }
        // A body ending in a statement, a `return;` or a loop that never
        // ends is fine.
        for src in [
            "fn k(i: i64, out: &mut [i64]) { out[i] = 1 }\n",
            "fn k(i: i64) { return; }\n",
            "fn k(i: i64) { loop {} }\n",
        ] {
            compile_verified("t.ofk", src).unwrap();
        }
    }

    #[test]
    fn names_that_are_not_ascii_are_refused_naming_the_word() {
        let src = "// é in a comment is fine\nfn k(i: i64, out: &mut [i64]) {\n    let s = \"é\";\n    let sé = 1;\n}\n";
        let d = &compile_verified("u.ofk", src).unwrap_err().0[0];
        assert!(d.message.starts_with("`sé` is not ASCII"), "{d}");
        assert_eq!((d.span.line, d.span.col), (4, 9), "{d}");
        assert_eq!(&*d.file, "u.ofk");
        let d = &compile_verified("u.ofk", "fn é() {}\n").unwrap_err().0[0];
        assert!(d.message.starts_with("`é` is not ASCII"), "{d}");
        assert_eq!((d.span.line, d.span.col), (1, 4), "{d}");
    }
}
