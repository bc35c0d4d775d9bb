//! Parses PTX files with the virtual GPU and reports, per file, its
//! functions and instructions or the first error with its line:
//! `cargo run -p offload-vgpu --example parse -- FILE...`.

fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        match std::fs::read_to_string(&path) {
            Err(e) => {
                eprintln!("{path}: {e}");
                failed = true;
            }
            Ok(text) => match offload_vgpu::parse(&text) {
                Ok(m) => println!(
                    "{path}: {} functions, {} instructions",
                    m.funcs.len(),
                    m.instruction_count()
                ),
                Err(e) => {
                    eprintln!("{path}: {e}");
                    failed = true;
                }
            },
        }
    }
    if failed {
        std::process::exit(1);
    }
}
