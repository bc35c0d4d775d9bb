fn main() {
    let t = std::fs::read_to_string(std::env::args().nth(1).unwrap()).unwrap();
    match offload_vgpu::parse(&t) {
        Ok(m) => println!(
            "ok: {} funcs, {} insts",
            m.funcs.len(),
            m.instruction_count()
        ),
        Err(e) => println!("{e}"),
    }
}
