//! A host interpreter for the PTX subset of offload's math library
//! (`ptx_libm.ptx`), so that the routines a GPU runs are checked bit for bit
//! against the host's `libm` on machines without a GPU.
//!
//! It executes the library's own text — the same bytes the PTX backend puts
//! into modules — with PTX's semantics where they differ from Rust's: ordered
//! float comparisons are false on NaN, shift amounts saturate at the width,
//! `cvt.rzi` truncates and saturates. Only what the library uses is accepted;
//! anything else is a parse error naming the line, so an instruction added to
//! the library without support here fails the tests instead of being skipped.

use std::collections::HashMap;

/// A parse or execution error, naming the routine and line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ptxsim: {0}")]
pub struct SimError(String);

#[derive(Copy, Clone, Debug)]
enum Src {
    R(u16),
    I(u64),
}

#[derive(Copy, Clone, Debug)]
enum FOp {
    Add,
    Sub,
    Mul,
    Div,
}

#[derive(Copy, Clone, Debug)]
enum FUn {
    Neg,
    Abs,
    Sqrt,
}

#[derive(Copy, Clone, Debug)]
enum IOp {
    Add,
    Sub,
    Mul,
    And,
    Or,
    Xor,
    Shl,
    ShrU,
    ShrS,
    Min,
    Max,
}

#[derive(Copy, Clone, Debug)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Nan,
    Num,
}

#[derive(Copy, Clone, Debug)]
enum Cvt {
    F64FromS32,
    F32FromS32,
    S32FromF64,
    S32FromF32,
    F64FromF32,
    F32FromF64,
}

#[derive(Clone, Debug)]
enum Kind {
    Mov {
        d: u16,
        a: Src,
    },
    Unpack {
        lo: u16,
        hi: u16,
        a: Src,
    },
    Pack {
        d: u16,
        lo: Src,
        hi: Src,
    },
    F {
        op: FOp,
        w64: bool,
        d: u16,
        a: Src,
        b: Src,
    },
    Fma {
        w64: bool,
        d: u16,
        a: Src,
        b: Src,
        c: Src,
    },
    FUn {
        op: FUn,
        w64: bool,
        d: u16,
        a: Src,
    },
    I {
        op: IOp,
        d: u16,
        a: Src,
        b: Src,
    },
    INeg {
        d: u16,
        a: Src,
    },
    INot {
        d: u16,
        a: Src,
    },
    SetpI {
        cmp: Cmp,
        signed: bool,
        d: u16,
        a: Src,
        b: Src,
    },
    SetpF {
        cmp: Cmp,
        w64: bool,
        d: u16,
        a: Src,
        b: Src,
    },
    Selp {
        d: u16,
        a: Src,
        b: Src,
        p: u16,
    },
    Cvt {
        kind: Cvt,
        d: u16,
        a: Src,
    },
    PAnd {
        d: u16,
        a: u16,
        b: u16,
    },
    POr {
        d: u16,
        a: u16,
        b: u16,
    },
    Bra(usize),
    Ret,
    Call {
        ret: u16,
        func: usize,
        args: Vec<Src>,
    },
}

#[derive(Clone, Debug)]
struct Op {
    guard: Option<(u16, bool)>,
    kind: Kind,
}

#[derive(Clone, Debug)]
struct Func {
    name: String,
    ret: u16,
    params: Vec<u16>,
    nregs: usize,
    code: Vec<Op>,
}

/// A parsed library.
#[derive(Clone, Debug)]
pub struct Library {
    funcs: Vec<Func>,
    by_name: HashMap<String, usize>,
}

/// Ops a function may run before the interpreter calls it a runaway loop.
const STEP_LIMIT: usize = 1 << 20;

impl Library {
    /// Parses PTX text made of `.func` definitions (comments and blank lines
    /// between them allowed).
    pub fn parse(text: &str) -> Result<Library, SimError> {
        // First pass: names, so calls can be resolved to indices.
        let mut by_name = HashMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix(".func ") {
                let name = header_name(rest)
                    .ok_or_else(|| SimError(format!("bad .func header: {line}")))?;
                let n = by_name.len();
                by_name.insert(name.to_string(), n);
            }
        }
        let mut funcs = Vec::new();
        let mut lines = text.lines().enumerate().peekable();
        while let Some((no, line)) = lines.next() {
            let line = strip_comment(line).trim();
            if line.is_empty() {
                continue;
            }
            let Some(rest) = line.strip_prefix(".func ") else {
                return Err(SimError(format!("line {}: expected .func: {line}", no + 1)));
            };
            let mut body = Vec::new();
            for (no, l) in lines.by_ref() {
                if l.starts_with('}') {
                    break;
                }
                body.push((no + 1, strip_comment(l).trim().to_string()));
            }
            funcs.push(parse_func(rest, &body, &by_name)?);
        }
        Ok(Library { funcs, by_name })
    }

    /// The routines defined, in file order.
    pub fn names(&self) -> Vec<&str> {
        self.funcs.iter().map(|f| f.name.as_str()).collect()
    }

    /// Runs `name` on raw argument bits (f32 and 32-bit integers in the low
    /// half) and returns the raw result bits.
    pub fn call(&self, name: &str, args: &[u64]) -> Result<u64, SimError> {
        let &f = self
            .by_name
            .get(name)
            .ok_or_else(|| SimError(format!("no routine `{name}`")))?;
        self.run(f, args)
    }

    /// Runs a one-argument f64 routine.
    pub fn f64_1(&self, name: &str, x: f64) -> f64 {
        f64::from_bits(self.call(name, &[x.to_bits()]).expect("routine runs"))
    }

    /// Runs a two-argument f64 routine.
    pub fn f64_2(&self, name: &str, x: f64, y: f64) -> f64 {
        f64::from_bits(
            self.call(name, &[x.to_bits(), y.to_bits()])
                .expect("routine runs"),
        )
    }

    /// Runs a one-argument f32 routine.
    pub fn f32_1(&self, name: &str, x: f32) -> f32 {
        f32::from_bits(
            self.call(name, &[u64::from(x.to_bits())])
                .expect("routine runs") as u32,
        )
    }

    /// Runs a two-argument f32 routine.
    pub fn f32_2(&self, name: &str, x: f32, y: f32) -> f32 {
        let r = self
            .call(name, &[u64::from(x.to_bits()), u64::from(y.to_bits())])
            .expect("routine runs");
        f32::from_bits(r as u32)
    }

    fn run(&self, f: usize, args: &[u64]) -> Result<u64, SimError> {
        let func = &self.funcs[f];
        if args.len() != func.params.len() {
            return Err(SimError(format!(
                "`{}` takes {} arguments, given {}",
                func.name,
                func.params.len(),
                args.len()
            )));
        }
        let mut r = vec![0u64; func.nregs];
        for (&p, &a) in func.params.iter().zip(args) {
            r[p as usize] = a;
        }
        let mut pc = 0;
        let mut steps = 0;
        loop {
            steps += 1;
            if steps > STEP_LIMIT {
                return Err(SimError(format!("`{}` ran away", func.name)));
            }
            let op = func
                .code
                .get(pc)
                .ok_or_else(|| SimError(format!("`{}` fell off its end", func.name)))?;
            pc += 1;
            if let Some((g, neg)) = op.guard
                && (r[g as usize] != 0) == neg
            {
                continue;
            }
            let v = |s: Src, r: &[u64]| match s {
                Src::R(i) => r[i as usize],
                Src::I(b) => b,
            };
            match &op.kind {
                Kind::Mov { d, a } => r[*d as usize] = v(*a, &r),
                Kind::Unpack { lo, hi, a } => {
                    let x = v(*a, &r);
                    r[*lo as usize] = x & 0xffff_ffff;
                    r[*hi as usize] = x >> 32;
                }
                Kind::Pack { d, lo, hi } => {
                    r[*d as usize] = (v(*lo, &r) & 0xffff_ffff) | (v(*hi, &r) << 32)
                }
                Kind::F { op, w64, d, a, b } => {
                    let (a, b) = (v(*a, &r), v(*b, &r));
                    r[*d as usize] = if *w64 {
                        let (a, b) = (f64::from_bits(a), f64::from_bits(b));
                        match op {
                            FOp::Add => a + b,
                            FOp::Sub => a - b,
                            FOp::Mul => a * b,
                            FOp::Div => a / b,
                        }
                        .to_bits()
                    } else {
                        let (a, b) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
                        u64::from(
                            match op {
                                FOp::Add => a + b,
                                FOp::Sub => a - b,
                                FOp::Mul => a * b,
                                FOp::Div => a / b,
                            }
                            .to_bits(),
                        )
                    }
                }
                Kind::Fma { w64, d, a, b, c } => {
                    let (a, b, c) = (v(*a, &r), v(*b, &r), v(*c, &r));
                    r[*d as usize] = if *w64 {
                        libm::fma(f64::from_bits(a), f64::from_bits(b), f64::from_bits(c)).to_bits()
                    } else {
                        u64::from(
                            libm::fmaf(
                                f32::from_bits(a as u32),
                                f32::from_bits(b as u32),
                                f32::from_bits(c as u32),
                            )
                            .to_bits(),
                        )
                    }
                }
                Kind::FUn { op, w64, d, a } => {
                    let a = v(*a, &r);
                    r[*d as usize] = if *w64 {
                        match op {
                            FUn::Neg => a ^ (1 << 63),
                            FUn::Abs => a & !(1 << 63),
                            FUn::Sqrt => f64::from_bits(a).sqrt().to_bits(),
                        }
                    } else {
                        let a = a as u32;
                        u64::from(match op {
                            FUn::Neg => a ^ (1 << 31),
                            FUn::Abs => a & !(1 << 31),
                            FUn::Sqrt => f32::from_bits(a).sqrt().to_bits(),
                        })
                    }
                }
                Kind::I { op, d, a, b } => {
                    let (a, b) = (v(*a, &r) as u32, v(*b, &r) as u32);
                    r[*d as usize] = u64::from(match op {
                        IOp::Add => a.wrapping_add(b),
                        IOp::Sub => a.wrapping_sub(b),
                        IOp::Mul => a.wrapping_mul(b),
                        IOp::And => a & b,
                        IOp::Or => a | b,
                        IOp::Xor => a ^ b,
                        // PTX clamps shift amounts to the width.
                        IOp::Shl => a.checked_shl(b).unwrap_or(0),
                        IOp::ShrU => a.checked_shr(b).unwrap_or(0),
                        IOp::ShrS => ((a as i32) >> b.min(31)) as u32,
                        IOp::Min => (a as i32).min(b as i32) as u32,
                        IOp::Max => (a as i32).max(b as i32) as u32,
                    });
                }
                Kind::INeg { d, a } => {
                    r[*d as usize] = u64::from((v(*a, &r) as u32).wrapping_neg())
                }
                Kind::INot { d, a } => r[*d as usize] = u64::from(!(v(*a, &r) as u32)),
                Kind::SetpI {
                    cmp,
                    signed,
                    d,
                    a,
                    b,
                } => {
                    let (a, b) = (v(*a, &r) as u32, v(*b, &r) as u32);
                    let o = if *signed {
                        (a as i32).cmp(&(b as i32))
                    } else {
                        a.cmp(&b)
                    };
                    r[*d as usize] = u64::from(match cmp {
                        Cmp::Eq => o.is_eq(),
                        Cmp::Ne => o.is_ne(),
                        Cmp::Lt => o.is_lt(),
                        Cmp::Le => o.is_le(),
                        Cmp::Gt => o.is_gt(),
                        Cmp::Ge => o.is_ge(),
                        Cmp::Nan | Cmp::Num => unreachable!("rejected by the parser"),
                    });
                }
                Kind::SetpF { cmp, w64, d, a, b } => {
                    let (a, b) = (v(*a, &r), v(*b, &r));
                    let (a, b) = if *w64 {
                        (f64::from_bits(a), f64::from_bits(b))
                    } else {
                        (
                            f64::from(f32::from_bits(a as u32)),
                            f64::from(f32::from_bits(b as u32)),
                        )
                    };
                    let nan = a.is_nan() || b.is_nan();
                    // Ordered comparisons are false when either side is NaN.
                    r[*d as usize] = u64::from(match cmp {
                        Cmp::Eq => !nan && a == b,
                        Cmp::Ne => !nan && a != b,
                        Cmp::Lt => !nan && a < b,
                        Cmp::Le => !nan && a <= b,
                        Cmp::Gt => !nan && a > b,
                        Cmp::Ge => !nan && a >= b,
                        Cmp::Nan => nan,
                        Cmp::Num => !nan,
                    });
                }
                Kind::Selp { d, a, b, p } => {
                    r[*d as usize] = if r[*p as usize] != 0 {
                        v(*a, &r)
                    } else {
                        v(*b, &r)
                    }
                }
                Kind::Cvt { kind, d, a } => {
                    let a = v(*a, &r);
                    r[*d as usize] = match kind {
                        Cvt::F64FromS32 => f64::from(a as u32 as i32).to_bits(),
                        Cvt::F32FromS32 => u64::from((a as u32 as i32 as f32).to_bits()),
                        Cvt::S32FromF64 => u64::from(f64::from_bits(a) as i32 as u32),
                        Cvt::S32FromF32 => u64::from(f32::from_bits(a as u32) as i32 as u32),
                        Cvt::F64FromF32 => f64::from(f32::from_bits(a as u32)).to_bits(),
                        Cvt::F32FromF64 => u64::from((f64::from_bits(a) as f32).to_bits()),
                    }
                }
                Kind::PAnd { d, a, b } => {
                    r[*d as usize] = u64::from(r[*a as usize] != 0 && r[*b as usize] != 0)
                }
                Kind::POr { d, a, b } => {
                    r[*d as usize] = u64::from(r[*a as usize] != 0 || r[*b as usize] != 0)
                }
                Kind::Bra(t) => pc = *t,
                Kind::Ret => return Ok(r[func.ret as usize]),
                Kind::Call { ret, func: g, args } => {
                    let vals: Vec<u64> = args.iter().map(|&s| v(s, &r)).collect();
                    r[*ret as usize] = self.run(*g, &vals)?;
                }
            }
        }
    }
}

fn strip_comment(line: &str) -> &str {
    line.split("//").next().unwrap_or("")
}

/// `(.reg .f64 %ret) NAME (...)` (a `.func` header after `.func `) → NAME.
pub(crate) fn header_name(rest: &str) -> Option<&str> {
    let after = &rest[rest.find(')')? + 1..];
    after
        .trim()
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
}

/// `.reg .T %a, .reg .T %b` → the register names.
fn param_names(list: &str) -> Vec<String> {
    list.split(',')
        .filter_map(|p| p.split_whitespace().nth(2).map(str::to_string))
        .collect()
}

fn parse_func(
    header: &str,
    body: &[(usize, String)],
    by_name: &HashMap<String, usize>,
) -> Result<Func, SimError> {
    let name = header_name(header)
        .ok_or_else(|| SimError(format!("bad header {header}")))?
        .to_string();
    let err = |no: usize, msg: String| SimError(format!("`{name}` line {no}: {msg}"));
    let ret_list = &header[header.find('(').unwrap() + 1..header.find(')').unwrap()];
    let rest = &header[header.find(')').unwrap() + 1..];
    let params_list = &rest[rest
        .find('(')
        .ok_or_else(|| err(0, "no parameters".into()))?
        + 1
        ..rest
            .rfind(')')
            .ok_or_else(|| err(0, "no parameters".into()))?];
    let mut regs: HashMap<String, u16> = HashMap::new();
    let declare = |n: &str, regs: &mut HashMap<String, u16>| -> u16 {
        let k = regs.len() as u16;
        *regs.entry(n.to_string()).or_insert(k)
    };
    let ret_names = param_names(ret_list);
    if ret_names.len() != 1 {
        return Err(err(0, "exactly one return register expected".into()));
    }
    let ret = declare(&ret_names[0], &mut regs);
    let params: Vec<u16> = param_names(params_list)
        .iter()
        .map(|p| declare(p, &mut regs))
        .collect();
    // Labels first (forward branches), then declarations and instructions.
    let mut labels = HashMap::new();
    let mut n = 0;
    for (_, l) in body {
        if l.is_empty() || l == "{" || l.starts_with(".reg") {
            continue;
        }
        if let Some(label) = l.strip_suffix(':') {
            labels.insert(label.to_string(), n);
        } else {
            n += 1;
        }
    }
    let mut code = Vec::new();
    for (no, l) in body {
        let no = *no;
        if l.is_empty() || l == "{" || l.ends_with(':') {
            continue;
        }
        if let Some(decl) = l.strip_prefix(".reg") {
            let decl = decl.trim().trim_end_matches(';');
            let (_ty, names) = decl
                .split_once(char::is_whitespace)
                .ok_or_else(|| err(no, format!("bad declaration {l}")))?;
            for n in names.split(',') {
                declare(n.trim(), &mut regs);
            }
            continue;
        }
        let reg = |s: &str| -> Result<u16, SimError> {
            regs.get(s.trim())
                .copied()
                .ok_or_else(|| err(no, format!("undeclared register {s}")))
        };
        let src = |s: &str| -> Result<Src, SimError> {
            let s = s.trim();
            if s.starts_with('%') {
                return reg(s).map(Src::R);
            }
            imm(s)
                .map(Src::I)
                .ok_or_else(|| err(no, format!("bad operand {s}")))
        };
        let l = l
            .strip_suffix(';')
            .ok_or_else(|| err(no, format!("missing ';': {l}")))?;
        let (guard, l) = match l.strip_prefix('@') {
            Some(g) => {
                let (p, rest) = g
                    .split_once(' ')
                    .ok_or_else(|| err(no, "bad guard".into()))?;
                let (neg, p) = match p.strip_prefix('!') {
                    Some(p) => (true, p),
                    None => (false, p),
                };
                (Some((reg(p)?, neg)), rest.trim())
            }
            None => (None, l),
        };
        let (opcode, operands) = l.split_once(char::is_whitespace).unwrap_or((l, ""));
        let ops = split_operands(operands);
        let parts: Vec<&str> = opcode.split('.').collect();
        let ty = *parts.last().unwrap();
        let w64 = ty.ends_with("64");
        let want = |k: usize| -> Result<(), SimError> {
            if ops.len() == k {
                Ok(())
            } else {
                Err(err(no, format!("`{opcode}` takes {k} operands: {l}")))
            }
        };
        let kind = match parts[0] {
            "mov" => {
                want(2)?;
                if let Some(v) = ops[0].strip_prefix('{') {
                    let (lo, hi) = vec2(v).ok_or_else(|| err(no, "bad vector".into()))?;
                    Kind::Unpack {
                        lo: reg(lo)?,
                        hi: reg(hi)?,
                        a: src(&ops[1])?,
                    }
                } else if let Some(v) = ops[1].strip_prefix('{') {
                    let (lo, hi) = vec2(v).ok_or_else(|| err(no, "bad vector".into()))?;
                    Kind::Pack {
                        d: reg(&ops[0])?,
                        lo: src(lo)?,
                        hi: src(hi)?,
                    }
                } else {
                    Kind::Mov {
                        d: reg(&ops[0])?,
                        a: src(&ops[1])?,
                    }
                }
            }
            "add" | "sub" | "mul" | "div" | "min" | "max" if ty.starts_with('f') => {
                want(3)?;
                if parts.get(1) != Some(&"rn") {
                    return Err(err(no, format!("float `{opcode}` must be .rn")));
                }
                let op = match parts[0] {
                    "add" => FOp::Add,
                    "sub" => FOp::Sub,
                    "mul" => FOp::Mul,
                    "div" => FOp::Div,
                    _ => return Err(err(no, format!("unsupported `{opcode}`"))),
                };
                Kind::F {
                    op,
                    w64,
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                    b: src(&ops[2])?,
                }
            }
            "fma" => {
                want(4)?;
                Kind::Fma {
                    w64,
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                    b: src(&ops[2])?,
                    c: src(&ops[3])?,
                }
            }
            "neg" | "abs" | "sqrt" if ty.starts_with('f') => {
                want(2)?;
                let op = match parts[0] {
                    "neg" => FUn::Neg,
                    "abs" => FUn::Abs,
                    _ if parts.get(1) == Some(&"rn") => FUn::Sqrt,
                    _ => return Err(err(no, "sqrt must be .rn".into())),
                };
                Kind::FUn {
                    op,
                    w64,
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                }
            }
            "neg" if ty == "s32" => {
                want(2)?;
                Kind::INeg {
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                }
            }
            "not" if ty == "b32" => {
                want(2)?;
                Kind::INot {
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                }
            }
            "and" | "or" if ty == "pred" => {
                want(3)?;
                let (d, a, b) = (reg(&ops[0])?, reg(&ops[1])?, reg(&ops[2])?);
                if parts[0] == "and" {
                    Kind::PAnd { d, a, b }
                } else {
                    Kind::POr { d, a, b }
                }
            }
            "add" | "sub" | "mul" | "and" | "or" | "xor" | "shl" | "shr" | "min" | "max"
                if ty.ends_with("32") =>
            {
                want(3)?;
                let op = match (parts[0], ty) {
                    ("add", _) => IOp::Add,
                    ("sub", _) => IOp::Sub,
                    ("mul", _) if parts.get(1) == Some(&"lo") => IOp::Mul,
                    ("and", _) => IOp::And,
                    ("or", _) => IOp::Or,
                    ("xor", _) => IOp::Xor,
                    ("shl", _) => IOp::Shl,
                    ("shr", "u32") => IOp::ShrU,
                    ("shr", "s32") => IOp::ShrS,
                    ("min", "s32") => IOp::Min,
                    ("max", "s32") => IOp::Max,
                    _ => return Err(err(no, format!("unsupported `{opcode}`"))),
                };
                Kind::I {
                    op,
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                    b: src(&ops[2])?,
                }
            }
            "setp" => {
                want(3)?;
                let cmp = match parts.get(1).copied() {
                    Some("eq") => Cmp::Eq,
                    Some("ne") => Cmp::Ne,
                    Some("lt" | "lo") => Cmp::Lt,
                    Some("le" | "ls") => Cmp::Le,
                    Some("gt" | "hi") => Cmp::Gt,
                    Some("ge" | "hs") => Cmp::Ge,
                    Some("nan") => Cmp::Nan,
                    Some("num") => Cmp::Num,
                    _ => return Err(err(no, format!("unsupported `{opcode}`"))),
                };
                let (d, a, b) = (reg(&ops[0])?, src(&ops[1])?, src(&ops[2])?);
                if ty.starts_with('f') {
                    Kind::SetpF { cmp, w64, d, a, b }
                } else if matches!(cmp, Cmp::Nan | Cmp::Num) || !ty.ends_with("32") {
                    return Err(err(no, format!("unsupported `{opcode}`")));
                } else {
                    Kind::SetpI {
                        cmp,
                        signed: ty == "s32",
                        d,
                        a,
                        b,
                    }
                }
            }
            "selp" => {
                want(4)?;
                Kind::Selp {
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                    b: src(&ops[2])?,
                    p: reg(&ops[3])?,
                }
            }
            "cvt" => {
                want(2)?;
                let kind = match &parts[1..] {
                    ["rn", "f64", "s32"] => Cvt::F64FromS32,
                    ["rn", "f32", "s32"] => Cvt::F32FromS32,
                    ["rzi", "s32", "f64"] => Cvt::S32FromF64,
                    ["rzi", "s32", "f32"] => Cvt::S32FromF32,
                    ["f64", "f32"] => Cvt::F64FromF32,
                    ["rn", "f32", "f64"] => Cvt::F32FromF64,
                    _ => return Err(err(no, format!("unsupported `{opcode}`"))),
                };
                Kind::Cvt {
                    kind,
                    d: reg(&ops[0])?,
                    a: src(&ops[1])?,
                }
            }
            "bra" => {
                want(1)?;
                Kind::Bra(
                    *labels
                        .get(ops[0].as_str())
                        .ok_or_else(|| err(no, format!("no label {}", ops[0])))?,
                )
            }
            "ret" => Kind::Ret,
            "call" => {
                want(3)?;
                let ret = reg(ops[0].trim_start_matches('(').trim_end_matches(')'))?;
                let func = *by_name
                    .get(ops[1].as_str())
                    .ok_or_else(|| err(no, format!("no routine {}", ops[1])))?;
                let args = ops[2]
                    .trim_start_matches('(')
                    .trim_end_matches(')')
                    .split(',')
                    .map(src)
                    .collect::<Result<_, _>>()?;
                Kind::Call { ret, func, args }
            }
            _ => return Err(err(no, format!("unsupported `{opcode}`"))),
        };
        code.push(Op { guard, kind });
    }
    Ok(Func {
        name,
        ret,
        params,
        nregs: regs.len(),
        code,
    })
}

/// Splits operands at top-level commas (not inside `{}` or `()`).
fn split_operands(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '{' | '(' => depth += 1,
            '}' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// `lo, hi}` → (lo, hi).
fn vec2(v: &str) -> Option<(&str, &str)> {
    let (lo, hi) = v.strip_suffix('}')?.split_once(',')?;
    Some((lo.trim(), hi.trim()))
}

/// An immediate: `0dHEX` (f64 bits), `0fHEX` (f32 bits), `0xHEX`, decimal.
fn imm(s: &str) -> Option<u64> {
    if let Some(h) = s.strip_prefix("0d") {
        return u64::from_str_radix(h, 16).ok();
    }
    if let Some(h) = s.strip_prefix("0f") {
        return u32::from_str_radix(h, 16).ok().map(u64::from);
    }
    if let Some(h) = s.strip_prefix("0x") {
        return u64::from_str_radix(h, 16).ok();
    }
    s.parse::<i64>().ok().map(|v| v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_it_does_not_model() {
        let bad =
            ".func (.reg .f64 %ret) f (.reg .f64 %x)\n{\n    add.f64 %ret, %x, %x;\n    ret;\n}\n";
        let e = Library::parse(bad).unwrap_err();
        assert!(e.0.contains(".rn"), "{e}");
        let undeclared =
            ".func (.reg .f64 %ret) f (.reg .f64 %x)\n{\n    mov.f64 %ret, %y;\n    ret;\n}\n";
        assert!(
            Library::parse(undeclared)
                .unwrap_err()
                .0
                .contains("undeclared")
        );
    }

    #[test]
    fn ptx_semantics_where_rust_differs() {
        let text = ".func (.reg .b32 %ret) f (.reg .b32 %a, .reg .b32 %n)\n{\n    .reg .b32 %t;\n    .reg .pred %p;\n    shr.s32 %t, %a, %n;\n    setp.gt.f64 %p, 0dFFF8000000000000, 0d0000000000000000;\n    @%p mov.b32 %t, 7;\n    mov.b32 %ret, %t;\n    ret;\n}\n";
        let lib = Library::parse(text).unwrap();
        // Arithmetic shifts saturate: -8 >> 40 is -1; NaN > 0 is false.
        assert_eq!(
            lib.call("f", &[(-8i32) as u32 as u64, 40]).unwrap(),
            0xffff_ffff
        );
    }
}
