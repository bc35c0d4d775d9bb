//! Errors as values that carry the item at fault.

use crate::module::Span;
use crate::types::Bci;
use std::fmt;
use std::sync::Arc;

/// Which stage found the problem.
#[derive(Copy, Clone, PartialEq, Eq, Hash, Debug)]
pub enum Phase {
    /// The assembler: lexing, parsing, name resolution.
    Parse,
    /// The verifier.
    Verify,
    /// The source language's front end (`offload-lang`): parsing, names
    /// and types of a `.ofk` file or a `kernel!` closure.
    Compile,
}

/// One problem in a module: where it is and what was expected versus found.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Diagnostic {
    /// The stage that found it.
    pub phase: Phase,
    /// The source file (or `<input>`).
    pub file: Arc<str>,
    /// Where in the source.
    pub span: Span,
    /// The function (or `Class.method`) it is in, if any.
    pub func: Option<String>,
    /// The bytecode index it is at, if any.
    pub bci: Option<Bci>,
    /// What is wrong.
    pub message: String,
    /// What was expected, if the problem is a mismatch.
    pub expected: Option<String>,
    /// What was found instead.
    pub found: Option<String>,
}

impl Diagnostic {
    /// The message with the expected/found part and the function context,
    /// without the file position.
    pub fn detail(&self) -> String {
        let mut s = String::new();
        if let Some(func) = &self.func {
            s.push_str(&format!("in `{func}`"));
            if let Some(bci) = self.bci {
                s.push_str(&format!(" at bci {bci}"));
            }
            s.push_str(": ");
        }
        s.push_str(&self.message);
        match (&self.expected, &self.found) {
            (Some(e), Some(f)) => s.push_str(&format!(": expected {e}, found {f}")),
            (Some(e), None) => s.push_str(&format!(": expected {e}")),
            (None, Some(f)) => s.push_str(&format!(": found {f}")),
            (None, None) => {}
        }
        s
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let phase = match self.phase {
            Phase::Parse => "parse",
            Phase::Verify => "verify",
            Phase::Compile => "compile",
        };
        write!(
            f,
            "{}:{}:{}: {phase} error: {}",
            self.file,
            self.span.line,
            self.span.col,
            self.detail()
        )
    }
}

/// Every problem found in a module (at least one).
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Result alias of this crate.
pub type Result<T, E = Diagnostics> = std::result::Result<T, E>;

/// The candidate nearest to `word` by edit distance (strsim's
/// Damerau-Levenshtein), if one is near: at most a third of the word's
/// length away (one edit for short words), and closer than the word is
/// long (a one-letter word suggests nothing). Used for every "did you
/// mean" offload prints: mnemonics, locals, labels, classes, functions,
/// kernels, REPL commands, settings and variables.
pub fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let len = word.chars().count();
    let limit = (len / 3).max(1);
    candidates
        .into_iter()
        .filter(|c| *c != word)
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|&(d, _)| d <= limit && d < len)
        .min_by_key(|&(d, c)| (d, c))
        .map(|(_, c)| c)
}

/// `` (did you mean `NAME`?)`` for the candidate nearest to `word`, or
/// nothing.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, candidates).map_or(String::new(), |c| format!(" (did you mean `{c}`?)"))
}
