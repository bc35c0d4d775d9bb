//! 256-bit SIMD groups for straight-line kernels, on hosts with AVX2.
//!
//! Cranelift's x64 backend has no vector type wider than 128 bits. For a
//! kernel whose item loop runs SIMD groups ([`crate::opt::vectorizable`]),
//! this module encodes (with `iced-x86`) a leaf function that runs the
//! same lane-wise body on 256-bit registers, eight workitems to a body and
//! [`BODIES`] bodies to a group, polling the launch's control word before
//! each group as the 128-bit groups do. The slot loop calls it while a
//! group's worth of the chunk is left and takes over from where it
//! returned: for the rest of the chunk (128-bit groups, then workitems one
//! by one), and for a control word that became set (the slot stops there,
//! as at any poll).
//!
//! The body is read off the bytecode the way the 128-bit bodies are
//! (`loops.rs`): an operation is [`crate::opt::vector::simd_op`]'s, and its
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

use crate::opt::vector::simd_op;
use iced_x86::code_asm::{
    AsmRegister64, AsmRegisterYmm, CodeAssembler, dword_ptr, qword_ptr, r8, r9, r10, r11, rax, rcx,
    rdi, rdx, rsi, ymmword_ptr,
};
use offload_ir::isa::BinOp;
use offload_ir::{FuncId, Inst, Kind, Verified};

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

/// A value during one body: a vector register, a uniform value still in the
/// table, the workitem number (as `i64`, as `i32`), or an array.
#[derive(Clone, Copy)]
enum W {
    Reg(AsmRegisterYmm),
    Uniform(WideArg),
    Idx,
    Idx32,
    Arr(AsmRegister64),
}

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
pub(crate) fn compile(v: &Verified, k: FuncId) -> Option<WideLoop> {
    let f = v.func(k);
    let params = f.param_count as usize;
    let mut args: Vec<WideArg> = Vec::new();
    let mut arrays: Vec<(usize, AsmRegister64)> = Vec::new();
    let mut initial = Vec::with_capacity(f.locals.len());
    for (l, loc) in f.locals.iter().enumerate() {
        initial.push(if l == 0 {
            W::Idx
        } else if l < params && loc.ty.kind() == Kind::Ref {
            let r = *ARRAY_REGS.get(arrays.len())?;
            arrays.push((l, r));
            W::Arr(r)
        } else if l < params {
            W::Uniform(WideArg::Scalar(l))
        } else {
            // (Read only after a store: the verifier sees to that.)
            W::Uniform(WideArg::Bits(0))
        });
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
        body(&mut a, f, &initial, j, &mut |x| slot(&mut args, x))?;
    }
    a.add(rsi, GROUP as i32).ok()?;
    a.jmp(top).ok()?;
    a.set_label(&mut out).ok()?;
    a.vzeroupper().ok()?;
    a.mov(rax, rsi).ok()?;
    a.ret().ok()?;
    let code = a.assemble(0).ok()?;
    Some(WideLoop { code, args })
}

/// Body `j` of a group: workitems `w + 8 j ..`, read off `f`'s bytecode.
fn body(
    a: &mut CodeAssembler,
    f: &offload_ir::Function,
    initial: &[W],
    j: i64,
    slot: &mut dyn FnMut(WideArg) -> i32,
) -> Option<()> {
    let at = (j * LANES * 4) as i32;
    let mut env = initial.to_vec();
    let mut stack: Vec<W> = Vec::new();
    for &inst in &f.body {
        // A register is free when no value on the stack or in a local
        // holds it; each instruction's operands and result are marked as
        // they are made. A body needing more than sixteen live vector
        // values is left to the 128-bit groups.
        let mut next = live(&stack, &env);
        match inst {
            Inst::Load { local } => stack.push(*env.get(local.index())?),
            Inst::Store { local } => *env.get_mut(local.index())? = stack.pop()?,
            Inst::I32Const { value } => stack.push(W::Uniform(WideArg::Bits(value as u32))),
            Inst::F32Const { value } => stack.push(W::Uniform(WideArg::Bits(value.0))),
            Inst::I64ToI32 => {
                let W::Idx = stack.pop()? else { return None };
                stack.push(W::Idx32);
            }
            _ if simd_op(inst).is_some() => {
                let (k, op) = simd_op(inst)?;
                let (y, x) = (stack.pop()?, stack.pop()?);
                let x = reg(a, x, &mut next, slot)?;
                let y = reg(a, y, &mut next, slot)?;
                let r = fresh(&mut next)?;
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
                stack.push(W::Reg(r));
            }
            Inst::I32ALoad | Inst::F32ALoad => {
                let (W::Idx32, W::Arr(base)) = (stack.pop()?, stack.pop()?) else {
                    return None;
                };
                let r = fresh(&mut next)?;
                a.vmovups(r, ymmword_ptr(base + rsi * 4 + at)).ok()?;
                stack.push(W::Reg(r));
            }
            Inst::I32AStore | Inst::F32AStore => {
                let x = stack.pop()?;
                let (W::Idx32, W::Arr(base)) = (stack.pop()?, stack.pop()?) else {
                    return None;
                };
                let x = reg(a, x, &mut next, slot)?;
                a.vmovups(ymmword_ptr(base + rsi * 4 + at), x).ok()?;
            }
            Inst::Dup => stack.push(*stack.last()?),
            Inst::Pop => {
                stack.pop()?;
            }
            Inst::Swap => {
                let n = stack.len();
                if n < 2 {
                    return None;
                }
                stack.swap(n - 1, n - 2);
            }
            Inst::Ret => {}
            _ => return None,
        }
    }
    Some(())
}

/// Which of the sixteen registers the values in `stack` and `env` hold.
fn live(stack: &[W], env: &[W]) -> [bool; 16] {
    let mut used = [false; 16];
    for x in stack.iter().chain(env) {
        if let W::Reg(r) = x {
            used[(0..16).position(|i| ymm(i) == *r).expect("a ymm register")] = true;
        }
    }
    used
}

/// A register no live value holds, marked as held.
fn fresh(used: &mut [bool; 16]) -> Option<AsmRegisterYmm> {
    let i = used.iter().position(|u| !u)?;
    used[i] = true;
    Some(ymm(i))
}

/// `x` in a register: a uniform value is broadcast from its table word.
fn reg(
    a: &mut CodeAssembler,
    x: W,
    next: &mut [bool; 16],
    slot: &mut dyn FnMut(WideArg) -> i32,
) -> Option<AsmRegisterYmm> {
    match x {
        W::Reg(r) => Some(r),
        W::Uniform(u) => {
            let r = fresh(next)?;
            a.vbroadcastss(r, dword_ptr(rdi + slot(u))).ok()?;
            Some(r)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{WideArg, compile};
    use offload_ir::{FuncId, parse_module, verify};

    fn wide(src: &str) -> Option<super::WideLoop> {
        let v = verify(parse_module("t.obc", src).unwrap()).unwrap();
        compile(&v, FuncId::new(0))
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
