//! Decoding one PTX statement (an opcode with its dotted qualifiers and its
//! operands) into an [`Op`]. Each opcode accepts exactly the qualifiers the
//! simulator models; any other is an error naming the line, so a backend
//! change that emits something new fails loudly instead of being skipped.

use crate::Error;
use crate::inst::{
    Addr, AtomOp, Base, BinOp, BoolOp, Cmp, Op, Opnd, Rnd, Scope as MemScope, Sem, Space, Sreg, Ty,
    TyKind, UnOp,
};
use crate::lex::{float_literal, int_literal};
use crate::parse::Scope;

mod warp;

/// An operand as parsed, before it is resolved against the function.
#[derive(Clone, Debug)]
pub(crate) enum Raw {
    /// A name: register, special register, label, function or variable.
    Name(String),
    /// A number, and whether a `-` preceded it.
    Num(String, bool),
    /// `!x`.
    Not(Box<Raw>),
    /// `p|q`.
    Pair(String, String),
    /// `[base+off]` (no base: an absolute address).
    Addr(Option<String>, i64),
    /// `{a, b, …}`.
    Vec(Vec<Raw>),
    /// `(a, b, …)`.
    List(Vec<Raw>),
}

/// The bits of the literal `n` (negated when `neg`) as type `ty`.
pub(crate) fn immediate(n: &str, neg: bool, ty: Ty) -> Option<u64> {
    if let Some(f) = float_literal(n) {
        let bits = match ty.kind {
            TyKind::F => f.bits_for(ty.bits),
            // Bit patterns of the literal's own width.
            _ => match f {
                crate::lex::FloatLit::F32Bits(b) => u64::from(b),
                crate::lex::FloatLit::F64Bits(b) => b,
                crate::lex::FloatLit::Decimal(_) => return None,
            },
        };
        let sign = if ty.is_float() {
            1u64 << (ty.bits - 1)
        } else {
            0
        };
        return Some(if neg { bits ^ sign } else { bits });
    }
    let v = int_literal(n)?;
    if ty.is_float() {
        let x = if neg { -(v as f64) } else { v as f64 };
        return Some(if ty.bits == 32 {
            u64::from((x as f32).to_bits())
        } else {
            x.to_bits()
        });
    }
    Some(ty.trunc(if neg { v.wrapping_neg() } else { v }))
}

fn sreg(name: &str) -> Option<Sreg> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, d)) = name.split_once('.') {
        let d = dim(d)?;
        return match base {
            "%tid" => Some(Sreg::Tid(d)),
            "%ntid" => Some(Sreg::Ntid(d)),
            "%ctaid" => Some(Sreg::Ctaid(d)),
            "%nctaid" => Some(Sreg::Nctaid(d)),
            _ => None,
        };
    }
    match name {
        "%laneid" => Some(Sreg::Laneid),
        "%warpid" => Some(Sreg::Warpid),
        "%nwarpid" => Some(Sreg::Nwarpid),
        "%smid" => Some(Sreg::Smid),
        "%nsmid" => Some(Sreg::Nsmid),
        "%clock" => Some(Sreg::Clock),
        "%clock64" => Some(Sreg::Clock64),
        "%globaltimer" => Some(Sreg::Globaltimer),
        _ => None,
    }
}

struct Cx<'a, 'b> {
    s: &'a Scope<'b>,
    line: u32,
    op: &'a str,
}

impl Cx<'_, '_> {
    fn err(&self, msg: impl std::fmt::Display) -> Error {
        Error::parse(self.line, format!("`{}`: {msg}", self.op))
    }

    fn reg(&self, r: &Raw) -> Result<u32, Error> {
        match r {
            Raw::Name(n) => self
                .s
                .reg_names
                .get(n)
                .copied()
                .ok_or_else(|| self.err(format!("unknown register `{n}`"))),
            other => Err(self.err(format!("expected a register, found {}", show(other)))),
        }
    }

    fn pred(&self, r: &Raw) -> Result<u32, Error> {
        let i = self.reg(r)?;
        if self.s.regs[i as usize].ty.kind != TyKind::Pred {
            return Err(self.err(format!(
                "`{}` is not a predicate",
                self.s.regs[i as usize].name
            )));
        }
        Ok(i)
    }

    /// A source operand read as `ty`.
    fn src(&self, r: &Raw, ty: Ty) -> Result<Opnd, Error> {
        match r {
            Raw::Num(n, neg) => immediate(n, *neg, ty)
                .map(Opnd::Imm)
                .ok_or_else(|| self.err(format!("bad constant `{n}` for {ty}"))),
            Raw::Name(n) => {
                if let Some(&i) = self.s.reg_names.get(n) {
                    return Ok(Opnd::Reg(i));
                }
                if let Some(s) = sreg(n) {
                    return Ok(Opnd::Sreg(s));
                }
                if let Some(&(space, off)) = self.s.syms.get(n) {
                    return Ok(Opnd::Sym(space, off));
                }
                Err(self.err(format!("unknown operand `{n}`")))
            }
            other => Err(self.err(format!(
                "expected a register or constant, found {}",
                show(other)
            ))),
        }
    }

    fn addr(&self, r: &Raw) -> Result<Addr, Error> {
        match r {
            Raw::Addr(None, off) => Ok(Addr {
                base: Base::Abs(*off as u64),
                off: 0,
            }),
            Raw::Addr(Some(b), off) => {
                if let Some(&i) = self.s.reg_names.get(b) {
                    let ty = self.s.regs[i as usize].ty;
                    if ty.bits != 64 && ty.bits != 32 || ty.kind == TyKind::Pred {
                        return Err(self.err(format!("`{b}` ({ty}) cannot hold an address")));
                    }
                    return Ok(Addr {
                        base: Base::Reg(i),
                        off: *off,
                    });
                }
                if let Some(&(space, o)) = self.s.syms.get(b) {
                    return Ok(Addr {
                        base: Base::Var(space, o),
                        off: *off,
                    });
                }
                Err(self.err(format!("unknown address base `{b}`")))
            }
            other => Err(self.err(format!("expected an address `[…]`, found {}", show(other)))),
        }
    }

    fn count(&self, ops: &[Raw], n: usize) -> Result<(), Error> {
        if ops.len() == n {
            Ok(())
        } else {
            Err(self.err(format!("takes {n} operands, given {}", ops.len())))
        }
    }
}

/// The qualifiers of one opcode, consumed as the decoder recognizes them;
/// what is left at the end is an error.
struct Quals<'a> {
    q: Vec<&'a str>,
}

impl<'a> Quals<'a> {
    fn take(&mut self, names: &[&str]) -> Option<&'a str> {
        let i = self.q.iter().position(|q| names.contains(q))?;
        Some(self.q.remove(i))
    }

    fn has(&mut self, name: &str) -> bool {
        self.take(&[name]).is_some()
    }

    fn types(&mut self) -> Vec<Ty> {
        let mut out = Vec::new();
        self.q.retain(|q| match Ty::parse(q) {
            Some(t) => {
                out.push(t);
                false
            }
            None => true,
        });
        out
    }

    fn space(&mut self) -> Space {
        match self.take(&["global", "shared", "local", "param", "const"]) {
            Some("global") => Space::Global,
            Some("shared") => Space::Shared,
            Some("local") => Space::Local,
            Some("param") => Space::Param,
            Some("const") => Space::Const,
            _ => Space::Generic,
        }
    }

    fn sem(&mut self) -> Sem {
        match self.take(&["relaxed", "acquire", "release", "acq_rel", "volatile"]) {
            Some("relaxed") => Sem::Relaxed,
            Some("acquire") => Sem::Acquire,
            Some("release") => Sem::Release,
            Some("acq_rel") => Sem::AcqRel,
            Some("volatile") => Sem::Volatile,
            _ => Sem::Weak,
        }
    }

    fn scope(&mut self) -> Option<MemScope> {
        match self.take(&["cta", "gpu", "sys"]) {
            Some("cta") => Some(MemScope::Cta),
            Some("gpu") => Some(MemScope::Gpu),
            Some("sys") => Some(MemScope::Sys),
            _ => None,
        }
    }

    fn rnd(&mut self, int: bool) -> Option<Rnd> {
        let names: [&str; 4] = if int {
            ["rni", "rzi", "rmi", "rpi"]
        } else {
            ["rn", "rz", "rm", "rp"]
        };
        let q = self.take(&names)?;
        Some(match &q[..2] {
            "rn" => Rnd::Near,
            "rz" => Rnd::Zero,
            "rm" => Rnd::Down,
            _ => Rnd::Up,
        })
    }
}

/// One type, exactly.
fn one_type(cx: &Cx, q: &mut Quals) -> Result<Ty, Error> {
    let t = q.types();
    match t.as_slice() {
        [t] => Ok(*t),
        [] => Err(cx.err("needs a type")),
        _ => Err(cx.err("takes one type")),
    }
}

fn cmp_of(s: &str) -> Option<Cmp> {
    Some(match s {
        "eq" => Cmp::Eq,
        "ne" => Cmp::Ne,
        "lt" => Cmp::Lt,
        "le" => Cmp::Le,
        "gt" => Cmp::Gt,
        "ge" => Cmp::Ge,
        "lo" => Cmp::Lo,
        "ls" => Cmp::Ls,
        "hi" => Cmp::Hi,
        "hs" => Cmp::Hs,
        "equ" => Cmp::Equ,
        "neu" => Cmp::Neu,
        "ltu" => Cmp::Ltu,
        "leu" => Cmp::Leu,
        "gtu" => Cmp::Gtu,
        "geu" => Cmp::Geu,
        "num" => Cmp::Num,
        "nan" => Cmp::Nan,
        _ => return None,
    })
}

fn bool_of(s: &str) -> Option<BoolOp> {
    Some(match s {
        "and" => BoolOp::And,
        "or" => BoolOp::Or,
        "xor" => BoolOp::Xor,
        _ => return None,
    })
}

fn atom_of(s: &str) -> Option<AtomOp> {
    Some(match s {
        "add" => AtomOp::Add,
        "min" => AtomOp::Min,
        "max" => AtomOp::Max,
        "inc" => AtomOp::Inc,
        "dec" => AtomOp::Dec,
        "and" => AtomOp::And,
        "or" => AtomOp::Or,
        "xor" => AtomOp::Xor,
        "exch" => AtomOp::Exch,
        "cas" => AtomOp::Cas,
        _ => return None,
    })
}

/// Decodes one statement. Returns the op and, for a call, the callee's
/// name (resolved by the parser once every function is known).
pub(crate) fn decode(
    opcode: &str,
    ops: Vec<Raw>,
    scope: &Scope,
    line: u32,
) -> Result<(Op, Option<String>), Error> {
    let mut parts = opcode.split('.');
    let base = parts.next().unwrap_or("");
    let mut q = Quals { q: parts.collect() };
    let cx = Cx {
        s: scope,
        line,
        op: opcode,
    };
    let mut callee = None;
    let op = match base {
        "mov" => {
            let ty = one_type(&cx, &mut q)?;
            cx.count(&ops, 2)?;
            match (&ops[0], &ops[1]) {
                (d, Raw::Vec(parts)) => {
                    let n = parts.len() as u32;
                    if n < 2 || ty.bits % n != 0 {
                        return Err(cx.err("bad vector of parts"));
                    }
                    let part = Ty {
                        kind: TyKind::B,
                        bits: ty.bits / n,
                    };
                    Op::Pack {
                        d: cx.reg(d)?,
                        parts: parts
                            .iter()
                            .map(|p| cx.src(p, part))
                            .collect::<Result<_, _>>()?,
                        part_bits: ty.bits / n,
                    }
                }
                (Raw::Vec(parts), a) => {
                    let n = parts.len() as u32;
                    if n < 2 || ty.bits % n != 0 {
                        return Err(cx.err("bad vector of parts"));
                    }
                    Op::Unpack {
                        parts: parts.iter().map(|p| cx.reg(p)).collect::<Result<_, _>>()?,
                        a: cx.src(a, ty)?,
                        part_bits: ty.bits / n,
                    }
                }
                (d, a) => Op::Mov {
                    ty,
                    d: cx.reg(d)?,
                    a: cx.src(a, ty)?,
                },
            }
        }
        "add" | "sub" | "mul" | "div" | "rem" | "and" | "or" | "xor" | "shl" | "shr" | "min"
        | "max" | "copysign" => {
            let mode = q.take(&["lo", "hi", "wide"]);
            let rnd = q.rnd(false);
            let ty = one_type(&cx, &mut q)?;
            if ty.is_float() {
                if matches!(rnd, Some(r) if r != Rnd::Near) {
                    return Err(cx.err("directed float rounding is not modelled (only `.rn`)"));
                }
                if !matches!(
                    base,
                    "add" | "sub" | "mul" | "div" | "min" | "max" | "copysign"
                ) {
                    return Err(cx.err("not defined on float types"));
                }
                if base == "div" && rnd.is_none() {
                    return Err(
                        cx.err("`div` on floats needs `.rn` (`.approx`/`.full` are not modelled)")
                    );
                }
                if mode.is_some() {
                    return Err(cx.err("`.lo`/`.hi`/`.wide` apply to integers"));
                }
            } else if rnd.is_some() {
                return Err(cx.err("rounding applies to float types"));
            }
            if ty.kind == TyKind::Pred {
                if !matches!(base, "and" | "or" | "xor") {
                    return Err(cx.err("not defined on predicates"));
                }
                cx.count(&ops, 3)?;
                let op = bool_of(base).expect("and/or/xor");
                let d = cx.pred(&ops[0])?;
                let a = Opnd::Reg(cx.pred(&ops[1])?);
                let b = Opnd::Reg(cx.pred(&ops[2])?);
                no_more(&cx, &q)?;
                return Ok((Op::PredLogic { op, d, a, b }, None));
            }
            let op = match (base, mode) {
                ("add", None) => BinOp::Add,
                ("sub", None) => BinOp::Sub,
                ("mul", Some("lo")) => BinOp::MulLo,
                ("mul", None) if ty.is_float() => BinOp::MulLo,
                ("mul", Some("hi")) => BinOp::MulHi,
                ("mul", Some("wide")) => BinOp::MulWide,
                ("div", None) => BinOp::Div,
                ("rem", None) => BinOp::Rem,
                ("and", None) => BinOp::And,
                ("or", None) => BinOp::Or,
                ("xor", None) => BinOp::Xor,
                ("shl", None) => BinOp::Shl,
                ("shr", None) => BinOp::Shr,
                ("min", None) => BinOp::Min,
                ("max", None) => BinOp::Max,
                ("copysign", None) if ty.is_float() => BinOp::Copysign,
                _ => return Err(cx.err("bad combination of qualifiers")),
            };
            if op == BinOp::MulWide && (ty.bits == 64 || ty.kind == TyKind::B) {
                return Err(cx.err("`mul.wide` takes a 16- or 32-bit signed or unsigned type"));
            }
            if matches!(op, BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl)
                && ty.kind != TyKind::B
            {
                return Err(cx.err("takes a `.b` type"));
            }
            cx.count(&ops, 3)?;
            // Shift amounts are always `.u32`.
            let bty = if matches!(op, BinOp::Shl | BinOp::Shr) {
                Ty {
                    kind: TyKind::U,
                    bits: 32,
                }
            } else {
                ty
            };
            Op::Bin {
                op,
                ty,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], bty)?,
            }
        }
        "mad" | "fma" => {
            let mode = q.take(&["lo", "hi", "wide"]);
            let rnd = q.rnd(false);
            let ty = one_type(&cx, &mut q)?;
            cx.count(&ops, 4)?;
            let (d, a, b) = (cx.reg(&ops[0])?, cx.src(&ops[1], ty)?, cx.src(&ops[2], ty)?);
            if ty.is_float() {
                let Some(rnd) = rnd.filter(|_| mode.is_none()) else {
                    return Err(
                        cx.err("float `fma`/`mad` needs a rounding (`.rn`, `.rz`, `.rm`, `.rp`)")
                    );
                };
                if rnd != Rnd::Near && ty.bits != 32 {
                    return Err(cx.err("directed rounding of `fma` is modelled on `.f32` only"));
                }
                Op::Fma {
                    rnd,
                    ty,
                    d,
                    a,
                    b,
                    c: cx.src(&ops[3], ty)?,
                }
            } else {
                if base == "fma" || rnd.is_some() {
                    return Err(cx.err("integer `mad` takes `.lo`, `.hi` or `.wide`"));
                }
                let (mode, cty) = match mode {
                    Some("lo") => (BinOp::MulLo, ty),
                    Some("hi") => (BinOp::MulHi, ty),
                    Some("wide") if ty.bits < 64 => (
                        BinOp::MulWide,
                        Ty {
                            kind: ty.kind,
                            bits: ty.bits * 2,
                        },
                    ),
                    _ => return Err(cx.err("integer `mad` takes `.lo`, `.hi` or `.wide`")),
                };
                Op::Mad {
                    mode,
                    ty,
                    d,
                    a,
                    b,
                    c: cx.src(&ops[3], cty)?,
                }
            }
        }
        "rcp" => {
            if q.rnd(false) != Some(Rnd::Near) {
                return Err(cx.err("`rcp` needs `.rn` (`.approx` is not modelled)"));
            }
            let ty = one_type(&cx, &mut q)?;
            if !ty.is_float() {
                return Err(cx.err("`rcp` takes `.f32` or `.f64`"));
            }
            cx.count(&ops, 2)?;
            Op::Un {
                op: UnOp::Rcp,
                ty,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "ex2" => {
            if !q.has("approx") {
                return Err(cx.err("`ex2` needs `.approx`"));
            }
            let ftz = q.has("ftz");
            let ty = one_type(&cx, &mut q)?;
            if ty
                != (Ty {
                    kind: TyKind::F,
                    bits: 32,
                })
            {
                return Err(cx.err("`ex2` takes `.f32`"));
            }
            cx.count(&ops, 2)?;
            Op::Un {
                op: if ftz { UnOp::Ex2Ftz } else { UnOp::Ex2 },
                ty,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "neg" | "not" | "cnot" | "abs" | "sqrt" | "clz" | "popc" | "brev" => {
            let rnd = q.rnd(false);
            let ty = one_type(&cx, &mut q)?;
            cx.count(&ops, 2)?;
            let op = match base {
                "neg" => UnOp::Neg,
                "not" => UnOp::Not,
                "cnot" => UnOp::Cnot,
                "abs" => UnOp::Abs,
                "sqrt" => UnOp::Sqrt,
                "clz" => UnOp::Clz,
                "popc" => UnOp::Popc,
                _ => UnOp::Brev,
            };
            let float_ok = matches!(op, UnOp::Neg | UnOp::Abs | UnOp::Sqrt);
            let int_ok = !matches!(op, UnOp::Sqrt);
            if (ty.is_float() && !float_ok) || (!ty.is_float() && !int_ok) {
                return Err(cx.err(format!("not defined on {ty}")));
            }
            if op == UnOp::Sqrt && rnd != Some(Rnd::Near) {
                return Err(cx.err("`sqrt` needs `.rn` (`.approx` is not modelled)"));
            }
            if op != UnOp::Sqrt && rnd.is_some() {
                return Err(cx.err("takes no rounding"));
            }
            if ty.kind == TyKind::Pred {
                if op != UnOp::Not {
                    return Err(cx.err("not defined on predicates"));
                }
                return finish(
                    &cx,
                    &q,
                    Op::PredLogic {
                        op: BoolOp::Xor,
                        d: cx.pred(&ops[0])?,
                        a: Opnd::Reg(cx.pred(&ops[1])?),
                        b: Opnd::Imm(1),
                    },
                );
            }
            Op::Un {
                op,
                ty,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "setp" => {
            let cmp =
                q.q.first()
                    .and_then(|c| cmp_of(c))
                    .ok_or_else(|| cx.err("needs a comparison"))?;
            q.q.remove(0);
            let comb = q.take(&["and", "or", "xor"]).and_then(bool_of);
            let ty = one_type(&cx, &mut q)?;
            let unsigned_only = matches!(cmp, Cmp::Lo | Cmp::Ls | Cmp::Hi | Cmp::Hs);
            let float_only = matches!(
                cmp,
                Cmp::Equ
                    | Cmp::Neu
                    | Cmp::Ltu
                    | Cmp::Leu
                    | Cmp::Gtu
                    | Cmp::Geu
                    | Cmp::Num
                    | Cmp::Nan
            );
            if (unsigned_only && ty.is_float()) || (float_only && !ty.is_float()) {
                return Err(cx.err(format!("this comparison is not defined on {ty}")));
            }
            if ty.kind == TyKind::B && !matches!(cmp, Cmp::Eq | Cmp::Ne) {
                return Err(cx.err("`.b` types compare only with `eq`/`ne`"));
            }
            cx.count(&ops, if comb.is_some() { 4 } else { 3 })?;
            let (p, qreg) = match &ops[0] {
                Raw::Pair(p, qq) => (
                    cx.pred(&Raw::Name(p.clone()))?,
                    Some(cx.pred(&Raw::Name(qq.clone()))?),
                ),
                other => (cx.pred(other)?, None),
            };
            let comb = match comb {
                None => None,
                Some(b) => Some(match &ops[3] {
                    Raw::Not(inner) => (b, cx.pred(inner)?, true),
                    other => (b, cx.pred(other)?, false),
                }),
            };
            Op::Setp {
                cmp,
                ty,
                p,
                q: qreg,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], ty)?,
                comb,
            }
        }
        "selp" => {
            let ty = one_type(&cx, &mut q)?;
            cx.count(&ops, 4)?;
            Op::Selp {
                ty,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
                b: cx.src(&ops[2], ty)?,
                p: cx.pred(&ops[3])?,
            }
        }
        "cvt" => {
            let irnd = q.rnd(true);
            let frnd = q.rnd(false);
            let sat = q.has("sat");
            let t = q.types();
            let [dty, sty] = t[..] else {
                return Err(cx.err("takes a destination and a source type"));
            };
            if dty.kind == TyKind::Pred || sty.kind == TyKind::Pred {
                return Err(cx.err("cannot convert predicates"));
            }
            let rnd = match (irnd, frnd) {
                (Some(_), Some(_)) => return Err(cx.err("two roundings")),
                (Some(r), None) => {
                    if !dty.is_float() && sty.is_float()
                        || dty.is_float() && sty.is_float() && dty == sty
                    {
                        Some(r)
                    } else {
                        return Err(cx.err("integer rounding (`.rni` …) applies to float → integer or float → same float"));
                    }
                }
                (None, Some(r)) => {
                    if dty.is_float() && (!sty.is_float() || dty.bits < sty.bits) {
                        Some(r)
                    } else {
                        return Err(cx.err("float rounding (`.rn` …) applies to integer → float or a narrowing float conversion"));
                    }
                }
                (None, None) => {
                    let needs = (dty.is_float() && (!sty.is_float() || dty.bits < sty.bits))
                        || (!dty.is_float() && sty.is_float());
                    if needs {
                        return Err(cx.err("this conversion needs a rounding modifier"));
                    }
                    None
                }
            };
            cx.count(&ops, 2)?;
            Op::Cvt {
                dty,
                sty,
                rnd,
                sat,
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], sty)?,
            }
        }
        "cvta" => {
            q.has("to");
            let sp = q.space();
            if sp == Space::Generic || sp == Space::Param {
                return Err(cx.err("needs `.global`, `.shared`, `.local` or `.const`"));
            }
            let ty = one_type(&cx, &mut q)?;
            if ty.bits != 64 {
                return Err(cx.err("takes `.u64`"));
            }
            cx.count(&ops, 2)?;
            Op::Cvta {
                d: cx.reg(&ops[0])?,
                a: cx.src(&ops[1], ty)?,
            }
        }
        "ld" | "st" => {
            let sem = q.sem();
            let sc = q.scope();
            let space = q.space();
            let ty = one_type(&cx, &mut q)?;
            check_sem(&cx, sem, sc, base == "ld")?;
            if ty.kind == TyKind::Pred {
                return Err(cx.err("cannot load or store predicates"));
            }
            cx.count(&ops, 2)?;
            if base == "ld" {
                Op::Ld {
                    space,
                    sem,
                    scope: sc,
                    ty,
                    d: cx.reg(&ops[0])?,
                    addr: cx.addr(&ops[1])?,
                }
            } else {
                if space == Space::Const {
                    return Err(cx.err("the constant space is read-only"));
                }
                Op::St {
                    space,
                    sem,
                    scope: sc,
                    ty,
                    addr: cx.addr(&ops[0])?,
                    a: cx.src(&ops[1], ty)?,
                }
            }
        }
        "atom" | "red" => {
            let sem = q.sem();
            // The scope is legal on any atomic and orders nothing more here
            // (every access is sequentially consistent).
            q.scope();
            let space = q.space();
            if matches!(space, Space::Param | Space::Const | Space::Local) {
                return Err(cx.err("atomics apply to global, shared or generic addresses"));
            }
            if matches!(sem, Sem::Volatile) {
                return Err(cx.err("`.volatile` does not apply to atomics"));
            }
            let aop = q
                .take(&[
                    "add", "min", "max", "inc", "dec", "and", "or", "xor", "exch", "cas",
                ])
                .and_then(atom_of)
                .ok_or_else(|| cx.err("needs an operation"))?;
            let ty = one_type(&cx, &mut q)?;
            let ok = match aop {
                AtomOp::And | AtomOp::Or | AtomOp::Xor => ty.kind == TyKind::B && ty.bits >= 32,
                AtomOp::Exch | AtomOp::Cas => {
                    ty.kind != TyKind::F && ty.bits >= 32 || ty.kind == TyKind::B
                }
                AtomOp::Inc | AtomOp::Dec => {
                    ty == Ty {
                        kind: TyKind::U,
                        bits: 32,
                    }
                }
                AtomOp::Add => {
                    matches!(ty.kind, TyKind::U | TyKind::S | TyKind::F) && ty.bits >= 32
                }
                AtomOp::Min | AtomOp::Max => {
                    matches!(ty.kind, TyKind::U | TyKind::S) && ty.bits >= 32
                }
            };
            if !ok {
                return Err(cx.err(format!("this operation is not defined on {ty}")));
            }
            let red = base == "red";
            if red && matches!(aop, AtomOp::Cas | AtomOp::Exch) {
                return Err(cx.err("`red` has no `cas`/`exch`"));
            }
            let n = usize::from(!red) + 2 + usize::from(aop == AtomOp::Cas);
            cx.count(&ops, n)?;
            let o = usize::from(!red);
            Op::Atom {
                space,
                op: aop,
                ty,
                d: if red { None } else { Some(cx.reg(&ops[0])?) },
                addr: cx.addr(&ops[o])?,
                b: cx.src(&ops[o + 1], ty)?,
                c: if aop == AtomOp::Cas {
                    Some(cx.src(&ops[o + 2], ty)?)
                } else {
                    None
                },
            }
        }
        "fence" => {
            let Some(order) = q.take(&["acq_rel", "sc"]) else {
                return Err(cx.err("needs `.acq_rel` or `.sc`"));
            };
            let Some(scope) = q.scope() else {
                return Err(cx.err("needs a scope"));
            };
            cx.count(&ops, 0)?;
            Op::Fence {
                sc: order == "sc",
                scope,
            }
        }
        "membar" => {
            let scope = match q.take(&["cta", "gl", "sys"]) {
                Some("cta") => MemScope::Cta,
                Some("gl") => MemScope::Gpu,
                Some(_) => MemScope::Sys,
                None => return Err(cx.err("needs `.cta`, `.gl` or `.sys`")),
            };
            cx.count(&ops, 0)?;
            Op::Fence { sc: true, scope }
        }
        "nanosleep" => {
            let ty = one_type(&cx, &mut q)?;
            if ty
                != (Ty {
                    kind: TyKind::U,
                    bits: 32,
                })
            {
                return Err(cx.err("takes `.u32`"));
            }
            cx.count(&ops, 1)?;
            Op::Nanosleep(cx.src(&ops[0], ty)?)
        }
        "shfl" => warp::shfl(&cx, &mut q, &ops)?,
        "vote" => warp::vote(&cx, &mut q, &ops)?,
        "activemask" => warp::activemask(&cx, &mut q, &ops)?,
        "bar" | "barrier" => {
            if !q.has("sync") {
                return Err(cx.err("only `bar.sync` is modelled"));
            }
            q.has("aligned");
            if ops.len() != 1 {
                return Err(cx.err("takes one barrier number (a thread count is not modelled)"));
            }
            Op::Bar(cx.src(
                &ops[0],
                Ty {
                    kind: TyKind::U,
                    bits: 32,
                },
            )?)
        }
        "bra" => {
            q.has("uni");
            cx.count(&ops, 1)?;
            let Raw::Name(l) = &ops[0] else {
                return Err(cx.err("needs a label"));
            };
            Op::Bra(
                *scope
                    .labels
                    .get(l)
                    .ok_or_else(|| cx.err(format!("unknown label `{l}`")))?,
            )
        }
        "call" => {
            q.has("uni");
            let mut it = ops.iter().peekable();
            let rets = match it.peek() {
                Some(Raw::List(r)) => {
                    it.next();
                    r.iter().map(|x| cx.reg(x)).collect::<Result<Vec<_>, _>>()?
                }
                _ => Vec::new(),
            };
            let Some(Raw::Name(name)) = it.next() else {
                return Err(cx.err("needs a function name"));
            };
            let args = match it.next() {
                Some(Raw::List(a)) => a
                    .iter()
                    .map(|x| {
                        cx.src(
                            x,
                            Ty {
                                kind: TyKind::B,
                                bits: 64,
                            },
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                None => Vec::new(),
                Some(other) => return Err(cx.err(format!("bad arguments {}", show(other)))),
            };
            if it.next().is_some() {
                return Err(cx.err("indirect calls are not modelled"));
            }
            callee = Some(name.clone());
            Op::Call {
                func: u32::MAX,
                rets,
                args,
            }
        }
        "ret" | "exit" | "trap" => {
            q.has("uni");
            cx.count(&ops, 0)?;
            match base {
                "ret" => Op::Ret,
                "exit" => Op::Exit,
                _ => Op::Trap,
            }
        }
        _ => {
            return Err(Error::parse(
                line,
                format!("unknown instruction `{opcode}`"),
            ));
        }
    };
    no_more(&cx, &q)?;
    Ok((op, callee))
}

fn finish(cx: &Cx, q: &Quals, op: Op) -> Result<(Op, Option<String>), Error> {
    no_more(cx, q)?;
    Ok((op, None))
}

fn no_more(cx: &Cx, q: &Quals) -> Result<(), Error> {
    match q.q.first() {
        None => Ok(()),
        Some(x) => Err(cx.err(format!("unknown or misplaced qualifier `.{x}`"))),
    }
}

/// `ld`/`st` semantics: `.relaxed`/`.acquire`/`.release` need a scope;
/// `.acquire` only on loads, `.release` only on stores.
fn check_sem(cx: &Cx, sem: Sem, scope: Option<MemScope>, load: bool) -> Result<(), Error> {
    match sem {
        Sem::Weak | Sem::Volatile => {
            if scope.is_some() {
                return Err(cx.err("a scope needs `.relaxed`, `.acquire` or `.release`"));
            }
        }
        Sem::Relaxed | Sem::Acquire | Sem::Release => {
            if scope.is_none() {
                return Err(cx.err("`.relaxed`/`.acquire`/`.release` need a scope"));
            }
            if sem == Sem::Acquire && !load || sem == Sem::Release && load {
                return Err(cx.err("`.acquire` applies to loads, `.release` to stores"));
            }
        }
        Sem::AcqRel => return Err(cx.err("`.acq_rel` does not apply to loads and stores")),
    }
    Ok(())
}

fn show(r: &Raw) -> String {
    match r {
        Raw::Name(n) => format!("`{n}`"),
        Raw::Num(n, neg) => format!("`{}{n}`", if *neg { "-" } else { "" }),
        Raw::Not(_) => "a negation".into(),
        Raw::Pair(..) => "a predicate pair".into(),
        Raw::Addr(..) => "an address".into(),
        Raw::Vec(_) => "a vector".into(),
        Raw::List(_) => "a list".into(),
    }
}
