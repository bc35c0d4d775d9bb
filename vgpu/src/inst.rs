//! The decoded form of a PTX instruction: what the parser produces and the
//! executor runs. Registers are indices into a thread's register file (every
//! register, predicates included, is one `u64` there); labels and callees
//! are resolved to indices at parse time.

/// The kind of a PTX scalar type.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TyKind {
    /// `.b8` … `.b64`: untyped bits.
    B,
    /// `.u8` … `.u64`.
    U,
    /// `.s8` … `.s64`.
    S,
    /// `.f32`, `.f64`.
    F,
    /// `.pred`.
    Pred,
}

/// A PTX scalar type: a kind and a width in bits.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ty {
    /// Signedness or float-ness.
    pub kind: TyKind,
    /// Width in bits (8, 16, 32, 64; 1 for `.pred`).
    pub bits: u32,
}

impl Ty {
    /// Parses a type suffix without its dot (`u32`, `f64`, `pred`, …).
    pub fn parse(s: &str) -> Option<Ty> {
        if s == "pred" {
            return Some(Ty {
                kind: TyKind::Pred,
                bits: 1,
            });
        }
        let (k, w) = s.split_at(1);
        let kind = match k {
            "b" => TyKind::B,
            "u" => TyKind::U,
            "s" => TyKind::S,
            "f" => TyKind::F,
            _ => return None,
        };
        let bits: u32 = w.parse().ok()?;
        let ok = match kind {
            TyKind::F => bits == 32 || bits == 64,
            _ => matches!(bits, 8 | 16 | 32 | 64),
        };
        ok.then_some(Ty { kind, bits })
    }

    /// Whether the type is a float type.
    pub fn is_float(self) -> bool {
        self.kind == TyKind::F
    }

    /// Whether the type is signed.
    pub fn is_signed(self) -> bool {
        self.kind == TyKind::S
    }

    /// Bytes a value of the type occupies in memory.
    pub fn bytes(self) -> u32 {
        self.bits.div_ceil(8)
    }

    /// The low `bits` of `v`, zero-extended.
    pub fn trunc(self, v: u64) -> u64 {
        if self.bits >= 64 {
            v
        } else {
            v & ((1u64 << self.bits) - 1)
        }
    }

    /// `v` (in the type's low bits) sign-extended to 64 bits when the type
    /// is signed, zero-extended otherwise.
    pub fn extend(self, v: u64) -> u64 {
        if self.bits >= 64 {
            return v;
        }
        if self.kind == TyKind::S {
            let sh = 64 - self.bits;
            (((v << sh) as i64) >> sh) as u64
        } else {
            self.trunc(v)
        }
    }
}

impl std::fmt::Display for Ty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let k = match self.kind {
            TyKind::B => "b",
            TyKind::U => "u",
            TyKind::S => "s",
            TyKind::F => "f",
            TyKind::Pred => return f.write_str(".pred"),
        };
        write!(f, ".{k}{}", self.bits)
    }
}

/// A state space.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Space {
    /// No space given: a generic address (global, mapped host, shared or
    /// local memory).
    Generic,
    /// `.global`.
    Global,
    /// `.shared`: the block's shared memory.
    Shared,
    /// `.local`: the thread's local memory.
    Local,
    /// `.param`: kernel parameters.
    Param,
    /// `.const`: the module's constant bank.
    Const,
}

/// A special register.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sreg {
    /// `%tid.{x,y,z}`.
    Tid(u8),
    /// `%ntid.{x,y,z}`.
    Ntid(u8),
    /// `%ctaid.{x,y,z}`.
    Ctaid(u8),
    /// `%nctaid.{x,y,z}`.
    Nctaid(u8),
    /// `%laneid`.
    Laneid,
    /// `%warpid`.
    Warpid,
    /// `%nwarpid`.
    Nwarpid,
    /// `%smid`.
    Smid,
    /// `%nsmid`.
    Nsmid,
    /// `%clock` (32 bits).
    Clock,
    /// `%clock64`.
    Clock64,
    /// `%globaltimer` (nanoseconds).
    Globaltimer,
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Opnd {
    /// A register (index in the thread's file).
    Reg(u32),
    /// An immediate, as the bits the instruction's type reads.
    Imm(u64),
    /// A special register.
    Sreg(Sreg),
    /// The address of a variable: a byte offset in its space's window.
    Sym(Space, u64),
}

/// Where an address points: a register plus offset, or a resolved
/// variable plus offset.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Base {
    /// `[%r + off]`.
    Reg(u32),
    /// `[sym + off]`: a variable at this byte offset of its space's window
    /// (the kernel's parameter buffer, the block's shared memory, the
    /// thread's local memory, or the module's global/constant data).
    Var(Space, u64),
    /// `[imm]`: an absolute address.
    Abs(u64),
}

/// A memory operand.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Addr {
    /// The base.
    pub base: Base,
    /// The byte offset added to it.
    pub off: i64,
}

/// Memory-ordering semantics of a load, store or atomic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sem {
    /// No qualifier (weak for `ld`/`st`, relaxed for `atom`).
    Weak,
    /// `.relaxed`.
    Relaxed,
    /// `.acquire`.
    Acquire,
    /// `.release`.
    Release,
    /// `.acq_rel`.
    AcqRel,
    /// `.volatile`.
    Volatile,
}

/// The scope of a memory operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `.cta`.
    Cta,
    /// `.gpu` (the default for `atom`).
    Gpu,
    /// `.sys`.
    Sys,
}

/// Integer and float binary operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `add`.
    Add,
    /// `sub`.
    Sub,
    /// `mul.lo` (or the float `mul`).
    MulLo,
    /// `mul.hi`.
    MulHi,
    /// `mul.wide`: the destination is twice the source width.
    MulWide,
    /// `div`.
    Div,
    /// `rem`.
    Rem,
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
    /// `shl`.
    Shl,
    /// `shr` (arithmetic for `.s` types).
    Shr,
    /// `min`.
    Min,
    /// `max`.
    Max,
    /// `copysign`.
    Copysign,
}

/// Unary operations.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `neg`.
    Neg,
    /// `not` (bitwise; on predicates, logical).
    Not,
    /// `cnot`: 1 if zero, else 0.
    Cnot,
    /// `abs`.
    Abs,
    /// `sqrt.rn`.
    Sqrt,
    /// `clz`.
    Clz,
    /// `popc`.
    Popc,
    /// `brev`.
    Brev,
    /// `rcp.rn`: 1 / a, rounded to nearest.
    Rcp,
    /// `ex2.approx.f32`: 2^a, computed exactly (hardware is within 2 ulp).
    Ex2,
    /// `ex2.approx.ftz.f32`: the same with subnormal inputs and results
    /// flushed to zero (of the input's sign).
    Ex2Ftz,
}

/// A `setp` comparison.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `eq`.
    Eq,
    /// `ne`.
    Ne,
    /// `lt`.
    Lt,
    /// `le`.
    Le,
    /// `gt`.
    Gt,
    /// `ge`.
    Ge,
    /// `lo` (unsigned `lt`).
    Lo,
    /// `ls` (unsigned `le`).
    Ls,
    /// `hi` (unsigned `gt`).
    Hi,
    /// `hs` (unsigned `ge`).
    Hs,
    /// `equ`: equal or unordered.
    Equ,
    /// `neu`: not equal or unordered.
    Neu,
    /// `ltu`.
    Ltu,
    /// `leu`.
    Leu,
    /// `gtu`.
    Gtu,
    /// `geu`.
    Geu,
    /// `num`: neither is NaN.
    Num,
    /// `nan`: either is NaN.
    Nan,
}

/// A boolean combination (`setp`'s `.and`/`.or`/`.xor`, and the predicate
/// logic instructions).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BoolOp {
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
}

/// A rounding modifier.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rnd {
    /// `.rn` (float result) / `.rni` (integer result): to nearest, ties to even.
    Near,
    /// `.rz` / `.rzi`: toward zero.
    Zero,
    /// `.rm` / `.rmi`: toward −∞.
    Down,
    /// `.rp` / `.rpi`: toward +∞.
    Up,
}

/// An atomic operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AtomOp {
    /// `add`.
    Add,
    /// `min`.
    Min,
    /// `max`.
    Max,
    /// `inc`: `old >= b ? 0 : old + 1`.
    Inc,
    /// `dec`: `old == 0 || old > b ? b : old - 1`.
    Dec,
    /// `and`.
    And,
    /// `or`.
    Or,
    /// `xor`.
    Xor,
    /// `exch`.
    Exch,
    /// `cas`.
    Cas,
}

/// One decoded operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// `mov`: copy (a register, an immediate, a special register, or a
    /// variable's address).
    Mov {
        /// The type.
        ty: Ty,
        /// Destination register.
        d: u32,
        /// Source.
        a: Opnd,
    },
    /// `mov.bN d, {a, b, …}`: pack parts, the first in the low bits.
    Pack {
        /// Destination register.
        d: u32,
        /// The parts.
        parts: Vec<Opnd>,
        /// Width of one part.
        part_bits: u32,
    },
    /// `mov.bN {a, b, …}, s`: unpack, the first part from the low bits.
    Unpack {
        /// Destination registers.
        parts: Vec<u32>,
        /// The source.
        a: Opnd,
        /// Width of one part.
        part_bits: u32,
    },
    /// A binary operation.
    Bin {
        /// The operation.
        op: BinOp,
        /// The source type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// Left.
        a: Opnd,
        /// Right.
        b: Opnd,
    },
    /// A unary operation.
    Un {
        /// The operation.
        op: UnOp,
        /// The type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// Source.
        a: Opnd,
    },
    /// `mad.{lo,hi,wide}` on integers: `a * b + c`.
    Mad {
        /// `MulLo`, `MulHi` or `MulWide`.
        mode: BinOp,
        /// The source type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// Factor.
        a: Opnd,
        /// Factor.
        b: Opnd,
        /// Addend.
        c: Opnd,
    },
    /// `fma.rnd` (and `mad.rnd` on floats): one rounding (directed ones
    /// on `.f32` only).
    Fma {
        /// The rounding.
        rnd: Rnd,
        /// The type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// Factor.
        a: Opnd,
        /// Factor.
        b: Opnd,
        /// Addend.
        c: Opnd,
    },
    /// `setp.cmp[.bool].ty p[|q], a, b[, [!]c]`.
    Setp {
        /// The comparison.
        cmp: Cmp,
        /// The compared type.
        ty: Ty,
        /// Destination predicate.
        p: u32,
        /// The complement predicate, if written.
        q: Option<u32>,
        /// Left.
        a: Opnd,
        /// Right.
        b: Opnd,
        /// The combination with a third predicate (and its negation).
        comb: Option<(BoolOp, u32, bool)>,
    },
    /// `selp.ty d, a, b, p`: `p ? a : b`.
    Selp {
        /// The type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// If true.
        a: Opnd,
        /// If false.
        b: Opnd,
        /// The predicate.
        p: u32,
    },
    /// Predicate logic: `and/or/xor.pred d, a, b`.
    PredLogic {
        /// The operation.
        op: BoolOp,
        /// Destination.
        d: u32,
        /// Left.
        a: Opnd,
        /// Right.
        b: Opnd,
    },
    /// `cvt[.rnd][.sat].dty.sty d, a`.
    Cvt {
        /// Destination type.
        dty: Ty,
        /// Source type.
        sty: Ty,
        /// Rounding, if given.
        rnd: Option<Rnd>,
        /// `.sat`.
        sat: bool,
        /// Destination.
        d: u32,
        /// Source.
        a: Opnd,
    },
    /// `cvta[.to].space.u64 d, a`: converts between a space's addresses
    /// and generic ones (the identity here: windows are generic).
    Cvta {
        /// Destination.
        d: u32,
        /// Source.
        a: Opnd,
    },
    /// `ld[.sem.scope][.space].ty d, [addr]`.
    Ld {
        /// The space.
        space: Space,
        /// The semantics.
        sem: Sem,
        /// The scope (with `.relaxed`/`.acquire`).
        scope: Option<Scope>,
        /// The type.
        ty: Ty,
        /// Destination.
        d: u32,
        /// Where.
        addr: Addr,
    },
    /// `st[.sem.scope][.space].ty [addr], a`.
    St {
        /// The space.
        space: Space,
        /// The semantics.
        sem: Sem,
        /// The scope (with `.relaxed`/`.release`).
        scope: Option<Scope>,
        /// The type.
        ty: Ty,
        /// Where.
        addr: Addr,
        /// The value.
        a: Opnd,
    },
    /// `atom[.sem][.scope][.space].op.ty d, [addr], b[, c]` and
    /// `red…` (no destination).
    Atom {
        /// The space.
        space: Space,
        /// The operation.
        op: AtomOp,
        /// The type.
        ty: Ty,
        /// Destination (`None` for `red`).
        d: Option<u32>,
        /// Where.
        addr: Addr,
        /// Operand.
        b: Opnd,
        /// `cas`'s new value.
        c: Option<Opnd>,
    },
    /// `fence.*` / `membar.*`.
    Fence {
        /// `.sc` (and every `membar`) rather than `.acq_rel`.
        sc: bool,
        /// The scope (`membar.gl` is `.gpu`).
        scope: Scope,
    },
    /// `nanosleep.u32 t`: ends the thread's turn.
    Nanosleep(Opnd),
    /// `shfl.sync.MODE.b32 d, a, b, c, membermask`: `d` takes `a` of
    /// another lane of the warp (`crate::grid` holds the lanes of
    /// `membermask` until every one that has not exited arrives).
    Shfl {
        /// `.up`, `.down`, `.bfly` or `.idx`.
        mode: ShflMode,
        /// Destination.
        d: u32,
        /// The value this lane offers.
        a: Opnd,
        /// The lane offset (or index, for `.idx`).
        b: Opnd,
        /// The clamp (bits 0–4) and segment mask (bits 8–12).
        c: Opnd,
        /// The lanes taking part.
        mask: Opnd,
    },
    /// `vote.sync.MODE.pred d, p, membermask` (`.all`, `.any`, `.uni`) and
    /// `vote.sync.ballot.b32 d, p, membermask`.
    Vote {
        /// The vote.
        mode: VoteMode,
        /// Destination.
        d: u32,
        /// The predicate register voted, and whether it is negated (`!p`).
        p: u32,
        /// `!p`.
        neg: bool,
        /// The lanes taking part.
        mask: Opnd,
    },
    /// `activemask.b32 d`: this lane's bit alone. Threads run one at a
    /// time here, so no other lane is known to execute the instruction
    /// with it: the most adversarial answer hardware may give.
    ActiveMask(u32),
    /// `bar.sync` / `barrier.sync` (with its barrier number).
    Bar(Opnd),
    /// `bra[.uni] L`.
    Bra(u32),
    /// `call (ret), f, (args)`.
    Call {
        /// The callee (index in the module).
        func: u32,
        /// Caller registers receiving the results.
        rets: Vec<u32>,
        /// The arguments.
        args: Vec<Opnd>,
    },
    /// `ret`.
    Ret,
    /// `exit`.
    Exit,
    /// `trap`.
    Trap,
}

/// A `shfl.sync` mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ShflMode {
    /// From `lane - b`.
    Up,
    /// From `lane + b`.
    Down,
    /// From `lane ^ b`.
    Bfly,
    /// From lane `b` (of the segment).
    Idx,
}

/// A `vote.sync` mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VoteMode {
    /// True on every lane.
    All,
    /// True on some lane.
    Any,
    /// The same on every lane.
    Uni,
    /// The lanes where it is true, as a mask.
    Ballot,
}

/// An instruction: an operation, its guard and its PTX line.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    /// `@p` / `@!p`: the predicate register and whether it is negated.
    pub guard: Option<(u32, bool)>,
    /// The operation.
    pub op: Op,
    /// 1-based line in the module's PTX text.
    pub line: u32,
}
