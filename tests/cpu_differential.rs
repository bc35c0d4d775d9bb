//! Random valid kernels (loops, branches, arithmetic of every type, arrays,
//! allocation, calls, virtual calls, exceptions) on the CPU device and on
//! the interpreter, with the same inputs: the same heap contents and the
//! same exceptions (see `offload_testkit::differential`; the `jit_differential`
//! cargo-fuzz target runs the same comparison at length).

use offload::ir::print_module;
use offload_testkit::differential::Differ;
use offload_testkit::reference::Rng;

#[path = "common/programs.rs"]
mod programs;

#[test]
fn random_kernels_agree_between_the_cpu_device_and_the_interpreter() {
    let differ = Differ::new().unwrap();
    let mut rng = Rng::new(77);
    let (mut compared, mut compiled) = (0, 0);
    for case in 0..400 {
        let Some(module) = programs::generate(&mut rng) else {
            continue;
        };
        let text = print_module(&module);
        match differ.compare(&text, rng.next_u64()) {
            Ok(c) => {
                compared += c.kernels;
                compiled += c.compiled;
            }
            Err(why) => panic!("case {case}: {why}"),
        }
    }
    assert!(compared > 300, "only {compared} kernels compared");
    // Every generated kernel compiles (calls are inlined, allocation and
    // type tests are compiled); none may silently fall back.
    assert!(
        compiled * 10 >= compared * 9,
        "only {compiled} of {compared} ran natively"
    );
    eprintln!("{compared} kernels compared, {compiled} compiled by the JIT");
}

/// Kernels whose null checks and write barriers the reference analysis
/// (`offload::ir::refs`) drops in some places and must keep in others:
/// a reference null on some paths of a join (in a local and on the
/// stack), a local reassigned between a test and its use, a copy of the old value kept on the stack, a test on
/// one branch only, fresh objects linked into each other and into an array
/// of the caller's. Each workitem takes a different path (`i % 4`), so the
/// CPU device (both tiers) must throw exactly where the interpreter does.
#[test]
fn null_checks_and_barriers_the_analysis_drops_agree_with_the_interpreter() {
    const KERNELS: &str = "
class C {
    field x: i32
    field n: C
}

kernel join_null(i: i64, out: i32[]) {
    local c: C
    ref.null
    store c
    load i
    i64.const 4
    i64.rem
    i64.const 0
    i64.eq
    br_if skip
    new C
    store c
  skip:
    load c
    i32.const 7
    putfield C.x
    load out
    load i
    i64.to_i32
    load c
    getfield C.x
    i32.astore
    ret
}

kernel reassigned(i: i64, out: i32[]) {
    local c: C
    local d: C
    new C
    store c
    load c
    br_null done
    load i
    i64.const 2
    i64.rem
    i64.const 0
    i64.eq
    br_unless keep
    load c
    getfield C.n
    store c
  keep:
    load out
    load i
    i64.to_i32
    load c
    getfield C.x
    i32.astore
  done:
    ret
}

kernel old_copy(i: i64, out: i32[]) {
    local c: C
    new C
    store c
    load c
    load i
    i64.const 3
    i64.rem
    i64.const 1
    i64.eq
    br_if nulled
    new C
    store c
    br go
  nulled:
    ref.null
    store c
  go:
    i32.const 5
    putfield C.x
    load c
    dup
    br_nonnull has
    pop
    ret
  has:
    getfield C.x
    load out
    swap
    load i
    i64.to_i32
    swap
    i32.astore
    ret
}

kernel stack_join(i: i64, out: i32[]) {
    load out
    load i
    i64.to_i32
    load i
    i64.const 3
    i64.rem
    i64.const 0
    i64.eq
    br_if none
    new C
    br got
  none:
    ref.null
  got:
    getfield C.x
    i32.astore
    ret
}

kernel linked(i: i64, out: i32[]) {
    local a: C
    local b: C
    local k: i32
    new C
    store a
    i32.const 0
    store k
  loop:
    load k
    load i
    i64.to_i32
    i32.const 4
    i32.rem
    i32.ge
    br_if walk
    new C
    store b
    load b
    load a
    putfield C.n
    load b
    load k
    putfield C.x
    load b
    store a
    inc k 1
    br loop
  walk:
    load a
    getfield C.n
    getfield C.n
    getfield C.x
    load out
    swap
    load i
    i64.to_i32
    swap
    i32.astore
    ret
}
";
    let differ = Differ::new().unwrap();
    for seed in 0..8 {
        let c = differ
            .compare(KERNELS, seed)
            .unwrap_or_else(|why| panic!("seed {seed}: {why}"));
        assert_eq!(c.kernels, 5, "every kernel ran");
        assert_eq!(c.compiled, 5, "every kernel compiled");
    }
}
