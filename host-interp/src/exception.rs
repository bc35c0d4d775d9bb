//! Exceptions as the interpreter reports them.

use offload_ir::{Bci, ExceptionKind};
use std::fmt;

/// One frame of a bytecode stack trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceFrame {
    /// Function (or `Class.method`).
    pub func: String,
    /// Bytecode index.
    pub bci: Bci,
    /// Source line (0 if unknown).
    pub line: u32,
}

/// An exception thrown by a workitem.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Exception {
    /// What was thrown.
    pub kind: ExceptionKind,
    /// The workitem that threw, if running a kernel.
    pub workitem: Option<i64>,
    /// Details (the index and length of a bad access, the failed cast).
    pub message: String,
    /// Innermost frame first.
    pub trace: Vec<TraceFrame>,
}

impl Exception {
    /// The innermost frame.
    pub fn top(&self) -> Option<&TraceFrame> {
        self.trace.first()
    }
}

impl fmt::Display for Exception {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.kind.name())?;
        if let Some(w) = self.workitem {
            write!(f, " in workitem {w}")?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        for t in &self.trace {
            write!(f, "\n    at {} (bci {}, line {})", t.func, t.bci, t.line)?;
        }
        Ok(())
    }
}
