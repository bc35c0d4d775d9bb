//! Diagnostics of the front end: a message at a source position, rendered
//! with a caret by the runtime's renderer like every other offload error.

use offload_ir::{Diagnostic, Phase, Span};
use std::sync::Arc;

/// Where a syntax node is in the file, as the bytecode's spans are
/// (byte offsets, 1-based line and column).
pub fn span_of(s: proc_macro2::Span) -> Span {
    let start = s.start();
    let range = s.byte_range();
    Span {
        start: range.start as u32,
        end: range.end.max(range.start) as u32,
        line: start.line as u32,
        col: start.column as u32 + 1,
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
