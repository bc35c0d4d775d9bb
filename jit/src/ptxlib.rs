//! The PTX math library: the host's `libm` transcendentals ported to PTX
//! (`ptx_libm.ptx`), so the PTX backend computes `exp`, `log`, `sin`, `cos`
//! and `pow` bit for bit as the interpreter and the CPU device do.
//!
//! The backend calls a routine per transcendental instruction and copies the
//! routines a kernel needs (with what they call) into its module. Sine and
//! cosine of huge arguments are the one case not ported: their reduction
//! needs `rem_pio2_large`'s multi-word 2/π table, so the kernel tests
//! [`trig_needs_host_f64`] / [`trig_needs_host_f32`] before the call and
//! deoptimizes with reason `devlimit`; the interpreter then runs the
//! instruction with the host's libm. The virtual GPU (`offload-vgpu`) runs this same text on
//! the host, and the tests compare it with `libm` bit for bit.

use offload_ir::Kind;
use offload_ir::isa::{BinOp, Op, UnOp};

/// The library's PTX text.
pub const TEXT: &str = include_str!("ptx_libm.ptx");

/// f64 sine/cosine arguments from this magnitude (2^20·π/2, the high word
/// 0x413921fb) need the multi-word reduction the device does not have.
pub const TRIG_HOST_F64: f64 = f64::from_bits(0x4139_21fb_0000_0000);
/// f32 sine/cosine arguments from this magnitude (about 2^28·π/2) need the
/// multi-word reduction.
pub const TRIG_HOST_F32: f32 = f32::from_bits(0x4dc9_0fdb);

/// Whether the device leaves `sin(x)`/`cos(x)` for an f64 `x` to the host.
pub fn trig_needs_host_f64(x: f64) -> bool {
    x.abs() >= TRIG_HOST_F64 && x.is_finite()
}

/// Whether the device leaves `sin(x)`/`cos(x)` for an f32 `x` to the host.
pub fn trig_needs_host_f32(x: f32) -> bool {
    x.abs() >= TRIG_HOST_F32 && x.is_finite()
}

/// How the backend lowers one transcendental instruction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Routine {
    /// The `.func` to call.
    pub name: &'static str,
    /// Operands popped from the stack (1 or 2).
    pub arity: usize,
    /// A trailing immediate argument (the sine/cosine selector), if any.
    pub selector: Option<i32>,
    /// Whether the instruction is f64 (else f32).
    pub f64: bool,
    /// Whether huge arguments deoptimize (sine and cosine).
    pub trig: bool,
}

/// The routine for a transcendental operation (`None` for anything else).
pub fn routine(op: Op) -> Option<Routine> {
    use {BinOp::Pow, Kind::F32, Kind::F64, Op::Binary, Op::Unary, UnOp::*};
    let r = |name, arity, selector, f64, trig| Routine {
        name,
        arity,
        selector,
        f64,
        trig,
    };
    Some(match op {
        Unary(F64, Exp) => r("offload_f64_exp", 1, None, true, false),
        Unary(F64, Log) => r("offload_f64_log", 1, None, true, false),
        Unary(F64, Sin) => r("offload_f64_sincos", 1, Some(0), true, true),
        Unary(F64, Cos) => r("offload_f64_sincos", 1, Some(1), true, true),
        Binary(F64, Pow) => r("offload_f64_pow", 2, None, true, false),
        Unary(F32, Exp) => r("offload_f32_exp", 1, None, false, false),
        Unary(F32, Log) => r("offload_f32_log", 1, None, false, false),
        Unary(F32, Sin) => r("offload_f32_sin", 1, None, false, true),
        Unary(F32, Cos) => r("offload_f32_cos", 1, None, false, true),
        Binary(F32, Pow) => r("offload_f32_pow", 2, None, false, false),
        _ => return None,
    })
}

/// One `.func` of the library: its name, its text, and what it calls.
struct Def {
    name: &'static str,
    text: &'static str,
    calls: Vec<&'static str>,
}

fn defs() -> Vec<Def> {
    let mut out = Vec::new();
    let mut start = None;
    let mut offset = 0;
    for line in TEXT.split_inclusive('\n') {
        if line.starts_with(".func ") {
            start = Some(offset);
        }
        offset += line.len();
        if line.starts_with('}')
            && let Some(s) = start.take()
        {
            let text = &TEXT[s..offset];
            let header = text.lines().next().unwrap_or("");
            let name = header
                .strip_prefix(".func ")
                .and_then(header_name)
                .unwrap_or("");
            let calls = text
                .lines()
                .filter_map(|l| {
                    let l = l.trim();
                    let rest = l.strip_prefix("call ")?;
                    rest.split(',').nth(1).map(str::trim)
                })
                .collect();
            out.push(Def { name, text, calls });
        }
    }
    out
}

/// `(.reg .f64 %ret) NAME (...)` (a `.func` header after `.func `) → NAME.
fn header_name(rest: &str) -> Option<&str> {
    let after = &rest[rest.find(')')? + 1..];
    after
        .trim()
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
}

/// The definitions of `names` and everything they call, in library order
/// (callees are defined before their callers there, as PTX requires).
pub fn definitions<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let defs = defs();
    let mut want: Vec<&str> = names.into_iter().collect();
    let mut needed = std::collections::BTreeSet::new();
    while let Some(n) = want.pop() {
        if needed.insert(n.to_string())
            && let Some(d) = defs.iter().find(|d| d.name == n)
        {
            want.extend(d.calls.iter().copied());
        }
    }
    defs.iter()
        .filter(|d| needed.contains(d.name))
        .map(|d| d.text)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_routine_is_defined_after_its_callees() {
        let defs = defs();
        assert!(defs.len() >= 13, "{} routines", defs.len());
        for (i, d) in defs.iter().enumerate() {
            for c in &d.calls {
                let j = defs.iter().position(|e| e.name == *c);
                assert!(
                    matches!(j, Some(j) if j < i),
                    "{} calls {c}, not defined before it",
                    d.name
                );
            }
        }
        let pow = definitions(["offload_f64_pow"]);
        assert!(pow.contains("offload_scalbn ") && !pow.contains("offload_f64_exp"));
    }
}
