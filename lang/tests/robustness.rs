//! The source front end on mutated kernels: whatever the text, `compile`
//! returns (a module or diagnostics) — never a panic, an abort or a hang.
//! A smoke run of what the `source` cargo-fuzz target does at length
//! (`fuzz/fuzz_targets/source.rs`), over mutations of the example kernels:
//! bytes deleted, spans duplicated or moved, brackets, operators and
//! keywords inserted, and nesting far past the front end's limits.

use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    "-",
    "!",
    "+ 1",
    "* 2",
    "&&",
    "<<",
    "..",
    ";",
    ",",
    "=",
    "if",
    "else",
    "while",
    "for",
    "loop",
    "break",
    "return",
    "let",
    "mut",
    "fn",
    "struct",
    "impl",
    "self",
    "as",
    "i64",
    "f32",
    "[f32]",
    "&mut",
    "Option<",
    ">",
    "'a",
    "\"",
    "'x'",
    "/*",
    "*/",
    "//",
    "\n",
    "0x",
    "1e40",
    "9999999999999999999999",
    "#[kernel]",
    "::",
];

fn mutate(rng: &mut Rng, src: &str) -> String {
    let mut s: Vec<u8> = src.as_bytes().to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(s.len() + 1);
        match rng.below(6) {
            0 if !s.is_empty() => {
                let end = (at + 1 + rng.below(16)).min(s.len());
                s.drain(at.min(end)..end);
            }
            1 if !s.is_empty() => {
                let a = rng.below(s.len());
                let b = (a + 1 + rng.below(64)).min(s.len());
                let piece = s[a..b].to_vec();
                s.splice(at..at, piece);
            }
            2 => {
                let piece = PIECES[rng.below(PIECES.len())];
                s.splice(at..at, piece.bytes());
            }
            3 => {
                // Nesting or repetition far past the limits.
                let n = [10, 900, 1_100, 5_000][rng.below(4)];
                let (open, close) =
                    [("(", ")"), ("{", "}"), ("- ", ""), ("1 + ", "")][rng.below(4)];
                let text = format!("{}{}", open.repeat(n), close.repeat(n));
                s.splice(at..at, text.bytes());
            }
            4 if !s.is_empty() => {
                let i = at.min(s.len() - 1);
                let set = b" ()[]{};:,.+-*/%!&|^<>=#'\"\\\nZ";
                s[i] = set[rng.below(set.len())];
            }
            _ => {}
        }
    }
    String::from_utf8_lossy(&s).into_owned()
}

#[test]
fn mutated_kernels_get_a_module_or_diagnostics_never_a_crash() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/kernels");
    let mut sources: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            (p.extension()? == "ofk").then(|| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
        })
        .collect();
    sources.sort();
    assert!(sources.len() >= 10, "the example kernels: {dir:?}");
    let mut rng = Rng(0x5eed_0ff1_0ad5);
    let t = Instant::now();
    let (mut runs, mut compiled) = (0u64, 0u64);
    while t.elapsed() < Duration::from_millis(1500) {
        let (name, src) = &sources[rng.below(sources.len())];
        let text = mutate(&mut rng, src);
        let r = std::panic::catch_unwind(|| offload_lang::compile_verified(name, &text));
        match r {
            Ok(Ok(_)) => compiled += 1,
            Ok(Err(d)) => assert!(!d.0.is_empty(), "{name}: an error without a diagnostic"),
            Err(_) => panic!("{name}: the front end panicked on:\n{text}"),
        }
        runs += 1;
    }
    eprintln!("{runs} mutants, {compiled} compiled");
    assert!(runs >= 20, "only {runs} mutants in the time");
    // Some mutants still compile (the mutations are not all fatal).
    assert!(compiled > 0, "{runs} mutants, none compiled");
}
