//! Diagnostics of the front end: a message at a source position, rendered
//! with a caret by the runtime's renderer like every other offload error.

use offload_ir::{Diagnostic, Phase, Span};
use std::sync::Arc;

/// Where a syntax node is in the file, as the bytecode's spans are
/// (byte offsets, 1-based line and column).
pub fn span_of(s: proc_macro2::Span) -> Span {
    let start = s.start();
    let range = s.byte_range();
    let (bytes, lines) = BASE.with(std::cell::Cell::get);
    Span {
        start: range.start as u32 + bytes,
        end: range.end.max(range.start) as u32 + bytes,
        line: start.line as u32 + lines,
        col: start.column as u32 + 1,
    }
}

thread_local! {
    /// Where the text being parsed starts in its file: bytes and lines
    /// before it ([`Based`]).
    static BASE: std::cell::Cell<(u32, u32)> = const { std::cell::Cell::new((0, 0)) };
}

/// While it lives, [`span_of`] places spans in a part of a file parsed on
/// its own, which starts at a line start after `bytes` bytes and `lines`
/// lines (the front end parses a file a part at a time: [`crate::parts`]).
#[derive(Debug)]
pub struct Based(());

impl Based {
    /// Spans are of text that starts `bytes` bytes and `lines` lines into
    /// the file.
    pub fn at(bytes: u32, lines: u32) -> Based {
        BASE.with(|b| b.set((bytes, lines)));
        Based(())
    }
}

impl Drop for Based {
    fn drop(&mut self) {
        BASE.with(|b| b.set((0, 0)));
    }
}

/// A front-end error at `span`, on its way to becoming a [`Diagnostic`]
/// once the file and function are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// Where.
    pub span: Span,
    /// What is wrong, in the user's terms.
    pub message: String,
    /// What was expected there, if the problem is a mismatch.
    pub expected: Option<String>,
    /// What was found instead.
    pub found: Option<String>,
}

impl Error {
    /// An error at `span` saying `message`.
    pub fn new(span: Span, message: impl Into<String>) -> Self {
        Error {
            span,
            message: message.into(),
            expected: None,
            found: None,
        }
    }

    /// A type mismatch: `expected` there, `found` instead.
    pub fn mismatch(span: Span, message: String, expected: String, found: String) -> Self {
        Error {
            span,
            message,
            expected: Some(expected),
            found: Some(found),
        }
    }

    /// The diagnostic, in `file` and (if any) function `func`.
    pub fn diagnostic(self, file: &Arc<str>, func: Option<&str>) -> Diagnostic {
        Diagnostic {
            phase: Phase::Compile,
            file: file.clone(),
            span: self.span,
            func: func.map(str::to_string),
            bci: None,
            message: self.message,
            expected: self.expected,
            found: self.found,
        }
    }
}

impl From<syn::Error> for Error {
    fn from(e: syn::Error) -> Self {
        Error::new(span_of(e.span()), e.to_string())
    }
}

/// Result of the front end's steps.
pub type R<T> = Result<T, Error>;

/// `Err` of an [`Error`] at `span` (for `return err(...)`).
pub fn err<T>(span: Span, message: impl Into<String>) -> R<T> {
    Err(Error::new(span, message))
}

/// The span of an expression, from its first token to its last, found by
/// walking down the expression's left and right edges. `Spanned::span`
/// prints the whole expression to tokens first, which makes lowering
/// quadratic in the nesting depth; this is linear in it.
pub fn expr_span(e: &syn::Expr) -> Span {
    let (a, b) = (first(e), last(e));
    span_of(a.join(b).unwrap_or(a))
}

fn first(e: &syn::Expr) -> proc_macro2::Span {
    use syn::Expr as E;
    use syn::spanned::Spanned;
    match e {
        E::Binary(b) if b.attrs.is_empty() => first(&b.left),
        E::Cast(c) if c.attrs.is_empty() => first(&c.expr),
        E::Index(i) if i.attrs.is_empty() => first(&i.expr),
        E::Field(f) if f.attrs.is_empty() => first(&f.base),
        E::MethodCall(m) if m.attrs.is_empty() => first(&m.receiver),
        E::Call(c) if c.attrs.is_empty() => first(&c.func),
        E::Assign(a) if a.attrs.is_empty() => first(&a.left),
        E::Lit(l) if l.attrs.is_empty() => l.lit.span(),
        E::Path(p) if p.attrs.is_empty() && p.qself.is_none() && p.path.leading_colon.is_none() => {
            p.path
                .segments
                .first()
                .map_or_else(|| e.span(), |s| s.ident.span())
        }
        E::Paren(p) if p.attrs.is_empty() => p.paren_token.span.open(),
        _ => e.span(),
    }
}

fn last(e: &syn::Expr) -> proc_macro2::Span {
    use syn::Expr as E;
    use syn::spanned::Spanned;
    match e {
        E::Binary(b) => last(&b.right),
        E::Assign(a) => last(&a.right),
        E::Index(i) => i.bracket_token.span.close(),
        E::Field(f) => match &f.member {
            syn::Member::Named(n) => n.span(),
            syn::Member::Unnamed(u) => u.span,
        },
        E::MethodCall(m) => m.paren_token.span.close(),
        E::Call(c) => c.paren_token.span.close(),
        E::Lit(l) => l.lit.span(),
        E::Path(p) if p.qself.is_none() => p.path.segments.last().map_or_else(
            || e.span(),
            |s| match &s.arguments {
                syn::PathArguments::None => s.ident.span(),
                _ => e.span(),
            },
        ),
        E::Paren(p) => p.paren_token.span.close(),
        E::Unary(u) => last(&u.expr),
        _ => e.span(),
    }
}
