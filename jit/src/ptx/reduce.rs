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
//! Before each workitem a slot whose leaves are full exits with
//! [`offload_abi::exit::VALUES`] and its rest; it stores its leaf count
//! at every exit.

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

impl PtxWalker<'_> {
    /// The kind of the kernel's value, for a reducing kernel (wherever
    /// the walk is: an inlined callee's value is no workitem's).
    pub(super) fn reduces(&self) -> Option<Kind> {
        self.backend.reduces
    }

    /// A reducing kernel's registers, in the slot's prologue.
    pub(super) fn reduce_prologue(&mut self, k: Kind) {
        self.named(RV.into(), reg_type(k));
        self.named(NLEAF.into(), ".b32");
        self.emit(format!("mov.u32 {NLEAF}, 0;"));
    }

    /// At `$item`, before a workitem: exit with the rest when the slot's
    /// leaves are full.
    pub(super) fn leaves_room(&mut self) {
        let p = self.t(Cls::Pred);
        self.emit(format!(
            "setp.ge.u32 {p}, {NLEAF}, {};",
            gpu::LEAVES_PER_SLOT
        ));
        self.emit(format!("@{p} bra {L_LEAVES_FULL};"));
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
    pub(super) fn reduce_block(&mut self, k: Kind) {
        self.label(L_REDUCE);
        let wide = matches!(k, Kind::I64 | Kind::F64);
        let bc = if wide { Cls::B64 } else { Cls::B32 };
        let bits = self.t(bc);
        let bw = if wide { "b64" } else { "b32" };
        self.emit(format!("mov.{bw} {bits}, {RV};"));
        // The position, and whether this lane holds lane `l` of a tile.
        let start = self.ld_ctx(Cls::B64, offsets::START);
        let end = self.ld_ctx(Cls::B64, offsets::END);
        let (pos, n) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("sub.s64 {pos}, {W}, {start};"));
        self.emit(format!("sub.s64 {n}, {end}, {start};"));
        let (lane, lane64) = (self.t(Cls::B32), self.t(Cls::B64));
        self.emit(format!("mov.u32 {lane}, %laneid;"));
        self.emit(format!("cvt.u64.u32 {lane64}, {lane};"));
        let (low, base, bend) = (self.t(Cls::B64), self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("and.b64 {low}, {pos}, {};", gpu::TILE - 1));
        self.emit(format!("sub.s64 {base}, {pos}, {lane64};"));
        self.emit(format!("add.s64 {bend}, {base}, {};", gpu::TILE));
        let (aligned, fits, ok) = (self.t(Cls::Pred), self.t(Cls::Pred), self.t(Cls::Pred));
        self.emit(format!("setp.eq.u64 {aligned}, {low}, {lane64};"));
        self.emit(format!("setp.le.s64 {fits}, {bend}, {n};"));
        self.emit(format!("and.pred {ok}, {aligned}, {fits};"));
        let ballot = self.t(Cls::B32);
        self.emit(format!("vote.sync.ballot.b32 {ballot}, {ok}, 0xffffffff;"));
        let full = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {full}, {ballot}, 0xffffffff;"));
        self.emit(format!("@{full} bra {L_LEAF};"));
        // Every lane is in: the same tile in each (lane 0's base)?
        let (blo, bhi, b0lo, b0hi) = (
            self.t(Cls::B32),
            self.t(Cls::B32),
            self.t(Cls::B32),
            self.t(Cls::B32),
        );
        self.emit(format!("mov.b64 {{{blo}, {bhi}}}, {base};"));
        self.emit(format!(
            "shfl.sync.idx.b32 {b0lo}, {blo}, 0, 0x1f, 0xffffffff;"
        ));
        self.emit(format!(
            "shfl.sync.idx.b32 {b0hi}, {bhi}, 0, 0x1f, 0xffffffff;"
        ));
        let (e1, e2, same, all) = (
            self.t(Cls::Pred),
            self.t(Cls::Pred),
            self.t(Cls::Pred),
            self.t(Cls::Pred),
        );
        self.emit(format!("setp.eq.u32 {e1}, {blo}, {b0lo};"));
        self.emit(format!("setp.eq.u32 {e2}, {bhi}, {b0hi};"));
        self.emit(format!("and.pred {same}, {e1}, {e2};"));
        self.emit(format!("vote.sync.all.pred {all}, {same}, 0xffffffff;"));
        self.emit(format!("@!{all} bra {L_LEAF};"));
        // The tile's node: the tree's levels 1 to 5, lane i ⊕ lane i + 2^k,
        // with the launch's combine.
        let code = self.ld_ctx(Cls::B64, offsets::COMBINE);
        let l_store = self.new_label();
        let mut trees = Vec::new();
        for c in [Combine::Min, Combine::Max] {
            let (p, l) = (self.t(Cls::Pred), self.new_label());
            self.emit(format!("setp.eq.u64 {p}, {code}, {};", c.code()));
            self.emit(format!("@{p} bra {l};"));
            trees.push((c, Some(l)));
        }
        trees.insert(0, (Combine::Sum, None));
        for (c, l) in trees {
            if let Some(l) = l {
                self.label(&l);
            }
            self.tile_tree(k, c, &bits);
            self.emit(format!("bra {l_store};"));
        }
        self.label(&l_store);
        let p = self.t(Cls::Pred);
        self.emit(format!("setp.ne.u32 {p}, {lane}, 0;"));
        self.emit(format!("@{p} bra {L_REDUCED};"));
        let (tile, at) = (self.t(Cls::B64), self.t(Cls::B64));
        self.emit(format!("shr.u64 {tile}, {base}, {};", gpu::TILE_LEVEL));
        let tiles = self.ld_ctx(Cls::B64, offsets::TILES);
        self.emit(format!("mad.lo.u64 {at}, {tile}, 8, {tiles};"));
        let raw = self.raw64(wide, &bits);
        self.emit(format!("st.u64 [{at}], {raw};"));
        let flags = self.ld_ctx(Cls::B64, offsets::TILE_FLAGS);
        let fat = self.t(Cls::B64);
        self.emit(format!("add.u64 {fat}, {flags}, {tile};"));
        self.emit(format!("st.u8 [{fat}], {ONE8};"));
        self.emit(format!("bra {L_REDUCED};"));
        // A leaf: the slot's next one (`leaves_room` saw room for it).
        self.label(L_LEAF);
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
        self.emit(format!("st.u64 [{at}], {pos};"));
        let raw = self.raw64(wide, &bits);
        self.emit(format!("st.u64 [{at}+8], {raw};"));
        self.emit(format!("add.u32 {NLEAF}, {NLEAF}, 1;"));
        self.label(L_REDUCED);
        self.emit(format!("add.s64 {W}, {W}, {STRIDE};"));
        self.emit(format!("bra {L_ITEM};"));
    }

    /// The tree over a tile's 32 lanes, into lane 0's `bits`.
    fn tile_tree(&mut self, k: Kind, combine: Combine, bits: &str) {
        let wide = matches!(k, Kind::I64 | Kind::F64);
        let bc = if wide { Cls::B64 } else { Cls::B32 };
        for off in [1, 2, 4, 8, 16] {
            let other = self.t(bc);
            if wide {
                let (lo, hi, olo, ohi) = (
                    self.t(Cls::B32),
                    self.t(Cls::B32),
                    self.t(Cls::B32),
                    self.t(Cls::B32),
                );
                self.emit(format!("mov.b64 {{{lo}, {hi}}}, {bits};"));
                self.emit(format!(
                    "shfl.sync.down.b32 {olo}, {lo}, {off}, 0x1f, 0xffffffff;"
                ));
                self.emit(format!(
                    "shfl.sync.down.b32 {ohi}, {hi}, {off}, 0x1f, 0xffffffff;"
                ));
                self.emit(format!("mov.b64 {other}, {{{olo}, {ohi}}};"));
            } else {
                self.emit(format!(
                    "shfl.sync.down.b32 {other}, {bits}, {off}, 0x1f, 0xffffffff;"
                ));
            }
            self.combine_bits(k, combine, bits, &other);
        }
    }

    /// `bits` (a value's raw bits) as a `b64` register.
    fn raw64(&mut self, wide: bool, bits: &str) -> String {
        if wide {
            return bits.to_string();
        }
        let r = self.t(Cls::B64);
        self.emit(format!("cvt.u64.u32 {r}, {bits};"));
        r
    }

    /// `acc = acc ⊕ other` on raw bits (`acc` the left operand), exactly
    /// as [`Combine::apply`] (floats: `.rn`, never contracted; `min` and
    /// `max` keep the leftmost NaN and order `-0.0` below `+0.0`).
    fn combine_bits(&mut self, k: Kind, c: Combine, acc: &str, other: &str) {
        let ib = match k {
            Kind::I64 | Kind::F64 => "64",
            _ => "32",
        };
        match (k, c) {
            (Kind::I32 | Kind::I64, Combine::Sum) => {
                self.emit(format!("add.s{ib} {acc}, {acc}, {other};"));
            }
            (Kind::I32 | Kind::I64, Combine::Min) => {
                self.emit(format!("min.s{ib} {acc}, {acc}, {other};"));
            }
            (Kind::I32 | Kind::I64, Combine::Max) => {
                self.emit(format!("max.s{ib} {acc}, {acc}, {other};"));
            }
            (_, Combine::Sum) => {
                let fc = if ib == "64" { Cls::F64 } else { Cls::F32 };
                let (x, y) = (self.t(fc), self.t(fc));
                self.emit(format!("mov.b{ib} {x}, {acc};"));
                self.emit(format!("mov.b{ib} {y}, {other};"));
                self.emit(format!("add.rn.f{ib} {x}, {x}, {y};"));
                self.emit(format!("mov.b{ib} {acc}, {x};"));
            }
            (_, Combine::Min | Combine::Max) => {
                let fc = if ib == "64" { Cls::F64 } else { Cls::F32 };
                let (x, y) = (self.t(fc), self.t(fc));
                self.emit(format!("mov.b{ib} {x}, {acc};"));
                self.emit(format!("mov.b{ib} {y}, {other};"));
                // Min: x first when x < y, or equal with x negative or y
                // not; max mirrored (y < x, or equal with y negative or x
                // not).
                let (a, b, sa, sb) = if c == Combine::Min {
                    (&x, &y, acc, other)
                } else {
                    (&y, &x, other, acc)
                };
                let p: Vec<String> = (0..9).map(|_| self.t(Cls::Pred)).collect();
                let (lt, eq, na, nb, tie, first, xn, yn, pickx) = (
                    &p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7], &p[8],
                );
                self.emit(format!("setp.lt.f{ib} {lt}, {a}, {b};"));
                self.emit(format!("setp.eq.f{ib} {eq}, {a}, {b};"));
                self.emit(format!("setp.lt.s{ib} {na}, {sa}, 0;"));
                self.emit(format!("setp.ge.s{ib} {nb}, {sb}, 0;"));
                self.emit(format!("or.pred {tie}, {na}, {nb};"));
                self.emit(format!("and.pred {tie}, {tie}, {eq};"));
                self.emit(format!("or.pred {first}, {lt}, {tie};"));
                self.emit(format!("setp.nan.f{ib} {xn}, {x}, {x};"));
                self.emit(format!("setp.nan.f{ib} {yn}, {y}, {y};"));
                // x if x is NaN, else y if y is, else x when first.
                self.emit(format!("not.pred {yn}, {yn};"));
                self.emit(format!("and.pred {pickx}, {yn}, {first};"));
                self.emit(format!("or.pred {pickx}, {pickx}, {xn};"));
                self.emit(format!("selp.b{ib} {acc}, {acc}, {other}, {pickx};"));
            }
        }
    }
}
