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
//! operators in one expression — with an error naming the line. The
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

/// Run `f` on a thread of its own with a stack of [`STACK_BYTES`] (the
/// memory is reserved, and only what the recursion touches is used).
pub fn on_big_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        match std::thread::Builder::new()
            .name("offload-front-end".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(s, f)
        {
            Ok(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(_) => no_thread(),
        }
    })
}

/// The system gave no thread (out of threads or memory).
#[cold]
fn no_thread() -> ! {
    panic!("offload's front end could not start its thread (out of threads or memory)")
}

/// Check `src` against the limits; the error names the line where one is
/// passed.
pub fn check(src: &str) -> Result<(), Error> {
    let b = src.as_bytes();
    let mut i = 0;
    let mut line = 1u32;
    let mut line_start = 0usize;
    // Operators so far in the expression open at each depth.
    let mut ops: Vec<usize> = vec![0];
    let mut prefix = 0usize;
    // Whether the last token ended an operand (so `-` next is binary).
    let mut after_operand = false;
    let at = |i: usize, line: u32, line_start: usize| Span {
        start: i as u32,
        end: i as u32 + 1,
        line,
        col: (i - line_start) as u32 + 1,
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                line_start = i + 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Block comments nest in Rust.
                let mut depth = 0usize;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                            line_start = i + 1;
                        }
                        i += 1;
                    }
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    } else if b[i] == b'\n' {
                        line += 1;
                        line_start = i + 1;
                    }
                    i += 1;
                }
                i += 1;
                after_operand = true;
                prefix = 0;
            }
            b'\'' => {
                // A character literal ('x', '\n') or a lifetime ('a).
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
                after_operand = true;
                prefix = 0;
            }
            b'(' | b'[' | b'{' => {
                if ops.len() > MAX_NESTING {
                    return Err(Error::new(
                        at(i, line, line_start),
                        format!(
                            "brackets nest more than {MAX_NESTING} deep here (offload's limit)"
                        ),
                    ));
                }
                ops.push(0);
                prefix = 0;
                after_operand = false;
                i += 1;
            }
            b')' | b']' | b'}' => {
                if ops.len() > 1 {
                    ops.pop();
                }
                if c == b'}'
                    && let Some(n) = ops.last_mut()
                {
                    *n = 0;
                }
                after_operand = c != b'}';
                prefix = 0;
                i += 1;
            }
            b';' | b',' => {
                if let Some(n) = ops.last_mut() {
                    *n = 0;
                }
                after_operand = false;
                prefix = 0;
                i += 1;
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'&' | b'|' | b'^' | b'!' | b'<' | b'>' | b'=' => {
                // One operator token: the longest run of operator
                // characters (`<<=`, `&&`, `->`), counted once.
                let start = i;
                while i < b.len()
                    && matches!(
                        b[i],
                        b'+' | b'-'
                            | b'*'
                            | b'/'
                            | b'%'
                            | b'&'
                            | b'|'
                            | b'^'
                            | b'!'
                            | b'<'
                            | b'>'
                            | b'='
                    )
                    && !(b[i] == b'/' && matches!(b.get(i + 1), Some(b'/') | Some(b'*')))
                {
                    i += 1;
                }
                if after_operand {
                    let n = ops.last_mut().expect("never empty");
                    *n += 1;
                    if *n > MAX_OPERATORS {
                        return Err(Error::new(
                            at(start, line, line_start),
                            format!(
                                "an expression of more than {MAX_OPERATORS} operators (offload's limit): split it into statements"
                            ),
                        ));
                    }
                    after_operand = false;
                    prefix = 0;
                } else {
                    prefix += i - start;
                    if prefix > MAX_PREFIX {
                        return Err(Error::new(
                            at(start, line, line_start),
                            format!(
                                "more than {MAX_PREFIX} prefix operators in a row (offload's limit)"
                            ),
                        ));
                    }
                }
                // Operators that close an operand (`?`) do not occur here;
                // a run ending in `=` starts an expression anew.
                if b[i - 1] == b'='
                    && !matches!(&b[start..i], b"==" | b"!=" | b"<=" | b">=")
                    && let Some(n) = ops.last_mut()
                {
                    *n = 0;
                }
            }
            c if c.is_ascii_whitespace() => i += 1,
            _ => {
                after_operand = true;
                prefix = 0;
                i += 1;
            }
        }
    }
    Ok(())
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
        let src = "fn f(a: &[f32], i: i32) -> f32 {\n    let x = -a[i as usize] * 2.0 + (1.0 - 3.0) / 'c' as f32;\n    // a comment (((\n    /* nested /* block */ ((( */\n    let s = \"(((\";\n    if !(x < 0.0) && x >= 1.0 { x } else { -x }\n}\n";
        assert_eq!(line_of(src), None);
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
