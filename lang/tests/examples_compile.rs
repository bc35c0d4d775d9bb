//! Every example's source version compiles and verifies.

#[test]
fn every_example_source_compiles_and_verifies() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/kernels");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "ofk") {
            let src = std::fs::read_to_string(&p).unwrap();
            if let Err(d) = offload_lang::compile_verified(&p.display().to_string(), &src) {
                panic!("{d}");
            }
            n += 1;
        }
    }
    assert!(n >= 11, "{n} sources");
}
