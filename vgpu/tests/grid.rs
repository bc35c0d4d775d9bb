//! Launches on the simulated grid: memory in every space, checked accesses
//! (illegal and misaligned addresses name the kernel, line, thread and
//! address), atomics under interleaving, the seeded scheduler (the same
//! seed replays a run; spin-waits make progress), barriers, the
//! instruction budget, and the simulator's speed.

use offload_vgpu::mem::{Backing, Kind, Region};
use offload_vgpu::{Dims, Error, FaultKind, SimOptions, launch, parse};
use std::sync::Arc;

const HEAD: &str = ".version 6.3\n.target sm_70\n.address_size 64\n";

fn dims(blocks: u32, threads: u32) -> Dims {
    Dims {
        grid: [blocks, 1, 1],
        block: [threads, 1, 1],
        shared_bytes: 0,
    }
}

/// A device buffer of `n` u64 words, and the region that exposes it.
fn buffer(n: usize) -> (Arc<Backing>, Region) {
    let b = Backing::new(n * 8).unwrap();
    let r = Region {
        kind: Kind::Device,
        backing: b.clone(),
    };
    (b, r)
}

fn words(b: &Backing, n: usize) -> Vec<u64> {
    let mut bytes = vec![0u8; n * 8];
    b.read(0, &mut bytes);
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs kernel `k` of `src` with one pointer parameter.
fn run1(
    src: &str,
    d: Dims,
    arg: u64,
    regions: Vec<Region>,
    opts: &SimOptions,
) -> Result<offload_vgpu::LaunchStats, Error> {
    let m = parse(&format!("{HEAD}{src}")).unwrap_or_else(|e| panic!("{e}"));
    let f = m.func_index("k").unwrap();
    launch(&m, f, d, &arg.to_le_bytes(), regions, None, opts)
}

/// Each thread atomically takes a ticket and stores it at its index.
const TICKETS: &str = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r3, %r0, %r1, %r2;
    atom.global.add.u64 %rd1, [%rd0], 1;
    mul.wide.u32 %rd2, %r3, 8;
    add.u64 %rd3, %rd0, %rd2;
    st.global.u64 [%rd3+8], %rd1;
    ret;
}
";

#[test]
fn atomics_hand_out_every_ticket_once_and_a_seed_replays_the_order() {
    let order = |seed: u64| {
        let (b, r) = buffer(1 + 256);
        let opts = SimOptions {
            seed,
            quantum: 3,
            ..SimOptions::default()
        };
        run1(TICKETS, dims(4, 64), b.addr(), vec![r], &opts).unwrap();
        let w = words(&b, 257);
        assert_eq!(w[0], 256);
        let mut t = w[1..].to_vec();
        let got = t.clone();
        t.sort_unstable();
        assert_eq!(t, (0..256).collect::<Vec<_>>(), "every ticket exactly once");
        got
    };
    assert_eq!(order(5), order(5), "the same seed, the same interleaving");
    assert_ne!(order(5), order(6), "another seed, another interleaving");
}

#[test]
fn a_store_outside_every_allocation_is_an_illegal_address_with_its_line() {
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %tid.x;
    st.u32 [%rd0+64], %r0;
    ret;
}
";
    let (b, r) = buffer(8); // 64 bytes: [p + 64] is one past the end
    let e = run1(src, dims(1, 32), b.addr(), vec![r], &SimOptions::default()).unwrap_err();
    let Error::Launch(f) = &e else { panic!("{e}") };
    assert_eq!(f.kind, FaultKind::IllegalAddress);
    assert_eq!(f.kernel, "k");
    assert_eq!(f.line, 11, "{e}");
    assert_eq!(f.addr, b.addr() + 64);
    let msg = e.to_string();
    assert!(
        msg.contains("st.u32 [%rd0+64], %r0;") && msg.contains("thread ("),
        "{msg}"
    );
    // Straddling the end is outside too.
    let src = src
        .replace("[%rd0+64]", "[%rd0+62]")
        .replace("st.u32", "st.u16");
    let e = run1(
        &src,
        dims(1, 1),
        b.addr(),
        vec![buffer(8).1],
        &SimOptions::default(),
    );
    assert!(matches!(e, Err(Error::Launch(f)) if f.kind == FaultKind::IllegalAddress));
}

#[test]
fn a_misaligned_access_is_reported_as_such() {
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<2>;
    ld.param.u64 %rd0, [p];
    ld.u64 %rd1, [%rd0+4];
    ret;
}
";
    let (b, r) = buffer(8);
    let e = run1(src, dims(1, 1), b.addr(), vec![r], &SimOptions::default()).unwrap_err();
    let Error::Launch(f) = &e else { panic!("{e}") };
    assert_eq!(f.kind, FaultKind::MisalignedAddress, "{e}");
    assert!(e.to_string().contains("8-byte access"), "{e}");
}

#[test]
fn a_spin_wait_makes_progress_and_barriers_wait_for_the_block() {
    // Thread 0 spins (with nanosleep) until the last thread raises a flag;
    // then every thread meets at a barrier and adds to a counter through
    // shared memory.
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .pred %p<3>;
    .shared .align 8 .b64 sum;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %tid.x;
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra not_first;
wait:
    nanosleep.u32 10;
    ld.acquire.gpu.u64 %rd1, [%rd0];
    setp.eq.u64 %p1, %rd1, 0;
    @%p1 bra wait;
not_first:
    setp.ne.u32 %p2, %r0, 63;
    @%p2 bra meet;
    st.release.gpu.u64 [%rd0], 1;
meet:
    bar.sync 0;
    atom.shared.add.u64 %rd2, [sum], 1;
    bar.sync 0;
    ld.shared.u64 %rd3, [sum];
    st.u64 [%rd0+8], %rd3;
    ret;
}
";
    for seed in 0..8 {
        let (b, r) = buffer(2);
        let opts = SimOptions {
            seed,
            ..SimOptions::default()
        };
        run1(src, dims(1, 64), b.addr(), vec![r], &opts).unwrap();
        assert_eq!(words(&b, 2), vec![1, 64], "seed {seed}");
    }
}

#[test]
fn local_const_and_param_spaces_hold_their_values() {
    let src = "
.const .align 8 .u64 table[2] = {40, 2};
.visible .entry k(.param .u64 p, .param .u32 add)
{
    .reg .b64 %rd<6>;
    .reg .b32 %r<2>;
    .local .align 8 .b64 tmp[2];
    ld.param.u64 %rd0, [p];
    ld.param.u32 %r0, [add];
    ld.const.u64 %rd1, [table];
    ld.const.u64 %rd2, [table+8];
    st.local.u64 [tmp+8], %rd2;
    ld.local.u64 %rd3, [tmp+8];
    add.u64 %rd4, %rd1, %rd3;
    cvt.u64.u32 %rd5, %r0;
    add.u64 %rd4, %rd4, %rd5;
    st.global.u64 [%rd0], %rd4;
    ret;
}
";
    let m = parse(&format!("{HEAD}{src}")).unwrap();
    let data = Backing::new(m.data_bytes as usize).unwrap();
    data.write(0, &m.data_image());
    let (b, r) = buffer(1);
    let mut params = b.addr().to_le_bytes().to_vec();
    params.extend_from_slice(&7u32.to_le_bytes());
    params.resize(m.func("k").unwrap().param_bytes as usize, 0);
    launch(
        &m,
        m.func_index("k").unwrap(),
        dims(1, 1),
        &params,
        vec![r],
        Some(data),
        &SimOptions::default(),
    )
    .unwrap();
    assert_eq!(words(&b, 1), vec![49]);
    // A store to the constant space does not parse; a global load of it
    // through `.local` does not reach another thread's memory.
    let bad = src.replace("ld.const.u64 %rd1, [table];", "st.const.u64 [table], %rd1;");
    assert!(parse(&format!("{HEAD}{bad}")).is_err());
}

#[test]
fn a_kernel_that_never_ends_times_out() {
    let src = "
.visible .entry k(.param .u64 p)
{
top:
    bra top;
}
";
    let opts = SimOptions {
        max_steps: 100_000,
        ..SimOptions::default()
    };
    let e = run1(src, dims(1, 32), 0, vec![], &opts).unwrap_err();
    assert!(
        matches!(&e, Error::Launch(f) if f.kind == FaultKind::Timeout),
        "{e}"
    );
}

#[test]
fn the_simulators_speed() {
    // A counted loop of integer and float work with a store per
    // iteration: the instructions per second the simulator sustains.
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .reg .f64 %fd<3>;
    .reg .pred %p;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %tid.x;
    mul.wide.u32 %rd1, %r0, 8;
    add.u64 %rd2, %rd0, %rd1;
    mov.u32 %r1, 0;
    mov.f64 %fd0, 0d0000000000000000;
loop:
    cvt.rn.f64.s32 %fd1, %r1;
    fma.rn.f64 %fd0, %fd1, %fd1, %fd0;
    st.f64 [%rd2], %fd0;
    add.s32 %r1, %r1, 1;
    setp.lt.s32 %p, %r1, 2000;
    @%p bra loop;
    ret;
}
";
    let (b, r) = buffer(512);
    let s = run1(src, dims(2, 256), b.addr(), vec![r], &SimOptions::default()).unwrap();
    let want: f64 = (0..2000).map(|i| f64::from(i) * f64::from(i)).sum();
    // Both blocks write the cells of their `%tid.x`.
    assert!(words(&b, 256).iter().all(|&w| f64::from_bits(w) == want));
    eprintln!(
        "virtual GPU: {} instructions in {:.3} s: {:.1} M instructions/s",
        s.instructions,
        s.wall.as_secs_f64(),
        s.rate() / 1e6
    );
    assert!(s.instructions > 512 * 2000 * 6);
}
