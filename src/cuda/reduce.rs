//! A reducing kernel's results on the GPU (`offload_jit`'s `ptx/reduce.rs`
//! has the device's side): per tile of [`gpu::TILE`] positions, the node a
//! warp combined, and per slot the leaves of workitems whose values went
//! into no tile. The host takes the leaves after every run that left some
//! (they are few: the range's tail and the neighbours of a lane that
//! deoptimized or stopped), and the tiles once, after the launch's last
//! run; `protocol.rs` joins them with the replayed workitems' values.
//!
//! The device memory is the launch's own: the tiles' words and flags
//! (`n / 32` of each, 9 bytes per 32 workitems) and the slots' leaves and
//! counts (about 0.5 KiB per slot), freed when the launch ends.

use super::raw::{self, DeviceMem};
use super::{Gpu, cuda_err};
use crate::error::OffloadError;
use cudarc::driver::sys;
use offload_abi::gpu::{self, DeviceCtx, LEAF_BYTES, LEAVES_PER_SLOT, TILE, TILE_LEVEL};
use offload_abi::reduce::{Combine, Node};

/// A reduction's device state during a launch, and the leaves taken so far.
pub(super) struct Reducing {
    combine: Combine,
    /// Full tiles of the range: `n / TILE`.
    tiles: usize,
    /// The tiles' words, then their flags.
    tile_mem: DeviceMem,
    slots: usize,
    /// The slots' leaves, then their counts (`u32`).
    leaf_mem: DeviceMem,
    /// The leaves taken from the runs so far.
    leaves: Vec<Node>,
}

impl Reducing {
    /// The state of a launch of `len` workitems over `slots` slots, its
    /// tile flags cleared on `stream`.
    pub(super) fn new(
        gpu: &Gpu,
        combine: Combine,
        len: u64,
        slots: usize,
        stream: sys::CUstream,
    ) -> Result<Reducing, OffloadError> {
        // (A range's length is below 2^64, so its tiles below 2^59.)
        let tiles = (len / TILE) as usize;
        let tile_mem = DeviceMem::new(&gpu.ctx, tiles * 9).map_err(cuda_err("reduction tiles"))?;
        // SAFETY: the flags, the last `tiles` bytes of the allocation.
        unsafe { raw::memset(tile_mem.at() + 8 * tiles as u64, 0, tiles, stream) }
            .map_err(cuda_err("reduction tiles"))?;
        let per = (LEAVES_PER_SLOT * LEAF_BYTES) as usize;
        let leaf_mem =
            DeviceMem::new(&gpu.ctx, slots * (per + 4)).map_err(cuda_err("reduction leaves"))?;
        Ok(Reducing {
            combine,
            tiles,
            tile_mem,
            slots,
            leaf_mem,
            leaves: Vec::new(),
        })
    }

    /// The context's reduction fields.
    pub(super) fn fill(&self, ctx: &mut DeviceCtx) {
        ctx.tiles = self.tile_mem.at();
        ctx.tile_flags = self.tile_mem.at() + 8 * self.tiles as u64;
        ctx.leaves = self.leaf_mem.at();
        ctx.leaf_counts = self.leaves_bytes() as u64 + self.leaf_mem.at();
        ctx.combine = self.combine.code();
    }

    fn leaves_bytes(&self) -> usize {
        self.slots * (LEAVES_PER_SLOT * LEAF_BYTES) as usize
    }

    /// Take the leaves of the run that just ended (some slot left some:
    /// `counter::LEAF_SLOTS`): their counts, then the slots' leaves from
    /// the first slot with any to the last. Returns the bytes copied.
    pub(super) fn take_leaves(&mut self, stream: sys::CUstream) -> Result<u64, OffloadError> {
        let mut counts = vec![0u32; self.slots];
        let at = self.leaf_mem.at() + self.leaves_bytes() as u64;
        // SAFETY: the counts, the allocation's last `4 * slots` bytes.
        unsafe { raw::fetch(&mut counts, at, stream) }.map_err(cuda_err("reduction leaves"))?;
        let mut got = 4 * counts.len() as u64;
        let first = counts.iter().position(|&c| c > 0);
        let last = counts.iter().rposition(|&c| c > 0);
        let (Some(first), Some(last)) = (first, last) else {
            return Ok(got);
        };
        let per = (LEAVES_PER_SLOT * 2) as usize;
        let mut words = vec![0u64; (last + 1 - first) * per];
        // SAFETY: slots `first..=last`'s leaves, inside the allocation.
        unsafe {
            raw::fetch(
                &mut words,
                self.leaf_mem.at() + (first * per * 8) as u64,
                stream,
            )
        }
        .map_err(cuda_err("reduction leaves"))?;
        got += 8 * words.len() as u64;
        for (slot, c) in counts.iter().enumerate().skip(first).take(last + 1 - first) {
            let c = (*c as usize).min(LEAVES_PER_SLOT as usize);
            let mine = &words[(slot - first) * per..][..2 * c];
            self.leaves
                .extend(mine.chunks_exact(2).map(|l| Node::leaf(l[0], l[1])));
        }
        Ok(got)
    }

    /// Every node the launch's runs computed on the device: the tiles a
    /// warp combined and the leaves. Returns them and the bytes copied.
    pub(super) fn nodes(mut self, stream: sys::CUstream) -> Result<(Vec<Node>, u64), OffloadError> {
        let mut flags = vec![0u8; self.tiles];
        let at = self.tile_mem.at();
        // SAFETY: the flags, the allocation's last `tiles` bytes.
        unsafe { raw::fetch(&mut flags, at + 8 * self.tiles as u64, stream) }
            .map_err(cuda_err("reduction tiles"))?;
        let mut got = flags.len() as u64;
        if flags.iter().any(|&f| f != 0) {
            let mut words = vec![0u64; self.tiles];
            // SAFETY: the tiles' words, the allocation's first `8 * tiles` bytes.
            unsafe { raw::fetch(&mut words, at, stream) }.map_err(cuda_err("reduction tiles"))?;
            got += 8 * words.len() as u64;
            self.leaves.extend(
                flags
                    .iter()
                    .zip(&words)
                    .enumerate()
                    .filter(|(_, (f, _))| **f != 0)
                    .map(|(t, (_, &value))| Node {
                        level: TILE_LEVEL,
                        index: t as u64,
                        value,
                    }),
            );
        }
        Ok((self.leaves, got))
    }
}

const _: () = assert!(gpu::TILE == 1 << TILE_LEVEL);
