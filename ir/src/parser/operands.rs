//! Reading an instruction's operands from its line's tokens, and types in
//! their text form.

use super::*;

/// The closest mnemonic, if one is close.
pub(super) fn suggest(word: &str) -> Option<&'static str> {
    crate::diag::nearest(word, crate::isa::Opcode::ALL.iter().map(|op| op.mnemonic()))
}

pub(super) struct Reader<'a> {
    pub(super) toks: &'a [Token],
    pub(super) pos: usize,
    pub(super) eol: Span,
    pub(super) module: &'a Module,
    pub(super) func: &'a Function,
    pub(super) classes: &'a HashMap<String, ClassId>,
    pub(super) funcs: &'a HashMap<String, FuncId>,
    pub(super) labels: &'a HashMap<&'a str, Bci>,
    pub(super) locals: &'a HashMap<&'a str, LocalId>,
    pub(super) mnemonic: &'a str,
}

type RErr = (Span, String);

impl Reader<'_> {
    fn next(&mut self, what: &str) -> Result<&Token, RErr> {
        // Operands may be separated by commas.
        if self.pos > 0 && self.toks.get(self.pos).is_some_and(|t| t.tok == Tok::Comma) {
            self.pos += 1;
        }
        match self.toks.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t)
            }
            None => Err((
                self.eol,
                format!("`{}` needs {what}, found end of line", self.mnemonic),
            )),
        }
    }

    fn word(&mut self, what: &str) -> Result<(String, Span), RErr> {
        let mnemonic = self.mnemonic;
        let t = self.next(what)?;
        match &t.tok {
            Tok::Ident(s) | Tok::Number(s) => Ok((s.clone(), t.span)),
            other => Err((
                t.span,
                format!("`{mnemonic}` needs {what}, found {}", other.describe()),
            )),
        }
    }

    fn int<T: TryFrom<i128>>(&mut self, what: &str, unsigned_bits: u32) -> Result<T, RErr> {
        let (s, span) = self.word(what)?;
        let bad = || {
            (
                span,
                format!("`{}` needs {what}, found `{s}`", self.mnemonic),
            )
        };
        let (neg, digits) = match s.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, s.strip_prefix('+').unwrap_or(&s)),
        };
        let digits = digits.replace('_', "");
        let (radix, digits) = match digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0X"))
        {
            Some(h) => (16, h.to_string()),
            None => (10, digits),
        };
        let mag = u128::from_str_radix(&digits, radix).map_err(|_| bad())?;
        let v: i128 = if neg { -(mag as i128) } else { mag as i128 };
        // Hex literals may spell the bit pattern of a negative number.
        let v = if radix == 16
            && !neg
            && mag < (1u128 << unsigned_bits)
            && mag >= (1u128 << (unsigned_bits - 1))
        {
            v - (1i128 << unsigned_bits)
        } else {
            v
        };
        T::try_from(v).map_err(|_| {
            (
                span,
                format!("`{}`: {s} does not fit in {what}", self.mnemonic),
            )
        })
    }

    fn float_bits(&mut self, what: &str) -> Result<(f64, Option<u64>, Span, String), RErr> {
        let (s, span) = self.word(what)?;
        if s == "nan" || s == "NaN" {
            if self.toks.get(self.pos).is_some_and(|t| t.tok == Tok::Colon) {
                self.pos += 1;
                let (p, pspan) = self.word("a NaN bit pattern")?;
                let bits = p
                    .strip_prefix("0x")
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .ok_or((
                        pspan,
                        format!("expected a hex bit pattern like 0x7fc00001, found `{p}`"),
                    ))?;
                return Ok((f64::NAN, Some(bits), span, s));
            }
            return Ok((f64::NAN, None, span, s));
        }
        let v: f64 = s.parse().map_err(|_| {
            (
                span,
                format!("`{}` needs {what}, found `{s}`", self.mnemonic),
            )
        })?;
        Ok((v, None, span, s))
    }
}

impl OperandReader for Reader<'_> {
    type Error = RErr;

    fn read_i32(&mut self) -> Result<i32, RErr> {
        self.int("an i32", 32)
    }

    fn read_i64(&mut self) -> Result<i64, RErr> {
        self.int("an i64", 64)
    }

    fn read_f32(&mut self) -> Result<F32, RErr> {
        let (v, bits, span, s) = self.float_bits("an f32")?;
        match bits {
            Some(b) => u32::try_from(b)
                .ok()
                .filter(|&b| f32::from_bits(b).is_nan())
                .map(F32)
                .ok_or((span, format!("0x{b:x} is not an f32 NaN bit pattern"))),
            None if v.is_nan() => Ok(F32::new(f32::NAN)),
            // Parse again as f32 so the value is rounded once, correctly.
            None => s
                .parse::<f32>()
                .map(F32::new)
                .map_err(|_| (span, format!("bad f32 `{s}`"))),
        }
    }

    fn read_f64(&mut self) -> Result<F64, RErr> {
        let (v, bits, span, _) = self.float_bits("an f64")?;
        match bits {
            Some(b) if f64::from_bits(b).is_nan() => Ok(F64(b)),
            Some(b) => Err((span, format!("0x{b:x} is not an f64 NaN bit pattern"))),
            None => Ok(F64::new(v)),
        }
    }

    fn read_local(&mut self) -> Result<LocalId, RErr> {
        let (name, span) = self.word("a local name")?;
        self.locals.get(name.as_str()).copied().ok_or_else(|| {
            (
                span,
                format!(
                    "unknown local `{name}` in `{}`{}",
                    self.func.name,
                    crate::diag::did_you_mean(&name, self.locals.keys().copied())
                ),
            )
        })
    }

    fn read_label(&mut self) -> Result<Label, RErr> {
        let (name, span) = self.word("a label")?;
        self.labels
            .get(name.as_str())
            .map(|&b| Label(b))
            .ok_or_else(|| {
                (
                    span,
                    format!(
                        "unknown label `{name}` in `{}`{}",
                        self.func.name,
                        crate::diag::did_you_mean(&name, self.labels.keys().copied())
                    ),
                )
            })
    }

    fn read_type(&mut self) -> Result<Type, RErr> {
        let (base, span) = self.word("a type")?;
        let mut ty = match base.as_str() {
            "i32" => Type::I32,
            "i64" => Type::I64,
            "f32" => Type::F32,
            "f64" => Type::F64,
            "ref" => Type::Ref,
            name => Type::Class(*self.classes.get(name).ok_or_else(|| {
                (
                    span,
                    format!(
                        "unknown type `{name}`{}",
                        crate::diag::did_you_mean(
                            name,
                            self.classes
                                .keys()
                                .map(String::as_str)
                                .chain(["i32", "i64", "f32", "f64", "ref"])
                        )
                    ),
                )
            })?),
        };
        while self
            .toks
            .get(self.pos)
            .is_some_and(|t| t.tok == Tok::LBracket)
        {
            self.pos += 1;
            match self.toks.get(self.pos) {
                Some(t) if t.tok == Tok::RBracket => self.pos += 1,
                _ => return Err((span, "expected `]` to close the array type".into())),
            }
            ty = ty
                .array_of()
                .ok_or_else(|| (span, format!("arrays nest at most {MAX_ARRAY_DIMS} deep")))?;
        }
        Ok(ty)
    }

    fn read_class(&mut self) -> Result<ClassId, RErr> {
        let (name, span) = self.word("a class name")?;
        self.classes.get(&name).copied().ok_or_else(|| {
            (
                span,
                format!(
                    "unknown class `{name}`{}",
                    crate::diag::did_you_mean(&name, self.classes.keys().map(String::as_str))
                ),
            )
        })
    }

    fn read_field(&mut self) -> Result<FieldId, RErr> {
        let (name, span) = self.word("a field `Class.field`")?;
        let Some((class, field)) = name.rsplit_once('.') else {
            return Err((
                span,
                format!("expected a field written `Class.field`, found `{name}`"),
            ));
        };
        let c = *self
            .classes
            .get(class)
            .ok_or_else(|| (span, format!("unknown class `{class}`")))?;
        self.module
            .lookup_field(c, field)
            .ok_or_else(|| (span, format!("class `{class}` has no field `{field}`")))
    }

    fn read_func(&mut self) -> Result<FuncId, RErr> {
        let (name, span) = self.word("a function name")?;
        if let Some(&f) = self.funcs.get(&name) {
            return Ok(f);
        }
        if let Some((class, meth)) = name.rsplit_once('.')
            && let Some(&c) = self.classes.get(class)
        {
            return self
                .module
                .lookup_method(c, meth)
                .ok_or_else(|| (span, format!("class `{class}` has no method `{meth}`")));
        }
        Err((
            span,
            format!(
                "unknown function `{name}`{}",
                crate::diag::did_you_mean(&name, self.funcs.keys().map(String::as_str))
            ),
        ))
    }

    fn read_exception(&mut self) -> Result<ExceptionKind, RErr> {
        let (name, span) = self.word("an exception kind")?;
        ExceptionKind::from_name(&name).ok_or_else(|| {
            let all: Vec<_> = ExceptionKind::ALL.iter().map(|k| k.name()).collect();
            (
                span,
                format!("unknown exception `{name}` (one of {})", all.join(", ")),
            )
        })
    }
}

/// Parse a type written in the text form (`f32[]`, `Point`), resolving class
/// names against `module`.
pub fn parse_type(module: &Module, text: &str) -> Option<Type> {
    let text = text.trim();
    let base = text.trim_end_matches("[]");
    let dims = (text.len() - base.len()) / 2;
    let mut ty = match base {
        "i32" => Type::I32,
        "i64" => Type::I64,
        "f32" => Type::F32,
        "f64" => Type::F64,
        "ref" => Type::Ref,
        name => Type::Class(module.class_named(name)?),
    };
    for _ in 0..dims {
        ty = ty.array_of()?;
    }
    Some(ty)
}
