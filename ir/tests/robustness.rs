//! Robustness: arbitrary text to the assembler and arbitrary instruction
//! sequences to the verifier never panic (and, being finished, never hang).

use arbitrary::Unstructured;
use offload_ir::fuzzgen::arbitrary_insts;
use offload_ir::isa::Label;
use offload_ir::{Inst, analysis, parse_module, print_module, verify};
use proptest::prelude::*;

/// Assemble, verify, and when it verifies, check the round trip and analyses.
fn exercise(src: &str) {
    if let Ok(m) = parse_module("<fuzz>", src) {
        let text = print_module(&m);
        let again = parse_module("<printed>", &text).expect("printed text parses");
        assert_eq!(again, m);
        if let Ok(v) = verify(m) {
            for f in (0..v.funcs.len()).map(offload_ir::FuncId::new) {
                let _ = analysis::analyze(&v, f);
            }
        }
    }
}

const VOCAB: &[&str] = &[
    "kernel",
    "func",
    "class",
    "extends",
    "field",
    "method",
    "abstract",
    "local",
    "k",
    "f",
    "A",
    "B",
    "x",
    "i",
    "(",
    ")",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
    "->",
    "\n",
    "\n",
    "\n",
    " ",
    "i32",
    "i64",
    "f32",
    "f64",
    "ref",
    "load",
    "store",
    "i32.const",
    "1",
    "-7",
    "0x10",
    "nan",
    "inf",
    "1.5e3",
    "ret",
    "i32.add",
    "br",
    "br_if",
    "L",
    "L:",
    "new",
    "getfield",
    "A.x",
    "call",
    "callvirt",
    "A.m",
    "throw",
    "NullPointer",
    "dup",
    "pop",
    "swap",
    "inc",
    "newarray",
    "i32.aload",
    ";",
    "@",
    "\"",
    "é",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_strings_never_panic(s in "\\PC{0,400}") {
        exercise(&s);
    }

    #[test]
    fn token_soup_never_panics(words in proptest::collection::vec(proptest::sample::select(VOCAB), 0..200)) {
        exercise(&words.join(" "));
    }

    #[test]
    fn arbitrary_instructions_never_panic_the_verifier(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        if let Ok(m) = arbitrary_insts(&mut Unstructured::new(&bytes)) {
            let _ = print_module(&m);
            if let Ok(v) = verify(m) {
                for f in (0..v.funcs.len()).map(offload_ir::FuncId::new) {
                    let _ = analysis::analyze(&v, f);
                }
            }
        }
    }

    #[test]
    fn mutated_examples_never_panic(seed in any::<u64>(), edits in 1usize..6) {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "obc"))
            .collect();
        files.sort();
        let src = std::fs::read_to_string(&files[(seed % files.len() as u64) as usize]).unwrap();
        let mut lines: Vec<&str> = src.lines().collect();
        let mut s = seed;
        for _ in 0..edits {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let a = (s >> 33) as usize % lines.len().max(1);
            let b = (s >> 13) as usize % lines.len().max(1);
            match s % 3 {
                0 if !lines.is_empty() => { lines.remove(a); }
                1 if !lines.is_empty() => { let l = lines[a]; lines.insert(b, l); }
                _ if !lines.is_empty() => lines.swap(a, b),
                _ => {}
            }
        }
        exercise(&lines.join("\n"));
    }
}

#[test]
fn programmatic_bad_branch_target_is_rejected() {
    let mut m = parse_module("t.obc", "kernel k(i: i64) {\n  top:\n    br top\n}\n").unwrap();
    m.funcs[0].body[0] = Inst::Br { target: Label(7) };
    let e = verify(m).unwrap_err();
    assert_eq!(e.0.len(), 1);
    assert!(e.0[0].message.contains("branch target out of range"), "{e}");
    assert_eq!(e.0[0].bci, Some(0));
    assert_eq!(e.0[0].found.as_deref(), Some("7"));
}

#[test]
fn programmatic_dangling_ids_are_rejected_not_panics() {
    let mut m = parse_module("t.obc", "kernel k(i: i64) {\n    ret\n}\n").unwrap();
    m.funcs[0].body.insert(
        0,
        Inst::Call {
            func: offload_ir::FuncId(9),
        },
    );
    assert!(
        verify(m.clone())
            .unwrap_err()
            .to_string()
            .contains("function 9 does not exist")
    );
    m.funcs[0].body[0] = Inst::Load {
        local: offload_ir::LocalId(5),
    };
    assert!(
        verify(m.clone())
            .unwrap_err()
            .to_string()
            .contains("local 5 does not exist")
    );
    m.funcs[0].body[0] = Inst::New {
        class: offload_ir::ClassId(0),
    };
    assert!(
        verify(m.clone())
            .unwrap_err()
            .to_string()
            .contains("class 0 does not exist")
    );
    m.funcs[0].locals[0].ty = offload_ir::Type::Class(offload_ir::ClassId(3));
    assert!(verify(m).unwrap_err().to_string().contains("invalid type"));
}

#[test]
fn every_error_is_reported_across_functions() {
    let src = "func a() -> i32 {\n    ret\n}\n\nfunc b() {\n    f32.add\n    ret\n}\n\nkernel k(x: i32) {\n    ret\n}\n";
    let e = parse_module("t.obc", src).and_then(verify).unwrap_err();
    // The kernel-signature rule is module-level and reported on its own first.
    assert_eq!(e.0.len(), 1, "{e}");
    let src = "func a() -> i32 {\n    ret\n}\n\nfunc b() {\n    f32.add\n    ret\n}\n";
    let e = parse_module("t.obc", src).and_then(verify).unwrap_err();
    let lines: Vec<u32> = e.0.iter().map(|d| d.span.line).collect();
    assert_eq!(lines, vec![2, 6], "{e}");
}
