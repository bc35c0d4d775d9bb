//! The kernels tests and tools share: every example kernel, read from
//! `examples/kernels/` ([`EXAMPLES`], [`example`], [`load_example`]), and
//! small probes of the runtime's guarantees ([`INC_KERNEL`],
//! [`STRESS_KERNEL`], [`SPIN_KERNEL`]).

use offload::{OffloadError, Runtime};

/// The example kernels, compiled into the binary.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "saxpy.obc",
        include_str!("../../examples/kernels/saxpy.obc"),
    ),
    (
        "mandelbrot.obc",
        include_str!("../../examples/kernels/mandelbrot.obc"),
    ),
    (
        "nbody.obc",
        include_str!("../../examples/kernels/nbody.obc"),
    ),
    (
        "blackscholes.obc",
        include_str!("../../examples/kernels/blackscholes.obc"),
    ),
    (
        "matmul.obc",
        include_str!("../../examples/kernels/matmul.obc"),
    ),
    (
        "histogram.obc",
        include_str!("../../examples/kernels/histogram.obc"),
    ),
    (
        "alloc.obc",
        include_str!("../../examples/kernels/alloc.obc"),
    ),
    (
        "linkedlist.obc",
        include_str!("../../examples/kernels/linkedlist.obc"),
    ),
    (
        "shapes.obc",
        include_str!("../../examples/kernels/shapes.obc"),
    ),
    (
        "throws.obc",
        include_str!("../../examples/kernels/throws.obc"),
    ),
    (
        "raycast.obc",
        include_str!("../../examples/kernels/raycast.obc"),
    ),
    (
        "particles.obc",
        include_str!("../../examples/kernels/particles.obc"),
    ),
    (
        "saxpy.ofk",
        include_str!("../../examples/kernels/saxpy.ofk"),
    ),
    (
        "mandelbrot.ofk",
        include_str!("../../examples/kernels/mandelbrot.ofk"),
    ),
    (
        "nbody.ofk",
        include_str!("../../examples/kernels/nbody.ofk"),
    ),
    (
        "blackscholes.ofk",
        include_str!("../../examples/kernels/blackscholes.ofk"),
    ),
    (
        "matmul.ofk",
        include_str!("../../examples/kernels/matmul.ofk"),
    ),
];

/// The exactly-once probe: `out[i] += 1` with a plain load and store, so a
/// workitem run twice (or never) shows in the result. Its deopt sites are the
/// entry (bci 0), the load of `out[j]` (bci 7) and the store (bci 10).
pub const INC_KERNEL: &str = "kernel inc(i: i64, out: i32[]) {
    local j: i32
    load i
    i64.to_i32
    store j
    load out
    load j
    load out
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    ret
}
";

/// The exactly-once stress probe: workitem `i` runs `m` rounds, each
/// allocating an array of `k + 1` ints (so refills, and their failures,
/// happen mid-workitem), adding 1 to `out[i]` through a plain load and
/// store, and adding 1 to `counter[0]` atomically. Under any pattern of
/// deopts, safepoints and refill failures every cell ends at `m` and the
/// counter at `n * m`.
pub const STRESS_KERNEL: &str = "
kernel stress(i: i64, m: i32, out: i32[], counter: i64[]) {
    local k: i32
    local tmp: i32[]
    i32.const 0
    store k
  loop:
    load k
    load m
    i32.ge
    br_if done
    load k
    i32.const 1
    i32.add
    newarray i32
    store tmp
    load out
    load i
    i64.to_i32
    load out
    load i
    i64.to_i32
    i32.aload
    load tmp
    array.len
    load k
    i32.sub
    i32.add
    i32.astore
    load counter
    i32.const 0
    i64.const 1
    i64.array_atomic_add
    pop
    inc k 1
    br loop
  done:
    ret
}
";

/// [`STRESS_KERNEL`] for a launch split over devices, which merges the
/// devices' writes to different elements but not atomics on one word:
/// workitem `i` runs `m` rounds, each allocating an array of `k + 1` ints,
/// adding 1 to `out[i]` and the array's length, read back, to `sums[i]`.
/// Every cell of `out` ends at `m` and of `sums` at `m (m + 1) / 2`.
pub const SPLIT_STRESS_KERNEL: &str = "
kernel stress(i: i64, m: i32, out: i32[], sums: i64[]) {
    local k: i32
    local j: i32
    local tmp: i32[]
    load i
    i64.to_i32
    store j
    i32.const 0
    store k
  loop:
    load k
    load m
    i32.ge
    br_if done
    load k
    i32.const 1
    i32.add
    newarray i32
    store tmp
    load out
    load j
    load out
    load j
    i32.aload
    i32.const 1
    i32.add
    i32.astore
    load sums
    load j
    load sums
    load j
    i64.aload
    load tmp
    array.len
    i32.to_i64
    i64.add
    i64.astore
    inc k 1
    br loop
  done:
    ret
}
";

/// The safepoint probe: workitem `i` adds 1 to `counts[i]` `iters` times in
/// a loop, so back-edge polls are frequent and the count shows a workitem
/// run twice or cut short.
pub const SPIN_KERNEL: &str = "
kernel spin(i: i64, iters: i32, counts: i64[]) {
    local k: i32
    local j: i32
    load i
    i64.to_i32
    store j
    i32.const 0
    store k
  loop:
    load k
    load iters
    i32.ge
    br_if done
    load counts
    load j
    i64.const 1
    i64.array_atomic_add
    pop
    inc k 1
    br loop
  done:
    ret
}
";

/// Load the example `name` on `rt`: its source version (`.ofk`) or its
/// bytecode (`.obc`).
pub fn load_example(rt: &Runtime, name: &str) -> Result<offload::Module, OffloadError> {
    if name.ends_with(".ofk") {
        rt.load_source(name, example(name))
    } else {
        rt.load(name, example(name))
    }
}

/// The source of an example by file name (`saxpy.obc`, `nbody.ofk`).
///
/// # Panics
///
/// If `name` is not one of [`EXAMPLES`].
pub fn example(name: &str) -> &'static str {
    EXAMPLES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .expect("known example")
}
