//! The PTX tokenizer: words (opcodes with their dotted qualifiers,
//! directives, registers, labels), numbers and punctuation, each with its
//! line. Comments (`//` and `/* */`) are dropped.

use crate::Error;

/// A token and the 1-based line it starts on.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tok {
    pub(crate) t: T,
    pub(crate) line: u32,
}

/// Token kinds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum T {
    /// A word: `ld.u64`, `.reg`, `%r1`, `%tid.x`, `$L1`, `offload_k0_v1`.
    Word(String),
    /// A number as written (`12`, `0x1f`, `0d3FF0…`, `0f3F80…`, `1.5`).
    Num(String),
    /// One punctuation character.
    P(char),
    /// A string literal (in `.pragma` and `.file`), without its quotes.
    Str(String),
}

fn word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '$' | '%' | '.')
}

/// Splits `text` into tokens.
pub(crate) fn lex(text: &str) -> Result<Vec<Tok>, Error> {
    let mut out = Vec::new();
    let b: Vec<char> = text.chars().collect();
    let (mut i, mut line) = (0usize, 1u32);
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && b.get(i + 1) == Some(&'*') {
            let start = line;
            i += 2;
            loop {
                match b.get(i) {
                    None => return Err(Error::parse(start, "unterminated `/*` comment")),
                    Some('*') if b.get(i + 1) == Some(&'/') => {
                        i += 2;
                        break;
                    }
                    Some('\n') => line += 1,
                    _ => {}
                }
                i += 1;
            }
        } else if c.is_ascii_digit() {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == '.') {
                // A decimal exponent's sign: `1.5e-3`.
                if (b[i] == 'e' || b[i] == 'E')
                    && matches!(b.get(i + 1), Some('+' | '-'))
                    && !b[s..i].iter().any(|&c| c == 'x' || c == 'X')
                    && !matches!(b.get(s + 1), Some('d' | 'D' | 'f' | 'F'))
                {
                    i += 1;
                }
                i += 1;
            }
            out.push(Tok {
                t: T::Num(b[s..i].iter().collect()),
                line,
            });
        } else if word_char(c) {
            let s = i;
            while i < b.len() && word_char(b[i]) {
                i += 1;
            }
            out.push(Tok {
                t: T::Word(b[s..i].iter().collect()),
                line,
            });
        } else if c == '"' {
            let start = line;
            let s = i + 1;
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\n' {
                    return Err(Error::parse(start, "unterminated string"));
                }
                i += 1;
            }
            if i >= b.len() {
                return Err(Error::parse(start, "unterminated string"));
            }
            out.push(Tok {
                t: T::Str(b[s..i].iter().collect()),
                line,
            });
            i += 1;
        } else if "{}()[],;:@!+-<>|=".contains(c) {
            out.push(Tok { t: T::P(c), line });
            i += 1;
        } else {
            return Err(Error::parse(line, format!("unexpected character `{c}`")));
        }
    }
    Ok(out)
}

/// Parses a PTX integer literal (decimal, `0x` hex, `0` octal, `0b`
/// binary, optional `U` suffix) to its 64-bit pattern.
pub(crate) fn int_literal(s: &str) -> Option<u64> {
    let s = s.strip_suffix('U').unwrap_or(s);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else if let Some(b) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        u64::from_str_radix(b, 2).ok()
    } else if s.len() > 1 && s.starts_with('0') && s.bytes().all(|c| c.is_ascii_digit()) {
        u64::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse::<u64>().ok()
    }
}

/// A float literal: `0fXXXXXXXX` (f32 bits), `0dXXXXXXXXXXXXXXXX` (f64
/// bits) or a decimal with a point or exponent. Returns the value as f64
/// and whether it was written as f32 bits.
pub(crate) fn float_literal(s: &str) -> Option<FloatLit> {
    if let Some(h) = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F")) {
        (h.len() == 8)
            .then(|| u32::from_str_radix(h, 16).ok())
            .flatten()
            .map(FloatLit::F32Bits)
    } else if let Some(h) = s.strip_prefix("0d").or_else(|| s.strip_prefix("0D")) {
        (h.len() == 16)
            .then(|| u64::from_str_radix(h, 16).ok())
            .flatten()
            .map(FloatLit::F64Bits)
    } else if s.contains(['.', 'e', 'E']) && !s.starts_with("0x") {
        s.parse::<f64>().ok().map(FloatLit::Decimal)
    } else {
        None
    }
}

/// A float literal's form.
#[derive(Copy, Clone, Debug, PartialEq)]
pub(crate) enum FloatLit {
    /// `0f…`: exact f32 bits.
    F32Bits(u32),
    /// `0d…`: exact f64 bits.
    F64Bits(u64),
    /// A decimal, rounded to the instruction's type.
    Decimal(f64),
}

impl FloatLit {
    /// The literal's bits for a float type of `bits` width (PTX converts a
    /// literal of the other width by value).
    pub(crate) fn bits_for(self, bits: u32) -> u64 {
        let v = match self {
            FloatLit::F32Bits(b) if bits == 32 => return u64::from(b),
            FloatLit::F64Bits(b) if bits == 64 => return b,
            FloatLit::F32Bits(b) => f64::from(f32::from_bits(b)),
            FloatLit::F64Bits(b) => f64::from_bits(b),
            FloatLit::Decimal(v) => v,
        };
        if bits == 32 {
            u64::from((v as f32).to_bits())
        } else {
            v.to_bits()
        }
    }
}
