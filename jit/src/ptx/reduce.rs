//! Reducing kernels on the GPU: a warp combines its lanes' values in the
//! combine tree's own order ([`offload_abi::reduce`]), with no atomic.
//!
//! Every workitem's end (`ret` with its value, in either copy of the body
//! and in a resumed record) goes to one block, `$reduce`, which every
//! lane of a warp that has not exited reaches once per workitem. There the
//! warp asks (`vote.sync.ballot`) whether its 32 lanes hold the 32
//! positions of one *tile* — an aligned block of [`gpu::TILE`] positions
//! of the range, lane `l` at position `base + l`, `base` the same in every
//! lane (`shfl.sync.idx` from lane 0, `vote.sync.all`) and the whole tile
//! inside the range. If so, `shfl.sync.down` at offsets 1, 2, 4, 8, 16
//! joins the values — lane `i` combines its value (the left subtree) with
//! lane `i + 2^k`'s (the right) — which is exactly the tree's node of
//! level [`gpu::TILE_LEVEL`] over the tile, and lane 0 stores it in the
//! tile's word with its flag ([`gpu::DeviceCtx::tiles`]). Otherwise each
//! lane writes its value as a *leaf* (position and value) to its slot's
//! leaves ([`gpu::DeviceCtx::leaves`]).
//!
//! So a value goes into exactly one tile node or one leaf, whatever the
//! lanes did before: the test is on positions, not on history. Slots
//! partition the range grid-stride with the launch's slot count a
//! multiple of the warp and no rotation (the host gives a reducing kernel
//! rotation 0), so in a run where no lane deoptimizes or stops every full
//! tile is a warp's, and leaves are the tail of the range and the
//! neighbours of a lane that left. The host takes the leaves after each
//! run, the tiles once at the launch's end, and joins them with the
//! replayed workitems' values.
//!
//! A lane waits at the warp instructions only for the lanes of its warp
//! that have not exited, which reach `$reduce` after their workitem or
//! exit; none waits for the host. So a reducing kernel never waits in
//! place at a safepoint (a lane parked in a poll would hold its warp's
//! lanes at `$reduce`, which then never park): every request stops it,
//! and the host relaunches it after the safepoint.
//!
//! A slot whose leaves are full exits with [`offload_abi::exit::VALUES`]
//! and its rest before its next workitem; it stores its leaf count at
//! every exit.

use super::*;
use offload_abi::gpu::{self, counter};
use offload_abi::reduce::Combine;

/// The kernel's value of a workitem, the slot's leaf count, and a
/// reduction's labels.
pub(super) const RV: &str = "%rv";
pub(super) const NLEAF: &str = "%nleaf";
pub(super) const L_REDUCE: &str = "$reduce";
const L_LEAF: &str = "$reduce_leaf";
const L_REDUCED: &str = "$reduced";
pub(super) const L_LEAVES_FULL: &str = "$leaves_full";
/// Per lane, launch-invariant: `start + lane` (a workitem less it is its
/// tile's base position when the lane holds lane `lane` of a tile), the
/// last position a tile may start at (`n - 32`), and whether it is lane 0.
const BIAS: &str = "%rbias";
const LAST: &str = "%rlast";
const LANE0: &str = "%rlane0";
/// The warp's lanes passed the same-tile test together and none has
/// jumped since (`reduce_block`).
const SYNC: &str = "%rsync";

impl PtxWalker<'_> {
    /// The kind of the kernel's value, for a reducing kernel (wherever
    /// the walk is: an inlined callee's value is no workitem's).
    pub(super) fn reduces(&self) -> Option<Kind> {
        self.backend.reduces
    }

    /// A reducing kernel's registers, in the slot's prologue: the value,
    /// the leaf count, and the launch-invariant parts of the tile test.
    pub(super) fn reduce_prologue(&mut self, k: Kind) {
        self.named(RV.into(), reg_type(k));
        self.named(NLEAF.into(), ".b32");
        self.emit(format!("mov.u32 {NLEAF}, 0;"));
        for (n, ty) in [
            (BIAS, ".b64"),
            (LAST, ".b64"),
            (LANE0, ".pred"),
            (SYNC, ".pred"),
        ] {
            self.named(n.into(), ty);
        }
        let start = self.ld_ctx(Cls::B64, offsets::START);
        let end = self.ld_ctx(Cls::B64, offsets::END);
        let (lane, lane64) = (self.t(Cls::B32), self.t(Cls::B64));
        self.emit(format!("mov.u32 {lane}, %laneid;"));
        self.emit(format!("cvt.u64.u32 {lane64}, {lane};"));
        self.emit(format!("add.s64 {BIAS}, {start}, {lane64};"));
        self.emit(format!("sub.s64 {LAST}, {end}, {start};"));
        self.emit(format!("sub.s64 {LAST}, {LAST}, {};", gpu::TILE));
        self.emit(format!("setp.eq.u32 {LANE0}, {lane}, 0;"));
        self.not_synced();
    }

    /// The lane's warp is no longer known to run one tile at a time (its
    /// workitem jumped: a rest after a resumed record).
    pub(super) fn not_synced(&mut self) {
        self.emit(format!("setp.ne.u64 {SYNC}, {BIAS}, {BIAS};"));
    }

    /// At a slot's exit: store its leaf count; count the slot if it left
    /// leaves.
    pub(super) fn leaves_at_exit(&mut self, slot: &str) {
        let counts = self.ld_ctx(Cls::B64, offsets::LEAF_COUNTS);
        let at = self.t(Cls::B64);
        self.emit(format!("mad.lo.u64 {at}, {slot}, 4, {counts};"));
        self.emit(format!("st.u32 [{at}], {NLEAF};"));
        let (p, l) = (self.t(Cls::Pred), self.new_label());
        self.emit(format!("setp.eq.u32 {p}, {NLEAF}, 0;"));
        self.emit(format!("@{p} bra {l};"));
        let stats = self.ld_ctx(Cls::B64, offsets::STATS);
        self.emit(format!(
            "red.add.u64 [{stats}+{}], 1;",
            counter::byte(counter::LEAF_SLOTS)
        ));
        self.label(&l);
    }

    /// `$reduce` (module docs): the workitem at `%w` ended with its value
    /// in `%rv`; then the slot's next workitem.
    ///
    /// The warp's lanes test their tile at each workitem; the test that
    /// they all run the *same* tile (a shuffle of lane 0's base and a
    /// vote) is needed only until it passed once: from then on each lane
    /// steps by the slot count at each visit, as the others do, until
    /// one leaves (the ballot then misses it) or jumps to a rest (which
    /// clears its `%rsync`, and the warp tests again).
    pub(super) fn reduce_block(&mut self, k: Kind) {
        self.label(L_REDUCE);
        // base: the position of the tile's lane 0, if this lane is lane l
        // of a tile (aligned) that ends inside the range (fits).
        let (base, low) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("sub.s64 {base}, {W}, {BIAS};"));
        self.emit(format!("and.b64 {low}, {base}, {};", gpu::TILE - 1));
        let (aligned, fits, ok, fast) = (
            self.t(Cls::Pred),
            self.t(Cls::Pred),
            self.t(Cls::Pred),
            self.t(Cls::Pred),
        );
        self.emit(format!("setp.eq.u64 {aligned}, {low}, 0;"));
        self.emit(format!("setp.le.s64 {fits}, {base}, {LAST};"));
        self.emit(format!("and.pred {ok}, {aligned}, {fits};"));
        self.emit(format!("and.pred {fast}, {ok}, {SYNC};"));
        let (ballot, full, l_tree) = (self.t(Cls::B32), self.t(Cls::Pred), self.new_label());
        self.emit(format!(
            "vote.sync.ballot.b32 {ballot}, {fast}, 0xffffffff;"
        ));
        self.emit(format!("setp.eq.u32 {full}, {ballot}, 0xffffffff;"));
        self.emit(format!("@{full} bra {l_tree};"));
        // Every lane in, on a tile (the ballot again without `%rsync`)?
        let (ballot, part) = (self.t(Cls::B32), self.t(Cls::Pred));
        self.emit(format!("vote.sync.ballot.b32 {ballot}, {ok}, 0xffffffff;"));
        self.emit(format!("setp.ne.u32 {part}, {ballot}, 0xffffffff;"));
        self.emit(format!("@{part} bra {L_LEAF};"));
        // The same tile in each (lane 0's base)?
        let b0 = self.shfl64("idx", &base, 0, Cls::B64);
        let (same, all) = (self.t(Cls::Pred), self.t(Cls::Pred));
        self.emit(format!("setp.eq.u64 {same}, {base}, {b0};"));
        self.emit(format!("vote.sync.all.pred {all}, {same}, 0xffffffff;"));
        self.emit(format!("@!{all} bra {L_LEAF};"));
        self.emit(format!("setp.eq.u64 {SYNC}, {base}, {base};"));
        // The tile's node: the tree's levels 1 to 5, lane i ⊕ lane i + 2^k,
        // with the launch's combine (sum first: no other test).
        self.label(&l_tree);
        let code = self.ld_ctx(Cls::B64, offsets::COMBINE);
        let (p, l_other, l_store) = (self.t(Cls::Pred), self.new_label(), self.new_label());
        self.emit(format!("setp.ne.u64 {p}, {code}, {};", Combine::Sum.code()));
        self.emit(format!("@{p} bra {l_other};"));
        self.tile_tree(k, Combine::Sum);
        self.emit(format!("bra {l_store};"));
        self.label(&l_other);
        let (p, l_max) = (self.t(Cls::Pred), self.new_label());
        self.emit(format!("setp.ne.u64 {p}, {code}, {};", Combine::Min.code()));
        self.emit(format!("@{p} bra {l_max};"));
        self.tile_tree(k, Combine::Min);
        self.emit(format!("bra {l_store};"));
        self.label(&l_max);
        self.tile_tree(k, Combine::Max);
        // Lane 0 stores the node and its flag.
        self.label(&l_store);
        self.emit(format!("@!{LANE0} bra {L_REDUCED};"));
        let (tile, at) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("shr.u64 {tile}, {base}, {};", gpu::TILE_LEVEL));
        let tiles = self.ld_ctx(Cls::B64, offsets::TILES);
        self.emit(format!("mad.lo.u64 {at}, {tile}, 8, {tiles};"));
        let raw = self.raw64(k);
        self.emit(format!("st.u64 [{at}], {raw};"));
        let flags = self.ld_ctx(Cls::B64, offsets::TILE_FLAGS);
        let fat = self.t(Cls::B64);
        self.emit(format!("add.u64 {fat}, {flags}, {tile};"));
        self.emit(format!("st.u8 [{fat}], {ONE8};"));
        self.emit(format!("bra {L_REDUCED};"));
        // A leaf: the slot's next one (it has room: a full slot leaves).
        self.label(L_LEAF);
        self.not_synced();
        let (slot, leaves) = (self.slot_index(), self.ld_ctx(Cls::B64, offsets::LEAVES));
        let (idx, n64, at) = (self.t(Cls::B64), self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("cvt.u64.u32 {n64}, {NLEAF};"));
        self.emit(format!(
            "mad.lo.u64 {idx}, {slot}, {}, {n64};",
            gpu::LEAVES_PER_SLOT
        ));
        self.emit(format!(
            "mad.lo.u64 {at}, {idx}, {}, {leaves};",
            gpu::LEAF_BYTES
        ));
        let (start, pos) = (self.ld_ctx(Cls::B64, offsets::START), self.t(Cls::B64));
        self.emit(format!("sub.s64 {pos}, {W}, {start};"));
        self.emit(format!("st.u64 [{at}], {pos};"));
        let raw = self.raw64(k);
        self.emit(format!("st.u64 [{at}+8], {raw};"));
        self.emit(format!("add.u32 {NLEAF}, {NLEAF}, 1;"));
        self.label(L_REDUCED);
        self.emit(format!("add.s64 {W}, {W}, {STRIDE};"));
        // Full leaves: the slot exits before its next workitem (not in a
        // resumed record's workitem: that is its first leaf).
        let p = self.t(Cls::Pred);
        self.emit(format!(
            "setp.ge.u32 {p}, {NLEAF}, {};",
            gpu::LEAVES_PER_SLOT
        ));
        self.emit(format!("@{p} bra {L_LEAVES_FULL};"));
        self.emit(format!("bra {L_ITEM};"));
    }

    /// The tree over a tile's 32 lanes, into lane 0's `%rv` (shuffled in
    /// its own register: `.b32` moves any 32-bit type).
    fn tile_tree(&mut self, k: Kind, combine: Combine) {
        let wide = matches!(k, Kind::I64 | Kind::F64);
        for off in [1, 2, 4, 8, 16] {
            let other = if wide {
                self.shfl64("down", RV, off, cls(k))
            } else {
                let other = self.t(cls(k));
                self.emit(format!(
                    "shfl.sync.down.b32 {other}, {RV}, {off}, 0x1f, 0xffffffff;"
                ));
                other
            };
            self.combine_into(k, combine, &other);
        }
    }

    /// `shfl.sync.MODE` of the 64-bit `x` (`b` the lane or offset), a
    /// half at a time, into a new register of class `c`.
    fn shfl64(&mut self, mode: &str, x: &str, b: u32, c: Cls) -> String {
        let (lo, hi, slo, shi) = (
            self.t(Cls::B32),
            self.t(Cls::B32),
            self.t(Cls::B32),
            self.t(Cls::B32),
        );
        self.emit(format!("mov.b64 {{{lo}, {hi}}}, {x};"));
        for (d, a) in [(&slo, &lo), (&shi, &hi)] {
            self.emit(format!(
                "shfl.sync.{mode}.b32 {d}, {a}, {b}, 0x1f, 0xffffffff;"
            ));
        }
        let r = self.t(c);
        self.emit(format!("mov.b64 {r}, {{{slo}, {shi}}};"));
        r
    }

    /// `%rv`'s raw bits in a `b64` register.
    fn raw64(&mut self, k: Kind) -> String {
        let r = self.t(Cls::B64);
        match k {
            Kind::I64 | Kind::F64 => self.emit(format!("mov.b64 {r}, {RV};")),
            _ => {
                let b = self.t(Cls::B32);
                self.emit(format!("mov.b32 {b}, {RV};"));
                self.emit(format!("cvt.u64.u32 {r}, {b};"));
            }
        }
        r
    }

    /// `%rv = %rv ⊕ other` (`other` in a register of `k`'s class, `%rv`
    /// the left operand), exactly as [`Combine::apply`]: floats add with
    /// `.rn` (never contracted); `min` and `max` of floats keep the
    /// leftmost NaN and order `-0.0` below `+0.0`, which needs the sign
    /// bits.
    fn combine_into(&mut self, k: Kind, c: Combine, other: &str) {
        let (ib, ty) = match k {
            Kind::I64 => ("64", "s64"),
            Kind::F64 => ("64", "f64"),
            Kind::F32 => ("32", "f32"),
            _ => ("32", "s32"),
        };
        match (k, c) {
            (_, Combine::Sum) if ty.starts_with('f') => {
                self.emit(format!("add.rn.{ty} {RV}, {RV}, {other};"));
            }
            (_, Combine::Sum) => self.emit(format!("add.{ty} {RV}, {RV}, {other};")),
            (Kind::I32 | Kind::I64, _) => {
                let op = if c == Combine::Min { "min" } else { "max" };
                self.emit(format!("{op}.{ty} {RV}, {RV}, {other};"));
            }
            _ => {
                let bc = if ib == "64" { Cls::B64 } else { Cls::B32 };
                let (xb, yb) = (self.t(bc), self.t(bc));
                self.emit(format!("mov.b{ib} {xb}, {RV};"));
                self.emit(format!("mov.b{ib} {yb}, {other};"));
                // Min: x first when x < y, or equal with x negative or y
                // not; max mirrored (y < x, or equal with y negative or x
                // not).
                let (a, b, sa, sb) = if c == Combine::Min {
                    (RV, other, &xb, &yb)
                } else {
                    (other, RV, &yb, &xb)
                };
                let p: Vec<String> = (0..9).map(|_| self.t(Cls::Pred)).collect();
                let [lt, eq, na, nb, tie, first, xn, yn, pickx] = &p[..] else {
                    unreachable!("nine predicates")
                };
                self.emit(format!("setp.lt.{ty} {lt}, {a}, {b};"));
                self.emit(format!("setp.eq.{ty} {eq}, {a}, {b};"));
                self.emit(format!("setp.lt.s{ib} {na}, {sa}, 0;"));
                self.emit(format!("setp.ge.s{ib} {nb}, {sb}, 0;"));
                self.emit(format!("or.pred {tie}, {na}, {nb};"));
                self.emit(format!("and.pred {tie}, {tie}, {eq};"));
                self.emit(format!("or.pred {first}, {lt}, {tie};"));
                self.emit(format!("setp.nan.{ty} {xn}, {RV}, {RV};"));
                self.emit(format!("setp.nan.{ty} {yn}, {other}, {other};"));
                // x if x is NaN, else y if y is, else x when first.
                self.emit(format!("not.pred {yn}, {yn};"));
                self.emit(format!("and.pred {pickx}, {yn}, {first};"));
                self.emit(format!("or.pred {pickx}, {pickx}, {xn};"));
                self.emit(format!("selp.{ty} {RV}, {RV}, {other}, {pickx};"));
            }
        }
    }
}

// A resumed record's workitem is a slot's first leaf, never its last.
const _: () = assert!(gpu::LEAVES_PER_SLOT >= 2);
