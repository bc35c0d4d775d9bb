//! Bounds on what the front end accepts, checked before parsing, so that no
//! source text can exhaust the stack or take time out of proportion to its
//! size.
//!
//! syn's parser and this crate's lowering recurse once per level of
//! nesting: a bracket, a prefix operator, and (for a chain of binary
//! operators, whose tree is as deep as the chain is long) an operator. A
//! stack overflow aborts the process, which no caller can catch, so
//! [`check`] scans the text once, without recursion, and refuses a text
//! that nests deeper than [`MAX_NESTING`] brackets, chains more than
//! [`MAX_PREFIX`] prefix operators, or has more than [`MAX_OPERATORS`]
//! operators in one expression — with an error naming the line. It also
//! refuses what is not ASCII outside comments, strings and quotes (names
//! become the bytecode's, which are ASCII), naming the word, and brackets
//! that do not match, naming the bracket (syn's lexer says only that the
//! text does not lex). The
//! limits are far past what a person writes (kernels rarely nest ten
//! deep), and the front end runs on a thread whose stack holds them
//! ([`on_big_stack`]).

use crate::error::Error;
use offload_ir::Span;

/// Brackets (`(`, `[`, `{`) open at once, at most.
pub const MAX_NESTING: usize = 1000;

/// Prefix operators (`-`, `!`, `*`, `&`) in a row, at most.
pub const MAX_PREFIX: usize = 1000;

/// Operators in one expression (between `;`, `,` and brackets), at most.
pub const MAX_OPERATORS: usize = 4096;

/// The stack the front end runs on: room for the limits above with a wide
/// margin (parsing measured about 2.5 KiB per level of brackets).
pub const STACK_BYTES: usize = 256 << 20;

/// Front-end threads kept waiting for the next compile, at most.
const THREADS_KEPT: usize = 4;

/// How long a kept front-end thread waits for the next compile before it
/// ends.
const LINGER: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a caller of [`on_big_stack`] looks for the result before it
/// sleeps.
const WAIT_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// Run `f` on a thread with a stack of [`STACK_BYTES`] (the memory is
/// reserved, and only what the recursion touches is used), and return
/// what it returns (or raise its panic here). The threads are kept
/// between calls (`offload_gang::kept`): starting one took 88 µs on a
/// 2-core VM, twice what compiling saxpy then took on it.
pub fn on_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    static THREADS: std::sync::LazyLock<offload_gang::kept::Kept> =
        std::sync::LazyLock::new(|| {
            offload_gang::kept::Kept::new("offload-front-end", THREADS_KEPT)
                .stack(STACK_BYTES)
                .linger(LINGER)
                .spin(WAIT_SPIN)
        });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let job = Box::new(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        Box::new(move || {
            let _ = tx.send(out);
        }) as offload_gang::kept::Tell
    });
    if THREADS.run(job).is_err() {
        no_thread();
    }
    // The compile is short (tens to hundreds of microseconds) and this
    // thread has nothing else to do: look for the result a while before
    // sleeping on it (a sleeper's wake-up took 2–60 µs on a 2-core VM).
    let out = match offload_gang::kept::try_recv_for(&rx, WAIT_SPIN) {
        Ok(out) => Ok(out),
        Err(std::sync::mpsc::TryRecvError::Disconnected) => Err(()),
        Err(std::sync::mpsc::TryRecvError::Empty) => rx.recv().map_err(drop),
    };
    match out {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        // The thread died without telling (it cannot: the job's panic is
        // caught).
        Err(_) => no_thread(),
    }
}

/// The system gave no thread (out of threads or memory).
#[cold]
fn no_thread() -> ! {
    panic!("offload's front end could not start its thread (out of threads or memory)")
}

/// Check `src` against the limits; the error names the line where one is
/// passed.
pub fn check(src: &str) -> Result<(), Error> {
    let mut cur = Cursor {
        b: src.as_bytes(),
        i: 0,
        line: 1,
        line_start: 0,
    };
    let mut nest = Nesting {
        ops: vec![0],
        prefix: 0,
        after_operand: false,
    };
    // The brackets open now, each with where it is.
    let mut open: Vec<(u8, Span)> = Vec::new();
    while let Some(&c) = cur.b.get(cur.i) {
        match c {
            b'\n' => cur.newline(),
            b'/' if cur.peek(1) == Some(b'/') => cur.skip_line_comment(),
            b'/' if cur.peek(1) == Some(b'*') => cur.skip_block_comment(),
            b'"' => {
                cur.skip_string();
                nest.operand();
            }
            b'\'' => {
                cur.skip_quote();
                nest.operand();
            }
            b'(' | b'[' | b'{' => {
                if nest.ops.len() > MAX_NESTING {
                    return Err(Error::new(
                        cur.span(cur.i),
                        format!(
                            "brackets nest more than {MAX_NESTING} deep here (offload's limit)"
                        ),
                    ));
                }
                nest.open();
                open.push((c, cur.span(cur.i)));
                cur.i += 1;
            }
            b')' | b']' | b'}' => {
                let here = cur.span(cur.i);
                match open.pop() {
                    None => {
                        return Err(Error::new(
                            here,
                            format!(
                                "this `{}` closes nothing: no bracket is open here",
                                c as char
                            ),
                        ));
                    }
                    Some((o, at)) if closer(o) != c => {
                        return Err(Error::new(
                            here,
                            format!(
                                "this `{}` does not close the `{}` at line {}, column {}",
                                c as char, o as char, at.line, at.col
                            ),
                        ));
                    }
                    Some(_) => {}
                }
                nest.close(c == b'}');
                cur.i += 1;
            }
            b';' | b',' => {
                nest.end_expression();
                cur.i += 1;
            }
            c if is_operator(c) => {
                let start = cur.i;
                let run = cur.operator_run();
                nest.operator(run)
                    .map_err(|message| Error::new(cur.span(start), message))?;
            }
            c if c.is_ascii_whitespace() => cur.i += 1,
            c if !c.is_ascii() => return Err(cur.not_ascii()),
            _ => {
                nest.operand();
                cur.i += 1;
            }
        }
    }
    match open.pop() {
        Some((o, at)) => Err(Error::new(
            at,
            format!("this `{}` is never closed", o as char),
        )),
        None => Ok(()),
    }
}

/// The bracket that closes opening bracket `o`.
fn closer(o: u8) -> u8 {
    match o {
        b'(' => b')',
        b'[' => b']',
        _ => b'}',
    }
}

/// Whether `c` may be part of an operator token.
fn is_operator(c: u8) -> bool {
    matches!(
        c,
        b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'!' | b'<' | b'>' | b'='
    )
}

/// Where [`check`] is in the text, and on which line.
pub(crate) struct Cursor<'a> {
    pub(crate) b: &'a [u8],
    pub(crate) i: usize,
    pub(crate) line: u32,
    pub(crate) line_start: usize,
}

impl Cursor<'_> {
    /// The byte `k` past the cursor.
    pub(crate) fn peek(&self, k: usize) -> Option<u8> {
        self.b.get(self.i + k).copied()
    }

    /// Past a newline at the cursor.
    pub(crate) fn newline(&mut self) {
        self.i += 1;
        self.line += 1;
        self.line_start = self.i;
    }

    /// A one-byte span at `at` (on the current line); its column counts
    /// characters.
    fn span(&self, at: usize) -> Span {
        Span {
            start: at as u32,
            end: at as u32 + 1,
            line: self.line,
            col: String::from_utf8_lossy(&self.b[self.line_start..at])
                .chars()
                .count() as u32
                + 1,
        }
    }

    /// The error for the non-ASCII character at the cursor (outside
    /// comments, strings and quotes): the bytecode's names, which the
    /// front end's become, are ASCII letters, digits and `_`.
    fn not_ascii(&self) -> Error {
        let wordy = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_' || !c.is_ascii();
        let start = self.b[..self.i]
            .iter()
            .rposition(|c| !wordy(c))
            .map_or(0, |k| k + 1);
        let end = self.b[self.i..]
            .iter()
            .position(|c| !wordy(c))
            .map_or(self.b.len(), |k| self.i + k);
        // The cursor stops only on ASCII bytes before this one, so `start`
        // and `end` are on character boundaries.
        let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&self.b[r]).into_owned();
        let word = text(start..end);
        let span = Span {
            start: start as u32,
            end: end as u32,
            line: self.line,
            col: text(self.line_start..start).chars().count() as u32 + 1,
        };
        Error::new(
            span,
            format!(
                "`{word}` is not ASCII: offload's names are ASCII letters, digits and `_` (those of its bytecode), and its operators ASCII"
            ),
        )
    }

    /// To the end of a `//` comment's line.
    pub(crate) fn skip_line_comment(&mut self) {
        while self.peek(0).is_some_and(|c| c != b'\n') {
            self.i += 1;
        }
    }

    /// Past a `/* */` comment (they nest in Rust).
    pub(crate) fn skip_block_comment(&mut self) {
        let mut depth = 0usize;
        while let Some(c) = self.peek(0) {
            if c == b'/' && self.peek(1) == Some(b'*') {
                depth += 1;
                self.i += 2;
            } else if c == b'*' && self.peek(1) == Some(b'/') {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    break;
                }
            } else if c == b'\n' {
                self.newline();
            } else {
                self.i += 1;
            }
        }
    }

    /// Past a string literal (escapes included).
    pub(crate) fn skip_string(&mut self) {
        self.i += 1;
        while let Some(c) = self.peek(0).filter(|&c| c != b'"') {
            if c == b'\\' {
                self.i += 2;
            } else if c == b'\n' {
                self.newline();
            } else {
                self.i += 1;
            }
        }
        self.i += 1;
    }

    /// Past a character literal ('x', '\n') or a lifetime's quote ('a).
    pub(crate) fn skip_quote(&mut self) {
        if self.peek(1) == Some(b'\\') {
            self.i += 2;
            while self.peek(0).is_some_and(|c| c != b'\'') {
                self.i += 1;
            }
            self.i += 1;
        } else if let Some(len) = self
            .peek(1)
            .filter(|c| !c.is_ascii())
            .map(|c| c.leading_ones() as usize)
            .filter(|&len| self.peek(1 + len) == Some(b'\''))
        {
            // A character of `len` bytes: 'é'.
            self.i += 2 + len;
        } else if self.peek(2) == Some(b'\'') {
            self.i += 3;
        } else {
            self.i += 1;
        }
    }

    /// Past one operator token: the longest run of operator characters
    /// (`<<=`, `&&`, `->`), short of a comment's start. Returns it.
    fn operator_run(&mut self) -> &[u8] {
        let start = self.i;
        while let Some(c) = self.peek(0) {
            let comment = c == b'/' && matches!(self.peek(1), Some(b'/') | Some(b'*'));
            if !is_operator(c) || comment {
                break;
            }
            self.i += 1;
        }
        &self.b[start..self.i]
    }
}

/// What [`check`] counts: the operators so far in the expression open at
/// each bracket depth, the prefix operators in a row, and whether the last
/// token ended an operand (so that `-` next is binary).
struct Nesting {
    ops: Vec<usize>,
    prefix: usize,
    after_operand: bool,
}

impl Nesting {
    /// An operand (a name, a literal).
    fn operand(&mut self) {
        self.after_operand = true;
        self.prefix = 0;
    }

    /// An opening bracket.
    fn open(&mut self) {
        self.ops.push(0);
        self.prefix = 0;
        self.after_operand = false;
    }

    /// A closing bracket; a block's (`}`) also ends the expression it
    /// stood in.
    fn close(&mut self, block: bool) {
        if self.ops.len() > 1 {
            self.ops.pop();
        }
        if block {
            self.end_expression();
        }
        self.after_operand = !block;
        self.prefix = 0;
    }

    /// `;` or `,`: the expression ends.
    fn end_expression(&mut self) {
        if let Some(n) = self.ops.last_mut() {
            *n = 0;
        }
        self.after_operand = false;
        self.prefix = 0;
    }

    /// An operator token `run`: binary after an operand, prefix otherwise.
    /// The error says which limit it passes.
    fn operator(&mut self, run: &[u8]) -> Result<(), String> {
        if self.after_operand {
            let n = self.ops.last_mut().expect("never empty");
            *n += 1;
            if *n > MAX_OPERATORS {
                return Err(format!(
                    "an expression of more than {MAX_OPERATORS} operators (offload's limit): split it into statements"
                ));
            }
            self.after_operand = false;
            self.prefix = 0;
        } else {
            self.prefix += run.len();
            if self.prefix > MAX_PREFIX {
                return Err(format!(
                    "more than {MAX_PREFIX} prefix operators in a row (offload's limit)"
                ));
            }
        }
        // A run ending in `=` (an assignment) starts an expression anew.
        if run.ends_with(b"=")
            && !matches!(run, b"==" | b"!=" | b"<=" | b">=")
            && let Some(n) = self.ops.last_mut()
        {
            *n = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_of(src: &str) -> Option<u32> {
        check(src).err().map(|e| e.span.line)
    }

    /// Through the front end, on a test thread's 2 MiB stack: nesting up
    /// to the limits compiles, past them is an error, never an overflow.
    #[test]
    fn the_front_end_compiles_up_to_the_limits_and_refuses_past_them() {
        let kernel = |body: String| {
            format!("#[kernel]\nfn k(i: i32, out: &mut [i32]) {{\n    out[i] = {body};\n}}\n")
        };
        let parens = |n: usize| format!("{}1{}", "(".repeat(n), ")".repeat(n));
        for (what, body, ok) in [
            ("990 parentheses", parens(990), true),
            ("2,800 parentheses", parens(2800), false),
            ("4,000 terms", format!("1{}", " + 1".repeat(4000)), true),
            ("40,000 terms", format!("1{}", " + 1".repeat(40_000)), false),
            ("900 minus signs", format!("{}1", "- ".repeat(900)), true),
            (
                "20,000 minus signs",
                format!("{}1", "- ".repeat(20_000)),
                false,
            ),
        ] {
            let r = crate::compile_verified("deep.ofk", &kernel(body));
            match r {
                Ok(_) => assert!(ok, "{what} compiled"),
                Err(d) => {
                    assert!(!ok, "{what}: {}", d.0[0].detail());
                    assert!(d.0[0].detail().contains("offload's limit"), "{what}");
                    assert_eq!(d.0[0].span.line, 3, "{what}");
                }
            }
        }
    }

    #[test]
    fn ordinary_code_passes() {
        let src = "fn f(a: &[f32], i: i32) -> f32 {\n    let x = -a[i as usize] * 2.0 + (1.0 - 3.0) / 'c' as f32;\n    // a comment ((( é\n    /* nested /* block */ ((( ü */\n    let s = \"(((é\";\n    let c = ['{', 'é', '€', '\\'', '\\u{e9}'];\n    if !(x < 0.0) && x >= 1.0 { x } else { -x }\n}\nfn g<'a>(x: &'a [i32]) {}\n";
        assert_eq!(line_of(src), None);
    }

    /// Brackets that do not match are named, with the one they meet.
    #[test]
    fn unmatched_brackets_are_named_where_they_are() {
        let at = |src: &str| {
            let e = check(src).unwrap_err();
            (e.span.line, e.span.col, e.message)
        };
        assert_eq!(
            at("fn k() {\n    let s = \"é\"; let x = (1 + 2];\n}\n"),
            (
                2,
                32,
                "this `]` does not close the `(` at line 2, column 26".into()
            )
        );
        assert_eq!(
            at("fn k() {\n}\n}\n"),
            (
                3,
                1,
                "this `}` closes nothing: no bracket is open here".into()
            )
        );
        assert_eq!(
            at("fn k() {\n    if x { y }\n"),
            (1, 8, "this `{` is never closed".into())
        );
    }

    #[test]
    fn deep_brackets_are_refused_at_their_line() {
        let n = MAX_NESTING + 10;
        let src = format!(
            "fn f() -> i32 {{\n    {}1{}\n}}\n",
            "(".repeat(n),
            ")".repeat(n)
        );
        assert_eq!(line_of(&src), Some(2));
        let ok = MAX_NESTING - 10;
        let src = format!(
            "fn f() -> i32 {{\n    {}1{}\n}}\n",
            "(".repeat(ok),
            ")".repeat(ok)
        );
        assert_eq!(line_of(&src), None);
    }

    #[test]
    fn long_prefix_runs_and_operator_chains_are_refused() {
        let src = format!(
            "fn f() -> i32 {{\n\n {}1\n}}\n",
            "- ".repeat(MAX_PREFIX + 1)
        );
        assert_eq!(line_of(&src), Some(3));
        let src = format!(
            "fn f() -> i32 {{\n 1{}\n}}\n",
            " + 1".repeat(MAX_OPERATORS + 1)
        );
        assert_eq!(line_of(&src), Some(2));
        // As many in separate statements is fine.
        let src = format!(
            "fn f() -> i32 {{\n let mut x = 0;\n{}x\n}}\n",
            "x = x + 1;\n".repeat(MAX_OPERATORS + 10)
        );
        assert_eq!(line_of(&src), None);
    }
}

#[cfg(test)]
mod big_stack_tests {
    use super::on_big_stack;

    /// A panic on the front end's thread is raised in the caller, and the
    /// thread stays for the next compile.
    #[test]
    fn a_panic_reaches_the_caller_and_the_next_call_runs() {
        let p = std::panic::catch_unwind(|| on_big_stack(|| -> u32 { panic!("in the front end") }))
            .unwrap_err();
        assert_eq!(p.downcast_ref::<&str>(), Some(&"in the front end"));
        assert_eq!(on_big_stack(|| 7), 7);
    }

    /// Callers on several threads at once each get their own result, on a
    /// thread with the big stack (a kept one or a new one).
    #[test]
    fn callers_at_once_get_their_own_results() {
        std::thread::scope(|s| {
            let hs: Vec<_> = (0..8u64)
                .map(|k| {
                    s.spawn(move || {
                        (0..50u64)
                            .map(|j| on_big_stack(move || k * 1000 + j))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for (k, h) in hs.into_iter().enumerate() {
                let want: Vec<u64> = (0..50).map(|j| k as u64 * 1000 + j).collect();
                assert_eq!(h.join().unwrap(), want);
            }
        });
        // The thread runs with the front end's name (the stack size is
        // the Builder's, which `kept` tests).
        let name = on_big_stack(|| std::thread::current().name().map(str::to_string));
        assert_eq!(name.as_deref(), Some("offload-front-end"));
    }
}
