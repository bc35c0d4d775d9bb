//! Tokens of the text form. Newlines are tokens: one instruction per line.

use crate::module::Span;

/// A token kind.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) enum Tok {
    /// Identifier, possibly dotted (`i32.add`, `Point.x`).
    Ident(String),
    /// A numeric literal as written (`-12`, `0x1f`, `1.5e-3`, `-inf`).
    Number(String),
    LParen,
    RParen,
    LBrace,
    RBrace,
    LBracket,
    RBracket,
    Colon,
    Comma,
    Arrow,
    Newline,
    /// A character that starts no token.
    Bad(char),
    Eof,
}

impl Tok {
    /// How the token is shown in "found …" messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Number(s) => format!("number `{s}`"),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBrace => "`{`".into(),
            Tok::RBrace => "`}`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::Colon => "`:`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Arrow => "`->`".into(),
            Tok::Newline => "end of line".into(),
            Tok::Bad(c) => format!("character `{}` (U+{:04X})", c.escape_default(), *c as u32),
            Tok::Eof => "end of file".into(),
        }
    }
}

/// A token with its span.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A `;` comment: its line, its text (without the `;` and surrounding
/// blanks), and whether code precedes it on its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Comment {
    pub line: u32,
    pub text: String,
    pub trailing: bool,
}

/// Split `src` into tokens. Never fails: unknown characters become
/// [`Tok::Bad`] for the parser to report. Always ends with [`Tok::Eof`].
#[cfg(test)]
pub(crate) fn lex(src: &str) -> Vec<Token> {
    lex_with_comments(src).0
}

/// [`lex`], also returning the comments.
pub(crate) fn lex_with_comments(src: &str) -> (Vec<Token>, Vec<Comment>) {
    let mut comments = Vec::new();
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let mut out = Vec::new();
    let (mut line, mut col) = (1u32, 1u32);
    let mut i = 0;
    let off = |i: usize| chars.get(i).map_or(src.len(), |&(o, _)| o) as u32;
    while i < chars.len() {
        let c = chars[i].1;
        let start = i;
        let (sline, scol) = (line, col);
        let at = i;
        let peek = |k: usize| chars.get(at + k).map(|&(_, c)| c);
        let tok = match c {
            '\n' => {
                i += 1;
                Some(Tok::Newline)
            }
            ';' => {
                while i < chars.len() && chars[i].1 != '\n' {
                    i += 1;
                }
                let text: String = chars[start + 1..i].iter().map(|&(_, c)| c).collect();
                let trailing = out
                    .last()
                    .is_some_and(|t: &Token| t.span.line == line && t.tok != Tok::Newline);
                comments.push(Comment {
                    line,
                    text: text.trim().to_string(),
                    trailing,
                });
                None
            }
            c if c.is_whitespace() => {
                i += 1;
                None
            }
            '(' | ')' | '{' | '}' | '[' | ']' | ':' | ',' => {
                i += 1;
                Some(match c {
                    '(' => Tok::LParen,
                    ')' => Tok::RParen,
                    '{' => Tok::LBrace,
                    '}' => Tok::RBrace,
                    '[' => Tok::LBracket,
                    ']' => Tok::RBracket,
                    ':' => Tok::Colon,
                    _ => Tok::Comma,
                })
            }
            '-' if peek(1) == Some('>') => {
                i += 2;
                Some(Tok::Arrow)
            }
            c if c.is_ascii_digit()
                || ((c == '-' || c == '+')
                    && peek(1).is_some_and(|d| d.is_ascii_alphanumeric() || d == '.')) =>
            {
                i += 1;
                let hex = c == '0' && matches!(peek(1), Some('x' | 'X'))
                    || matches!((peek(1), peek(2)), (Some('0'), Some('x' | 'X')));
                while let Some(&(_, d)) = chars.get(i) {
                    let prev = chars[i - 1].1;
                    let exp_sign = (d == '-' || d == '+') && !hex && matches!(prev, 'e' | 'E');
                    if is_ident_char(d) || d == '.' || exp_sign {
                        i += 1;
                    } else {
                        break;
                    }
                }
                let text: String = chars[start..i].iter().map(|&(_, c)| c).collect();
                Some(Tok::Number(text))
            }
            c if is_ident_start(c) => {
                i += 1;
                loop {
                    match chars.get(i).map(|&(_, c)| c) {
                        Some(d) if is_ident_char(d) => i += 1,
                        Some('.') if chars.get(i + 1).is_some_and(|&(_, d)| is_ident_start(d)) => {
                            i += 1
                        }
                        _ => break,
                    }
                }
                let text: String = chars[start..i].iter().map(|&(_, c)| c).collect();
                Some(Tok::Ident(text))
            }
            other => {
                i += 1;
                Some(Tok::Bad(other))
            }
        };
        // Advance line/column over what was consumed.
        for &(_, ch) in &chars[start..i] {
            if ch == '\n' {
                line += 1;
                col = 1;
            } else {
                col += 1;
            }
        }
        if let Some(tok) = tok {
            out.push(Token {
                tok,
                span: Span {
                    start: off(start),
                    end: off(i),
                    line: sline,
                    col: scol,
                },
            });
        }
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span {
            start: src.len() as u32,
            end: src.len() as u32,
            line,
            col,
        },
    });
    (out, comments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<Tok> {
        lex(s).into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn lexes_the_shapes_people_type() {
        assert_eq!(
            toks("f32.const -1.5e-3 ; hi\n"),
            vec![
                Tok::Ident("f32.const".into()),
                Tok::Number("-1.5e-3".into()),
                Tok::Newline,
                Tok::Eof
            ]
        );
        assert_eq!(
            toks("(a: f32[]) -> i32"),
            vec![
                Tok::LParen,
                Tok::Ident("a".into()),
                Tok::Colon,
                Tok::Ident("f32".into()),
                Tok::LBracket,
                Tok::RBracket,
                Tok::RParen,
                Tok::Arrow,
                Tok::Ident("i32".into()),
                Tok::Eof
            ]
        );
        assert_eq!(toks("-inf")[0], Tok::Number("-inf".into()));
        assert_eq!(toks("0x1f")[0], Tok::Number("0x1f".into()));
        assert_eq!(toks("@")[0], Tok::Bad('@'));
    }

    #[test]
    fn positions_are_one_based() {
        let t = lex("a\n  b");
        assert_eq!((t[0].span.line, t[0].span.col), (1, 1));
        assert_eq!((t[2].span.line, t[2].span.col), (2, 3));
    }
}
