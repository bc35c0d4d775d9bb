//! Warp-wide instructions on the simulated grid: `shfl.sync` trees, votes
//! and `activemask`, lanes that exited, and the misuse PTX leaves
//! undefined (reported, with the warp).

use offload_vgpu::mem::{Backing, Kind, Region};
use offload_vgpu::{Dims, Error, FaultKind, SimOptions, launch, parse};

const HEAD: &str = ".version 6.3\n.target sm_70\n.address_size 64\n";

fn run(src: &str, threads: u32, words: usize, seed: u64) -> Result<Vec<u64>, Error> {
    let b = Backing::new(words * 8).unwrap();
    let r = Region {
        kind: Kind::Device,
        backing: b.clone(),
    };
    let m = parse(&format!("{HEAD}{src}")).unwrap_or_else(|e| panic!("{e}"));
    let f = m.func_index("k").unwrap();
    let d = Dims {
        grid: [2, 1, 1],
        block: [threads, 1, 1],
        shared_bytes: 0,
    };
    let opts = SimOptions {
        seed,
        quantum: 3,
        ..SimOptions::default()
    };
    launch(&m, f, d, &b.addr().to_le_bytes(), vec![r], None, &opts)?;
    let mut bytes = vec![0u8; words * 8];
    b.read(0, &mut bytes);
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect())
}

/// Each lane offers `global thread index + 1`; a `shfl.down` tree at
/// offsets 1, 2, 4, 8, 16 leaves the warp's sum in lane 0, which stores
/// it at the warp's index; every lane stores a ballot of the odd lanes
/// and its `activemask` after it.
const TREE: &str = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<8>;
    .reg .pred %p<3>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %ctaid.x;
    mov.u32 %r1, %ntid.x;
    mov.u32 %r2, %tid.x;
    mad.lo.s32 %r3, %r0, %r1, %r2;
    add.u32 %r4, %r3, 1;
    shfl.sync.down.b32 %r5, %r4, 1, 31, 0xffffffff;
    add.u32 %r4, %r4, %r5;
    shfl.sync.down.b32 %r5, %r4, 2, 31, 0xffffffff;
    add.u32 %r4, %r4, %r5;
    shfl.sync.down.b32 %r5, %r4, 4, 31, 0xffffffff;
    add.u32 %r4, %r4, %r5;
    shfl.sync.down.b32 %r5, %r4, 8, 31, 0xffffffff;
    add.u32 %r4, %r4, %r5;
    shfl.sync.down.b32 %r5, %r4, 16, 31, 0xffffffff;
    add.u32 %r4, %r4, %r5;
    and.b32 %r6, %r3, 1;
    setp.ne.u32 %p0, %r6, 0;
    vote.sync.ballot.b32 %r7, %p0, 0xffffffff;
    vote.sync.all.pred %p1, %p0, 0xffffffff;
    vote.sync.any.pred %p2, %p0, 0xffffffff;
    activemask.b32 %r8;
    shr.u32 %r9, %r3, 5;
    and.b32 %r10, %r3, 31;
    setp.ne.u32 %p0, %r10, 0;
    @%p0 bra out;
    mul.wide.u32 %rd1, %r9, 32;
    add.u64 %rd2, %rd0, %rd1;
    cvt.u64.u32 %rd3, %r4;
    st.global.u64 [%rd2], %rd3;
    cvt.u64.u32 %rd4, %r7;
    st.global.u64 [%rd2+8], %rd4;
    selp.u64 %rd5, 1, 0, %p1;
    selp.u64 %rd6, 2, 0, %p2;
    or.b64 %rd5, %rd5, %rd6;
    st.global.u64 [%rd2+16], %rd5;
    cvt.u64.u32 %rd7, %r8;
    st.global.u64 [%rd2+24], %rd7;
out:
    ret;
}
";

#[test]
fn a_shuffle_tree_sums_each_warp_and_votes_see_every_lane() {
    for seed in 0..6 {
        // Two blocks of 64: four warps.
        let w = run(TREE, 64, 16, seed).unwrap();
        for warp in 0..4u64 {
            let first = warp * 32;
            let sum: u64 = (first + 1..=first + 32).sum();
            assert_eq!(w[(warp * 4) as usize], sum, "seed {seed}, warp {warp}");
            assert_eq!(
                w[(warp * 4 + 1) as usize],
                0xaaaa_aaaa,
                "ballot of the odd lanes"
            );
            assert_eq!(w[(warp * 4 + 2) as usize], 2, "not all, but some");
            assert_eq!(w[(warp * 4 + 3) as usize], 1, "activemask: lane 0 alone");
        }
    }
}

#[test]
fn lanes_that_exited_are_not_waited_for() {
    // Odd lanes exit first; the even ones vote among themselves.
    let src = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    .reg .pred %p<3>;
    ld.param.u64 %rd0, [p];
    mov.u32 %r0, %tid.x;
    and.b32 %r1, %r0, 1;
    setp.ne.u32 %p0, %r1, 0;
    @%p0 bra done;
    setp.lt.u32 %p1, %r0, 8;
    vote.sync.ballot.b32 %r2, %p1, 0xffffffff;
    setp.ne.u32 %p2, %r0, 0;
    @%p2 bra done;
    cvt.u64.u32 %rd1, %r2;
    st.global.u64 [%rd0], %rd1;
done:
    ret;
}
";
    for seed in 0..4 {
        let w = run(src, 32, 1, seed).unwrap();
        assert_eq!(w[0], 0b0101_0101, "seed {seed}");
    }
}

#[test]
fn misused_warp_instructions_are_reported_with_the_warp() {
    // Lane 0 waits at a shuffle, the other lanes at a barrier: neither
    // can go on, a deadlock once nothing else runs.
    let stuck = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    setp.ne.u32 %p0, %r0, 0;
    @%p0 bra meet;
    shfl.sync.idx.b32 %r1, %r0, 0, 31, 0xffffffff;
    ret;
meet:
    bar.sync 0;
    ret;
}
";
    let opts_fault = |src: &str| match run(src, 32, 1, 1) {
        Err(Error::Launch(f)) => *f,
        other => panic!("expected a fault, got {other:?}"),
    };
    let f = opts_fault(stuck);
    assert_eq!(f.kind, FaultKind::Deadlock, "{}", f.detail);
    assert!(f.detail.contains("warp 0 of block"), "{}", f.detail);
    // A mask that leaves the lane out.
    let left_out = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<3>;
    mov.u32 %r0, %tid.x;
    shfl.sync.idx.b32 %r1, %r0, 0, 31, 0x1;
    ret;
}
";
    let f = opts_fault(left_out);
    assert!(f.detail.contains("leaves it out"), "{}", f.detail);
    assert!(f.text.contains("shfl.sync.idx"), "{}", f.text);
    // A lane reading one that exited.
    let gone = "
.visible .entry k(.param .u64 p)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    setp.eq.u32 %p0, %r0, 1;
    @%p0 bra done;
    shfl.sync.down.b32 %r1, %r0, 1, 31, 0xffffffff;
done:
    ret;
}
";
    let f = opts_fault(gone);
    assert!(f.detail.contains("reads lane 1"), "{}", f.detail);
    // The non-`.sync` form and a predicate destination are refused when
    // the module is read.
    for bad in [
        "shfl.down.b32 %r1, %r0, 1, 31;",
        "shfl.sync.down.b32 %r1|%p0, %r0, 1, 31, 0xffffffff;",
        "shfl.sync.down.wide.b32 %r1, %r0, 1, 31, 0xffffffff;",
        "vote.sync.ballot.pred %p1, %p0, 0xffffffff;",
        "activemask.b64 %r1;",
    ] {
        let src = format!(
            ".visible .entry k(.param .u64 p)\n{{\n.reg .b32 %r<3>;\n.reg .pred %p<2>;\n{bad}\nret;\n}}\n"
        );
        let e = parse(&format!("{HEAD}{src}")).unwrap_err().to_string();
        let op = bad.split(' ').next().unwrap();
        assert!(e.contains(op), "{bad}: {e}");
    }
}
