//! The instruction set as a user reads it: stack effects in words
//! (`[i32 i32] -> [i32]`), and the offload name for the JVM mnemonics
//! people guess first (`iadd` → `i32.add`). `offload isa` prints the table
//! from [`crate::isa`]; the assembler's "unknown instruction" error uses
//! [`jvm_equivalent`].

use crate::isa::{Effect, Sig};
use crate::types::Elem;
use std::fmt;

/// `i32`, `ref`, `array`, `f64[]`, `ref[]` (a class's element type has no
/// name without its module: `ref[]`).
impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let elem = |e: &Elem| match e {
            Elem::I32 => "i32",
            Elem::I64 => "i64",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
            Elem::Ref | Elem::Class(_) => "ref",
        };
        match self {
            Sig::I32 => f.write_str("i32"),
            Sig::I64 => f.write_str("i64"),
            Sig::F32 => f.write_str("f32"),
            Sig::F64 => f.write_str("f64"),
            Sig::Ref => f.write_str("ref"),
            Sig::Array => f.write_str("array"),
            Sig::ArrayOf(e) => write!(f, "{}[]", elem(e)),
        }
    }
}

/// `[i32 i32] -> [i32]` (bottom of the stack first), or the table's
/// description when the effect depends on operands or types.
impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |s: &[Sig]| s.iter().map(Sig::to_string).collect::<Vec<_>>().join(" ");
        match self {
            Effect::Fixed { pops, pushes } => write!(f, "[{}] -> [{}]", list(pops), list(pushes)),
            Effect::Special(s) => f.write_str(s),
        }
    }
}

/// JVM mnemonics and what offload calls the same operation: its
/// instructions in backquotes, in a short phrase where it takes two.
const JVM: &[(&str, &str)] = &[
    ("iload", "`load`"),
    ("lload", "`load`"),
    ("fload", "`load`"),
    ("dload", "`load`"),
    ("aload", "`load`"),
    ("istore", "`store`"),
    ("lstore", "`store`"),
    ("fstore", "`store`"),
    ("dstore", "`store`"),
    ("astore", "`store`"),
    ("iconst", "`i32.const`"),
    ("bipush", "`i32.const`"),
    ("sipush", "`i32.const`"),
    ("lconst", "`i64.const`"),
    ("fconst", "`f32.const`"),
    ("dconst", "`f64.const`"),
    (
        "ldc",
        "`i32.const`, `i64.const`, `f32.const` or `f64.const`",
    ),
    (
        "ldc_w",
        "`i32.const`, `i64.const`, `f32.const` or `f64.const`",
    ),
    ("ldc2_w", "`i64.const` or `f64.const`"),
    ("aconst_null", "`ref.null`"),
    ("iinc", "`inc`"),
    ("iadd", "`i32.add`"),
    ("isub", "`i32.sub`"),
    ("imul", "`i32.mul`"),
    ("idiv", "`i32.div`"),
    ("irem", "`i32.rem`"),
    ("ineg", "`i32.neg`"),
    ("iand", "`i32.and`"),
    ("ior", "`i32.or`"),
    ("ixor", "`i32.xor`"),
    ("ishl", "`i32.shl`"),
    ("ishr", "`i32.shr`"),
    ("iushr", "`i32.ushr`"),
    ("ladd", "`i64.add`"),
    ("lsub", "`i64.sub`"),
    ("lmul", "`i64.mul`"),
    ("ldiv", "`i64.div`"),
    ("lrem", "`i64.rem`"),
    ("lneg", "`i64.neg`"),
    ("land", "`i64.and`"),
    ("lor", "`i64.or`"),
    ("lxor", "`i64.xor`"),
    ("lshl", "`i64.shl`"),
    ("lshr", "`i64.shr`"),
    ("lushr", "`i64.ushr`"),
    ("fadd", "`f32.add`"),
    ("fsub", "`f32.sub`"),
    ("fmul", "`f32.mul`"),
    ("fdiv", "`f32.div`"),
    ("frem", "`f32.rem`"),
    ("fneg", "`f32.neg`"),
    ("dadd", "`f64.add`"),
    ("dsub", "`f64.sub`"),
    ("dmul", "`f64.mul`"),
    ("ddiv", "`f64.div`"),
    ("drem", "`f64.rem`"),
    ("dneg", "`f64.neg`"),
    ("i2l", "`i32.to_i64`"),
    ("i2f", "`i32.to_f32`"),
    ("i2d", "`i32.to_f64`"),
    ("l2i", "`i64.to_i32`"),
    ("l2f", "`i64.to_f32`"),
    ("l2d", "`i64.to_f64`"),
    ("f2i", "`f32.to_i32`"),
    ("f2l", "`f32.to_i64`"),
    ("f2d", "`f32.to_f64`"),
    ("d2i", "`f64.to_i32`"),
    ("d2l", "`f64.to_i64`"),
    ("d2f", "`f64.to_f32`"),
    (
        "lcmp",
        "`i64.eq`, `i64.lt` and the other `i64` comparisons (they push 0 or 1)",
    ),
    (
        "fcmpl",
        "`f32.eq`, `f32.lt` and the other `f32` comparisons (they push 0 or 1)",
    ),
    (
        "fcmpg",
        "`f32.eq`, `f32.lt` and the other `f32` comparisons (they push 0 or 1)",
    ),
    (
        "dcmpl",
        "`f64.eq`, `f64.lt` and the other `f64` comparisons (they push 0 or 1)",
    ),
    (
        "dcmpg",
        "`f64.eq`, `f64.lt` and the other `f64` comparisons (they push 0 or 1)",
    ),
    ("ifeq", "`br_unless`"),
    ("ifne", "`br_if`"),
    ("iflt", "`i32.const 0`, `i32.lt` and `br_if`"),
    ("ifge", "`i32.const 0`, `i32.ge` and `br_if`"),
    ("ifgt", "`i32.const 0`, `i32.gt` and `br_if`"),
    ("ifle", "`i32.const 0`, `i32.le` and `br_if`"),
    ("if_icmpeq", "`i32.eq` and `br_if`"),
    ("if_icmpne", "`i32.ne` and `br_if`"),
    ("if_icmplt", "`i32.lt` and `br_if`"),
    ("if_icmpge", "`i32.ge` and `br_if`"),
    ("if_icmpgt", "`i32.gt` and `br_if`"),
    ("if_icmple", "`i32.le` and `br_if`"),
    ("if_acmpeq", "`ref.eq` and `br_if`"),
    ("if_acmpne", "`ref.ne` and `br_if`"),
    ("ifnull", "`br_null`"),
    ("ifnonnull", "`br_nonnull`"),
    ("goto", "`br`"),
    ("goto_w", "`br`"),
    ("iaload", "`i32.aload`"),
    ("laload", "`i64.aload`"),
    ("faload", "`f32.aload`"),
    ("daload", "`f64.aload`"),
    ("aaload", "`ref.aload`"),
    ("iastore", "`i32.astore`"),
    ("lastore", "`i64.astore`"),
    ("fastore", "`f32.astore`"),
    ("dastore", "`f64.astore`"),
    ("aastore", "`ref.astore`"),
    ("arraylength", "`array.len`"),
    ("anewarray", "`newarray`"),
    ("multianewarray", "`newarray`"),
    ("invokevirtual", "`callvirt`"),
    ("invokeinterface", "`callvirt`"),
    ("invokestatic", "`call`"),
    ("invokespecial", "`call`"),
    ("ireturn", "`ret`"),
    ("lreturn", "`ret`"),
    ("freturn", "`ret`"),
    ("dreturn", "`ret`"),
    ("areturn", "`ret`"),
    ("return", "`ret`"),
    ("athrow", "`throw`"),
    ("pop2", "`pop`"),
];

/// What offload calls the JVM's `mnemonic` (`iadd` → "`i32.add`",
/// `iload_1` → "`load`"), instructions in backquotes; `None` for a name
/// the JVM does not have or offload has no counterpart for.
pub fn jvm_equivalent(mnemonic: &str) -> Option<&'static str> {
    let m = mnemonic.to_ascii_lowercase();
    // `iload_0`, `iconst_m1`, `fconst_2`, ...: the family's name.
    let base = match m.rsplit_once('_') {
        Some((b, n)) if n == "m1" || n.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => m.as_str(),
    };
    JVM.iter()
        .find(|(j, _)| *j == m || *j == base)
        .map(|(_, o)| *o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::Opcode;

    #[test]
    fn every_jvm_equivalent_names_offload_instructions() {
        for (jvm, text) in JVM {
            // Each backquoted name in the text is an instruction (or a
            // type, in the comparisons' phrase).
            assert!(text.starts_with('`'), "{jvm}: {text}");
            for (i, part) in text.split('`').enumerate() {
                if i % 2 == 1 && !["i32", "i64", "f32", "f64"].contains(&part) {
                    let name = part.split([' ', ',']).next().unwrap_or("");
                    assert!(
                        Opcode::from_mnemonic(name).is_some(),
                        "{jvm}: `{name}` is not an offload instruction"
                    );
                }
            }
        }
    }

    #[test]
    fn jvm_families_and_numbered_forms() {
        assert_eq!(jvm_equivalent("iadd"), Some("`i32.add`"));
        assert_eq!(jvm_equivalent("ILOAD_3"), Some("`load`"));
        assert_eq!(jvm_equivalent("iconst_m1"), Some("`i32.const`"));
        assert_eq!(jvm_equivalent("invokevirtual"), Some("`callvirt`"));
        assert_eq!(jvm_equivalent("i32.add"), None);
        assert_eq!(jvm_equivalent("frobnicate"), None);
    }

    #[test]
    fn effects_read_as_stack_pictures() {
        assert_eq!(Opcode::I32Add.effect().to_string(), "[i32 i32] -> [i32]");
        assert_eq!(
            Opcode::F32ALoad.effect().to_string(),
            "[f32[] i32] -> [f32]"
        );
        assert_eq!(Opcode::Dup.effect().to_string(), "[T] -> [T T]");
    }
}
