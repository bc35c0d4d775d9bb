//! Arbitrary, mostly invalid, instruction sequences with arbitrary
//! operands ([`arbitrary_insts`]): for checking that the verifier rejects
//! garbage without panicking. The valid modules are the parent's.

use crate::isa::{Inst, Label};
use crate::module::Module;
use crate::types::{ClassId, Elem, ExceptionKind, F32, F64, FieldId, FuncId, LocalId, Type};
use arbitrary::{Result, Unstructured};

/// An arbitrary instruction, operands included (ids may be out of range).
fn arbitrary_inst(u: &mut Unstructured<'_>, body_len: u32) -> Result<Inst> {
    struct R<'a, 'b>(&'a mut Unstructured<'b>, u32);
    impl crate::isa::OperandReader for R<'_, '_> {
        type Error = arbitrary::Error;
        fn read_i32(&mut self) -> Result<i32> {
            self.0.arbitrary()
        }
        fn read_i64(&mut self) -> Result<i64> {
            self.0.arbitrary()
        }
        fn read_f32(&mut self) -> Result<F32> {
            Ok(F32(self.0.arbitrary()?))
        }
        fn read_f64(&mut self) -> Result<F64> {
            Ok(F64(self.0.arbitrary()?))
        }
        fn read_local(&mut self) -> Result<LocalId> {
            Ok(LocalId(self.0.int_in_range(0..=6)?))
        }
        fn read_label(&mut self) -> Result<Label> {
            Ok(Label(self.0.int_in_range(0..=self.1 + 1)?))
        }
        fn read_type(&mut self) -> Result<Type> {
            let base = *self.0.choose(&[
                Elem::I32,
                Elem::I64,
                Elem::F32,
                Elem::F64,
                Elem::Ref,
                Elem::Class(ClassId(0)),
                Elem::Class(ClassId(7)),
            ])?;
            Ok(match self.0.int_in_range(0..=10u8)? {
                0 => base.to_type(),
                9 => Type::Null,
                d => Type::Array(base, d - 1),
            })
        }
        fn read_class(&mut self) -> Result<ClassId> {
            Ok(ClassId(self.0.int_in_range(0..=3)?))
        }
        fn read_field(&mut self) -> Result<FieldId> {
            Ok(FieldId(self.0.int_in_range(0..=3)?))
        }
        fn read_func(&mut self) -> Result<FuncId> {
            Ok(FuncId(self.0.int_in_range(0..=3)?))
        }
        fn read_exception(&mut self) -> Result<ExceptionKind> {
            Ok(*self.0.choose(&ExceptionKind::ALL)?)
        }
    }
    let op = *u.choose(crate::isa::Opcode::ALL)?;
    op.read_operands(&mut R(u, body_len))
}

/// A small module whose functions hold arbitrary instruction sequences with
/// arbitrary operands: almost always invalid. The verifier must reject it (or
/// accept it) without panicking or hanging.
pub fn arbitrary_insts(u: &mut Unstructured<'_>) -> Result<Module> {
    let mut src = String::from(
        "class A {\n    field x: i32\n    field y: A\n}\nclass B extends A {\n    field z: f64\n    method m(a: i32) -> i32 {\n        load a\n        ret\n    }\n}\nfunc f(a: i32, b: f32) -> i32 {\n    load a\n    ret\n}\n",
    );
    src.push_str("kernel k(i: i64, xs: i32[], o: A) {\n    local p: i32\n    local q: f64\n    local r: B\n    ret\n}\n");
    let mut m = crate::parser::parse_module("<arbitrary>", &src).expect("fixed prelude parses");
    for f in 0..m.funcs.len() {
        let n: u32 = u.int_in_range(0..=24)?;
        let mut body = Vec::with_capacity(n as usize);
        for _ in 0..n {
            body.push(arbitrary_inst(u, n)?);
        }
        m.funcs[f].body = body;
        m.funcs[f].debug.inst_spans.clear();
    }
    Ok(m)
}
