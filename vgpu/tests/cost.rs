//! The cost model (`offload_vgpu::cost`): sectors per warp-wide memory
//! instruction (coalesced and scattered), the longest same-address atomic
//! chain, strong and `.sys` loads, fences; the same counts under every
//! interleaving.

use offload_vgpu::mem::{Backing, Kind, Region};
use offload_vgpu::{Dims, SimOptions, launch, parse};

const HEAD: &str = ".version 6.3\n.target sm_70\n.address_size 64\n";

/// Runs kernel `k` of `src` (one pointer parameter to a device buffer of
/// `bytes`) over `blocks` × `threads` with `seed`.
fn costs(
    src: &str,
    blocks: u32,
    threads: u32,
    bytes: usize,
    seed: u64,
) -> offload_vgpu::cost::Costs {
    let m = parse(&format!("{HEAD}{src}")).unwrap_or_else(|e| panic!("{e}"));
    let f = m.func_index("k").unwrap();
    let b = Backing::new(bytes).unwrap();
    let r = Region {
        kind: Kind::Device,
        backing: b.clone(),
    };
    let d = Dims {
        grid: [blocks, 1, 1],
        block: [threads, 1, 1],
        shared_bytes: 0,
    };
    let opts = SimOptions {
        seed,
        quantum: 5,
        ..SimOptions::default()
    };
    launch(&m, f, d, &b.addr().to_le_bytes(), vec![r], None, &opts)
        .unwrap()
        .costs
}

/// Thread i loads the f32 at index i × STRIDE and stores it back.
fn strided(stride: u32) -> String {
    format!(
        "
.visible .entry k(.param .u64 p)
{{
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    .reg .f32 %f<2>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r3, %r0, %r1, %r2;
    mul.lo.s32 %r4, %r3, {stride};
    mul.wide.u32 %rd1, %r4, 4;
    add.u64 %rd2, %rd0, %rd1;
    ld.global.f32 %f0, [%rd2];
    st.global.f32 [%rd2], %f0;
    ret;
}}
"
    )
}

#[test]
fn consecutive_lanes_share_sectors_and_scattered_ones_do_not() {
    for seed in [1, 2, 3] {
        // 2 blocks of 64 threads = 4 warps, each a load and a store.
        let c = costs(&strided(1), 2, 64, 128 * 4, seed);
        assert_eq!(c.mem_instructions, 8, "seed {seed}");
        // 32 floats = 128 bytes = 4 sectors per instruction.
        assert_eq!(c.sectors, 8 * 4, "seed {seed}");
        let c = costs(&strided(8), 2, 64, 128 * 32, seed);
        assert_eq!(c.mem_instructions, 8);
        // 8 floats apart: one sector per lane.
        assert_eq!(c.sectors, 8 * 32);
        let c = costs(&strided(2), 2, 64, 128 * 8, seed);
        assert_eq!(c.sectors, 8 * 8);
        assert_eq!((c.atomics, c.atomic_chain, c.fences), (0, 0, 0));
    }
}

#[test]
fn a_partial_warp_is_one_instruction() {
    // 40 threads: a full warp and one of 8 lanes (one sector each way).
    let c = costs(&strided(1), 1, 40, 40 * 4, 7);
    assert_eq!(c.mem_instructions, 4);
    assert_eq!(c.sectors, 2 * 4 + 2);
}

#[test]
fn atomics_on_one_address_form_a_chain_and_spread_ones_do_not() {
    // Every thread adds to word 0 (chain = threads) and to its own word.
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r3, %r0, %r1, %r2;
    red.global.add.u64 [%rd0], 1;
    mul.wide.u32 %rd1, %r3, 8;
    add.u64 %rd2, %rd0, %rd1;
    atom.global.add.u64 %rd3, [%rd2+8], 1;
    ret;
}
";
    let c = costs(src, 3, 64, (1 + 192) * 8, 11);
    assert_eq!(c.atomics, 2 * 192);
    assert_eq!(c.atomic_chain, 192);
    // The same-address reduction is one sector per warp; the spread one
    // covers 256 bytes starting 8 bytes into a sector: 9.
    assert_eq!(c.mem_instructions, 2 * 6);
    assert_eq!(c.sectors, 6 + 6 * 9);
}

#[test]
fn strong_and_sys_loads_and_fences_are_counted() {
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b64 %rd<5>;
    ld.param.u64 %rd0, [p];
    ld.global.u64 %rd1, [%rd0];
    ld.volatile.global.u64 %rd2, [%rd0];
    ld.relaxed.gpu.global.u64 %rd3, [%rd0];
    ld.acquire.sys.global.u64 %rd4, [%rd0];
    fence.acq_rel.gpu;
    fence.sc.sys;
    membar.gl;
    ret;
}
";
    let c = costs(src, 1, 32, 8, 3);
    assert_eq!(c.strong_loads, 3 * 32);
    assert_eq!(c.sys_loads, 2 * 32);
    assert_eq!(c.fences, 3 * 32);
    assert_eq!(c.sys_fences, 32);
    // Four warp-wide loads of one word: one sector each; the param load
    // is not global memory.
    assert_eq!((c.mem_instructions, c.sectors), (4, 4));
}
