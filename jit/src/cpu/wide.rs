//! 256-bit SIMD groups for straight-line kernels, on hosts with AVX2.
//!
//! Cranelift's x64 backend has no vector type wider than 128 bits. For a
//! kernel whose item loop runs SIMD groups ([`crate::cpu::opt::vectorizable`]),
//! this module encodes (with `iced-x86`) a leaf function that runs the
//! same lane-wise body on 256-bit registers, eight workitems to a body and
//! [`BODIES`] bodies to a group, polling the launch's control word before
//! each group as the 128-bit groups do. The slot loop calls it while a
//! group's worth of the chunk is left and takes over from where it
//! returned: for the rest of the chunk (128-bit groups, then workitems one
//! by one), and for a control word that became set (the slot stops there,
//! as at any poll).
//!
//! The body is read off the bytecode by the walk the 128-bit bodies
//! (`loops.rs`) and the check that a kernel has one take
//! ([`crate::cpu::opt::lanes::walk`]): an operation is
//! [`crate::cpu::opt::vector::simd_op`]'s, and its
//! 256-bit instruction is the same lane-wise IEEE or integer operation on
//! more lanes, so every lane's bits are the scalar code's. Uniform values
//! (captured scalars, constants) come from an argument table the caller
//! fills ([`WideArg`]) and are broadcast where used.
//!
//! The function's ABI is the platform's C one:
//! `fn(args: *const u64, w: i64, hi: i64, control: *const u32) -> i64`,
//! returning the first workitem it did not run; it runs workitems
//! `w ..` a group at a time while at least [`GROUP`] of `[w, hi)` are left
//! and the control word is zero. The caller has proved every array access
//! in bounds for `[w, hi)` (the unchecked item loop).

use crate::cpu::opt::lanes::{Lane, LaneEmit, walk};
use iced_x86::code_asm::{
    AsmRegister64, AsmRegisterYmm, CodeAssembler, dword_ptr, qword_ptr, r8, r9, r10, r11, rax, rcx,
    rdi, rdx, rsi, ymmword_ptr,
};
use offload_ir::isa::BinOp;
use offload_ir::{FuncId, Kind, Verified};

/// Workitems per 256-bit body: eight 32-bit lanes.
pub(crate) const LANES: i64 = 8;

/// Bodies per group, between two reads of the control word.
pub(crate) const BODIES: i64 = 8;

/// Workitems per group.
pub(crate) const GROUP: i64 = LANES * BODIES;

/// One 64-bit word of the argument table, filled by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WideArg {
    /// The address of element 0 of the array the kernel's parameter
    /// `local` refers to.
    Array(usize),
    /// The bits of the kernel's `i32` or `f32` parameter `local`, in the
    /// low half.
    Scalar(usize),
    /// A constant's bits.
    Bits(u32),
}

/// A wide loop's machine code and the table its caller fills.
#[derive(Clone, Debug)]
pub(crate) struct WideLoop {
    /// Position-independent code: relative branches only, no relocations.
    pub(crate) code: Vec<u8>,
    /// Entry `i` is the table's word `i`.
    pub(crate) args: Vec<WideArg>,
    /// Uniform values broadcast once, before the loop, into registers of
    /// their own (the others are broadcast in each body that uses them).
    /// Only the tests read it: the code is what runs.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) pinned: usize,
}

/// Whether kernels get wide loops: the host has AVX2 (checked at run
/// time: the code uses its integer instructions) and the environment does
/// not cap SIMD groups at 128 bits (`OFFLOAD_SIMD_BITS=128`: the groups
/// Cranelift emits on every x86-64 host, and the Cranelift IR the REPL
/// shows is then the same on every host; `256` or unset: as wide as the
/// host allows; anything else is reported once and ignored).
pub(crate) fn available() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        let capped = match std::env::var("OFFLOAD_SIMD_BITS") {
            Ok(v) if v.trim() == "128" => true,
            Ok(v) if v.trim() == "256" => false,
            Ok(v) => {
                eprintln!("offload: OFFLOAD_SIMD_BITS=`{v}` is neither 128 nor 256; ignored");
                false
            }
            Err(_) => false,
        };
        !capped && avx2()
    })
}

fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A value during one body: a vector register, or a uniform value still in
/// the table (or kept in a register of its own, see [`compile`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operand {
    Reg(AsmRegisterYmm),
    Uniform(WideArg),
}

/// A value of the walk ([`Lane`]) in the wide loop.
type WLane = Lane<Operand, AsmRegister64>;

/// Registers for array addresses (the others hold the arguments and a
/// scratch value).
const ARRAY_REGS: [AsmRegister64; 4] = [rax, r8, r9, r10];

/// The 256-bit registers, in allocation order.
fn ymm(i: usize) -> AsmRegisterYmm {
    use iced_x86::code_asm::registers::*;
    [
        ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13,
        ymm14, ymm15,
    ][i]
}

/// The wide loop for kernel `k`, whose item loop runs SIMD groups; `None`
/// when this module cannot encode it (more arrays or live vector values
/// than registers), and the 128-bit groups run it instead.
pub(crate) fn compile(
    v: &Verified,
    k: FuncId,
    known: &std::collections::BTreeMap<offload_ir::Bci, i32>,
) -> Option<WideLoop> {
    // Each uniform value the body broadcasts goes to a register of its
    // own before the loop (from ymm15 down) when the body still fits in
    // the rest: a broadcast from the table in every body is one load more
    // per body, and at saxpy's speed the loop is bound by its loads and
    // stores (in-process, alternating with the per-body broadcast, 0.85x
    // its time over 2^20 elements).
    let (plain, used) = encode(v, k, &[], known)?;
    if used.is_empty() || used.len() > MAX_PINNED {
        return Some(plain);
    }
    let pinned: Vec<(WideArg, AsmRegisterYmm)> = used
        .iter()
        .enumerate()
        .map(|(i, &u)| (u, ymm(15 - i)))
        .collect();
    Some(encode(v, k, &pinned, known).map_or(plain, |(wl, _)| wl))
}

/// The most uniform values kept in registers for the whole loop.
const MAX_PINNED: usize = 8;

/// [`compile`] with the uniform values in `pinned` broadcast once, before
/// the loop, into their registers; also says which uniform values the body
/// broadcast per body, in their first use's order.
fn encode(
    v: &Verified,
    k: FuncId,
    pinned: &[(WideArg, AsmRegisterYmm)],
    known: &std::collections::BTreeMap<offload_ir::Bci, i32>,
) -> Option<(WideLoop, Vec<WideArg>)> {
    let f = v.func(k);
    let params = f.param_count as usize;
    let mut args: Vec<WideArg> = Vec::new();
    let mut arrays: Vec<(usize, AsmRegister64)> = Vec::new();
    for (l, loc) in f.locals.iter().enumerate().take(params).skip(1) {
        if loc.ty.kind() == Kind::Ref {
            arrays.push((l, *ARRAY_REGS.get(arrays.len())?));
        }
    }
    let mut a = CodeAssembler::new(64).ok()?;
    let slot = |args: &mut Vec<WideArg>, x: WideArg| -> i32 {
        let i = args.iter().position(|&y| y == x).unwrap_or_else(|| {
            args.push(x);
            args.len() - 1
        });
        8 * i as i32
    };
    for &(l, r) in &arrays {
        let at = slot(&mut args, WideArg::Array(l));
        a.mov(r, qword_ptr(rdi + at)).ok()?;
    }
    for &(u, r) in pinned {
        let at = slot(&mut args, u);
        a.vbroadcastss(r, dword_ptr(rdi + at)).ok()?;
    }
    let mut used = Vec::new();
    let mut top = a.create_label();
    let mut out = a.create_label();
    a.set_label(&mut top).ok()?;
    // Stop when less than a group is left, or the control word is set.
    a.mov(r11, rdx).ok()?;
    a.sub(r11, rsi).ok()?;
    a.cmp(r11, GROUP as i32).ok()?;
    a.jl(out).ok()?;
    a.mov(iced_x86::code_asm::r11d, dword_ptr(rcx)).ok()?;
    a.test(iced_x86::code_asm::r11d, iced_x86::code_asm::r11d)
        .ok()?;
    a.jne(out).ok()?;
    for j in 0..BODIES {
        let mut uniform = |x: WideArg| {
            if !used.contains(&x) {
                used.push(x);
            }
            slot(&mut args, x)
        };
        let mut body = WideBody {
            a: &mut a,
            at: (j * LANES * 4) as i32,
            arrays: &arrays,
            pinned,
            uniform: &mut uniform,
            next: [false; 16],
        };
        walk(f, None, known, &mut body).ok()?;
    }
    a.add(rsi, GROUP as i32).ok()?;
    a.jmp(top).ok()?;
    a.set_label(&mut out).ok()?;
    a.vzeroupper().ok()?;
    a.mov(rax, rsi).ok()?;
    a.ret().ok()?;
    let code = a.assemble(0).ok()?;
    let wl = WideLoop {
        code,
        args,
        pinned: pinned.len(),
    };
    Some((wl, used))
}

/// One body of a group, workitems `w + 8 j ..` (its byte offset `at`),
/// read off the bytecode by the walk of SIMD bodies. A register is free
/// when no value on the stack or in a local holds it (`before` marks them
/// before each instruction, its operands included) and no uniform value
/// is kept in it; a body needing more than the free registers is left to
/// the 128-bit groups.
struct WideBody<'b> {
    a: &'b mut CodeAssembler,
    at: i32,
    arrays: &'b [(usize, AsmRegister64)],
    pinned: &'b [(WideArg, AsmRegisterYmm)],
    /// A uniform value's table offset (and a note that the body used it).
    uniform: &'b mut dyn FnMut(WideArg) -> i32,
    next: [bool; 16],
}

impl WideBody<'_> {
    /// `x` in a register: a uniform value is in its kept register, or is
    /// broadcast from its table word.
    fn reg(&mut self, x: WLane) -> Option<AsmRegisterYmm> {
        match x {
            Lane::Uniform(Operand::Reg(r), _) | Lane::Varying(Operand::Reg(r), _) => Some(r),
            Lane::Uniform(Operand::Uniform(u), _) | Lane::Varying(Operand::Uniform(u), _) => {
                if let Some(&(_, r)) = self.pinned.iter().find(|&&(p, _)| p == u) {
                    return Some(r);
                }
                let r = fresh(&mut self.next)?;
                let at = (self.uniform)(u);
                self.a.vbroadcastss(r, dword_ptr(rdi + at)).ok()?;
                Some(r)
            }
            _ => None,
        }
    }
}

impl LaneEmit for WideBody<'_> {
    type V = Operand;
    type A = AsmRegister64;

    fn param(&mut self, local: usize, _k: Kind) -> Option<Operand> {
        Some(Operand::Uniform(WideArg::Scalar(local)))
    }

    fn array(&mut self, local: usize) -> Option<AsmRegister64> {
        self.arrays
            .iter()
            .find(|&&(l, _)| l == local)
            .map(|&(_, r)| r)
    }

    fn zero(&mut self, _k: Kind) -> Option<Operand> {
        Some(Operand::Uniform(WideArg::Bits(0)))
    }

    fn constant(&mut self, _k: Kind, bits: u32) -> Option<Operand> {
        Some(Operand::Uniform(WideArg::Bits(bits)))
    }

    fn before(&mut self, stack: &[WLane], locals: &[WLane]) {
        self.next = live(stack, locals);
        for &(_, r) in self.pinned {
            self.next[index(r)] = true;
        }
    }

    fn binary(&mut self, k: Kind, op: BinOp, x: WLane, y: WLane) -> Option<WLane> {
        let (x, y) = (self.reg(x)?, self.reg(y)?);
        let r = fresh(&mut self.next)?;
        let a = &mut *self.a;
        match (k, op) {
            (Kind::F32, BinOp::Add) => a.vaddps(r, x, y),
            (Kind::F32, BinOp::Sub) => a.vsubps(r, x, y),
            (Kind::F32, BinOp::Mul) => a.vmulps(r, x, y),
            (Kind::F32, BinOp::Div) => a.vdivps(r, x, y),
            (Kind::I32, BinOp::Add) => a.vpaddd(r, x, y),
            (Kind::I32, BinOp::Sub) => a.vpsubd(r, x, y),
            (Kind::I32, BinOp::And) => a.vpand(r, x, y),
            (Kind::I32, BinOp::Or) => a.vpor(r, x, y),
            (Kind::I32, BinOp::Xor) => a.vpxor(r, x, y),
            _ => return None,
        }
        .ok()?;
        Some(Lane::Varying(Operand::Reg(r), k))
    }

    fn load(&mut self, _k: Kind, arr: AsmRegister64) -> Option<Operand> {
        let r = fresh(&mut self.next)?;
        self.a
            .vmovups(r, ymmword_ptr(arr + rsi * 4 + self.at))
            .ok()?;
        Some(Operand::Reg(r))
    }

    fn store(&mut self, _k: Kind, arr: AsmRegister64, x: WLane) -> Option<()> {
        let x = self.reg(x)?;
        self.a.vmovups(ymmword_ptr(arr + rsi * 4 + self.at), x).ok()
    }
}

/// Which of the sixteen registers the values in `stack` and `env` hold.
fn live(stack: &[WLane], env: &[WLane]) -> [bool; 16] {
    let mut used = [false; 16];
    for x in stack.iter().chain(env) {
        if let Lane::Uniform(Operand::Reg(r), _) | Lane::Varying(Operand::Reg(r), _) = x {
            used[index(*r)] = true;
        }
    }
    used
}

/// `r`'s number.
fn index(r: AsmRegisterYmm) -> usize {
    (0..16).position(|i| ymm(i) == r).expect("a ymm register")
}

/// A register no live value holds, marked as held.
fn fresh(used: &mut [bool; 16]) -> Option<AsmRegisterYmm> {
    let i = used.iter().position(|u| !u)?;
    used[i] = true;
    Some(ymm(i))
}

#[cfg(test)]
mod tests {
    use super::{WideArg, compile};
    use offload_ir::{FuncId, parse_module, verify};

    fn wide(src: &str) -> Option<super::WideLoop> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        compile(&v, FuncId::new(0), &Default::default())
    }

    #[test]
    fn saxpy_reads_its_arrays_and_its_scalar_from_the_table() {
        let wl = wide(include_str!("../../../examples/kernels/saxpy.obc")).expect("encodable");
        // The arrays' words first (loaded once, before the loop), then the
        // uniform values in the order the body first broadcasts them.
        assert_eq!(
            wl.args,
            [WideArg::Array(2), WideArg::Array(3), WideArg::Scalar(1)]
        );
        // One 256-bit load of `x`, one of `y`, a multiply, an add and a
        // store per body: the code grows with the bodies, not beyond.
        assert!(wl.code.len() < 600, "{} bytes", wl.code.len());
        assert_eq!(wl.code.last(), Some(&0xc3), "ends in ret");
        // `a` is broadcast once, before the loop.
        assert_eq!(wl.pinned, 1);
    }

    /// A kernel over `p` and `q` whose body holds `live` values at once
    /// (loads of `p[j]`, each plus its own constant) and uses `constants`
    /// distinct uniform values.
    fn many(live: usize, constants: usize) -> String {
        let mut s = String::from(
            "kernel k(i: i64, p: i32[], q: i32[]) {\n    local j: i32\n    load i\n    i64.to_i32\n    store j\n    load q\n    load j\n",
        );
        for v in 0..live {
            s += &format!(
                "    load p\n    load j\n    i32.aload\n    i32.const {}\n    i32.add\n",
                1 + v % constants
            );
        }
        for _ in 1..live {
            s += "    i32.xor\n";
        }
        s + "    i32.astore\n    ret\n}"
    }

    /// Uniform values go to registers of their own while the body still
    /// fits in the rest; past that, or past `MAX_PINNED` of them, each body
    /// broadcasts them as it uses them, and the loop is still made.
    #[test]
    fn uniform_values_stay_in_registers_while_the_body_fits_beside_them() {
        assert_eq!(wide(&many(4, 4)).expect("encodable").pinned, 4);
        assert_eq!(wide(&many(6, 8)).expect("encodable").pinned, 6);
        // Nine constants: more than are kept.
        assert_eq!(wide(&many(9, 9)).expect("encodable").pinned, 0);
        // Eight constants and nine values live at once: 17 registers.
        assert_eq!(wide(&many(9, 8)).expect("encodable").pinned, 0);
        // Five and nine: 14.
        assert_eq!(wide(&many(9, 5)).expect("encodable").pinned, 5);
    }

    /// Register reuse: this body makes more vector values (17) than there
    /// are registers, but never holds more than a few at once.
    #[test]
    fn a_body_with_more_values_than_registers_reuses_the_dead_ones() {
        let src = "kernel k(i: i64, m: i32, p: i32[], q: i32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load p
    load j
    load p
    load j
    i32.aload
    load m
    i32.add
    load m
    i32.xor
    load m
    i32.add
    load m
    i32.xor
    load m
    i32.add
    load m
    i32.xor
    load m
    i32.add
    load m
    i32.xor
    load q
    load j
    i32.aload
    i32.or
    i32.astore
    ret
}";
        let wl = wide(src).expect("encodable with reuse");
        assert_eq!(
            wl.args,
            [WideArg::Array(2), WideArg::Array(3), WideArg::Scalar(1)]
        );
    }

    #[test]
    fn constants_are_table_words() {
        let src = "kernel k(i: i64, y: f32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load y
    load j
    load y
    load j
    f32.aload
    f32.const 0.5
    f32.add
    f32.astore
    ret
}";
        let wl = wide(src).expect("encodable");
        assert_eq!(
            wl.args,
            [WideArg::Array(1), WideArg::Bits(0.5f32.to_bits())]
        );
    }

    #[test]
    fn more_arrays_than_address_registers_are_left_to_the_narrow_groups() {
        let src = "kernel k(i: i64, a: f32[], b: f32[], c: f32[], d: f32[], e: f32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load e
    load j
    load a
    load j
    f32.aload
    f32.astore
    ret
}";
        assert!(wide(src).is_none());
    }
}
