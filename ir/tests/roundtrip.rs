//! Round-trips: parse → print → parse gives an equal module, and print → parse
//! → print gives the same text, for every example and for random valid modules.

use arbitrary::Unstructured;
use offload_ir::fuzzgen::{GenConfig, arbitrary_module};
use offload_ir::{parse_module, print_module, verify};
use proptest::prelude::*;
use std::path::PathBuf;

fn examples() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("examples/kernels")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "obc"))
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 10,
        "expected the ten example kernels, found {}",
        out.len()
    );
    out
}

#[test]
fn every_example_verifies_and_round_trips() {
    for (name, src) in examples() {
        let m = parse_module(&name, &src).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = print_module(&m);
        let again =
            parse_module(&name, &text).unwrap_or_else(|e| panic!("{name} printed:\n{text}\n{e}"));
        assert_eq!(again, m, "{name}: print → parse changed the module");
        assert_eq!(
            print_module(&again),
            text,
            "{name}: print is not a fixpoint"
        );
        verify(m).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

fn check_generated(bytes: &[u8], cfg: &GenConfig) -> Result<(), TestCaseError> {
    let mut u = Unstructured::new(bytes);
    let Ok(m) = arbitrary_module(&mut u, cfg) else {
        return Ok(()); // ran out of bytes before making a module
    };
    let text = print_module(&m);
    let verified = verify(m.clone()).map_err(|e| {
        TestCaseError::fail(format!("generated module does not verify: {e}\n{text}"))
    })?;
    let again = parse_module("<printed>", &text)
        .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    prop_assert_eq!(&again, &m, "print → parse changed the module:\n{}", text);
    prop_assert_eq!(print_module(&again), text.clone());
    // Generated code terminates: its only backward branches are the
    // unconditional back-edges of counted loops.
    for f in &m.funcs {
        for (bci, i) in f.body.iter().enumerate() {
            if let Some(t) = i.target().filter(|&t| t as usize <= bci) {
                prop_assert!(
                    matches!(i, offload_ir::Inst::Br { .. }),
                    "conditional backward branch {bci} -> {t} in {}:\n{}",
                    f.name,
                    text
                );
            }
        }
    }
    // The analyses run on everything the generator makes.
    for f in (0..verified.funcs.len()).map(offload_ir::FuncId::new) {
        let a = offload_ir::analysis::analyze(&verified, f);
        prop_assert!(
            a.sites.first().is_some_and(|s| s.bci == 0 && s.poll),
            "entry is always a poll site"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_valid_modules_round_trip(bytes in proptest::collection::vec(any::<u8>(), 64..4096)) {
        check_generated(&bytes, &GenConfig::default())?;
    }

    #[test]
    fn splittable_modules_round_trip_and_keep_to_their_kind(
        bytes in proptest::collection::vec(any::<u8>(), 64..4096)
    ) {
        check_generated(&bytes, &GenConfig::splittable(5))?;
        let Ok(m) = arbitrary_module(&mut Unstructured::new(&bytes), &GenConfig::splittable(5)) else {
            return Ok(());
        };
        prop_assert!(m.classes.is_empty());
        for f in &m.funcs {
            let kernel = f.kind == offload_ir::module::FuncKind::Kernel;
            for i in &f.body {
                let op = i.opcode();
                prop_assert!(
                    !op.hazards().has(offload_ir::isa::hz::ALLOCATES),
                    "{} allocates: {:?}", f.name, op
                );
                let atomic = matches!(
                    i,
                    offload_ir::Inst::I32ArrayAtomicAdd
                        | offload_ir::Inst::I64ArrayAtomicAdd
                        | offload_ir::Inst::I32ArrayCmpxchg
                        | offload_ir::Inst::I64ArrayCmpxchg
                );
                prop_assert!(!atomic, "{} uses atomics", f.name);
                // The workitem number stays what the launch gave.
                let sets_workitem = matches!(
                    i,
                    offload_ir::Inst::Store { local } | offload_ir::Inst::Inc { local, .. }
                        if local.index() == 0
                );
                prop_assert!(!(kernel && sets_workitem), "{} assigns its workitem", f.name);
            }
            if !kernel {
                prop_assert!(f.params().iter().all(|p| !matches!(p.ty, offload_ir::Type::Array(..))));
            }
        }
    }
}

#[test]
fn the_generator_makes_rich_modules() {
    // Guard against a generator that silently degenerates to empty kernels.
    let mut total = 0;
    let mut with_classes = 0;
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..64 {
        let bytes: Vec<u8> = (0..4096)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let m = arbitrary_module(&mut Unstructured::new(&bytes), &GenConfig::default())
            .expect("enough bytes");
        total += m.funcs.iter().map(|f| f.body.len()).sum::<usize>();
        with_classes += usize::from(!m.classes.is_empty());
        verify(m).expect("generated modules verify");
    }
    assert!(
        total > 64 * 20,
        "generated bodies are too small: {total} instructions in 64 modules"
    );
    assert!(
        with_classes > 16,
        "too few modules with classes: {with_classes}"
    );
}
