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
    /// The file the function's module came from (as it was loaded: a
    /// path, `kernel!`'s and `kernels!`'s Rust file, `<stdin>`).
    pub file: std::sync::Arc<str>,
    /// Source line (0 if unknown).
    pub line: u32,
    /// Source column, in characters (0 if unknown).
    pub col: u32,
}

/// `FUNC (FILE:LINE:COL, bci B)`, or `FUNC (bci B)` with no source line.
impl fmt::Display for TraceFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{} (bci {})", self.func, self.bci)
        } else {
            write!(
                f,
                "{} ({}:{}:{}, bci {})",
                self.func, self.file, self.line, self.col, self.bci
            )
        }
    }
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
        // A deep trace (a stack overflow has hundreds of frames) shows its
        // innermost and outermost frames and counts the rest.
        const HEAD: usize = 12;
        const TAIL: usize = 4;
        let n = self.trace.len();
        for (i, t) in self.trace.iter().enumerate() {
            if n > HEAD + TAIL + 1 && i == HEAD {
                write!(f, "\n    ... {} more frames ...", n - HEAD - TAIL)?;
            }
            if n > HEAD + TAIL + 1 && (HEAD..n - TAIL).contains(&i) {
                continue;
            }
            write!(f, "\n    at {t}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_frames(n: usize) -> Exception {
        Exception {
            kind: ExceptionKind::StackOverflow,
            workitem: Some(3),
            message: String::new(),
            trace: (0..n)
                .map(|i| TraceFrame {
                    func: format!("f{i}"),
                    bci: 1,
                    file: "k.ofk".into(),
                    line: 2,
                    col: 5,
                })
                .collect(),
        }
    }

    #[test]
    fn a_deep_trace_shows_its_ends_and_counts_the_rest() {
        let text = with_frames(513).to_string();
        assert_eq!(text.lines().count(), 1 + 12 + 1 + 4, "{text}");
        assert!(text.contains("at f0 (k.ofk:2:5, bci 1)"));
        assert!(text.contains("at f11 "));
        assert!(!text.contains("at f12 "));
        assert!(text.contains("... 497 more frames ..."));
        assert!(text.contains("at f509 ") && text.contains("at f512 "));
        // A short trace is shown whole.
        let text = with_frames(17).to_string();
        assert_eq!(text.lines().count(), 18, "{text}");
        assert!(!text.contains("more frames"));
    }
}
