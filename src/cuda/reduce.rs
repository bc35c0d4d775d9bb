//! A reducing kernel's results on the GPU (`offload_jit`'s `ptx/reduce.rs`
//! has the device's side): per tile of [`gpu::TILE`] positions, the node a
//! warp combined, and per slot the leaves of workitems whose values went
//! into no tile. The host takes the leaves after every run that left some
//! (they are few: the range's tail and the neighbours of a lane that
//! deoptimized or stopped), and the tiles once, after the launch's last
//! run; `protocol.rs` joins them with the replayed workitems' values.
//!
//! The device memory — the tiles' words and flags (9 bytes per 32
//! workitems) and the slots' leaves and counts (about 0.5 KiB per slot) —
//! is kept by the GPU for the next reduction ([`Memory`]), and made again
//! only when a launch needs more: a warm reduction allocates nothing, and
//! clears its tiles' flags with one memset.

use super::raw::{self, DeviceMem};
use super::{Gpu, cuda_err};
use crate::error::OffloadError;
use cudarc::driver::sys;
use offload_abi::gpu::{self, DeviceCtx, LEAF_BYTES, LEAVES_PER_SLOT, TILE, TILE_LEVEL};
use offload_abi::reduce::{Combine, Node};

/// A reduction's device memory, kept between launches: the tiles' words
/// then their flags, and the slots' leaves then their counts (`u32`).
pub(super) struct Memory {
    tile_mem: DeviceMem,
    leaf_mem: DeviceMem,
}

/// A reduction's device state during a launch, and the leaves taken so far.
pub(super) struct Reducing {
    combine: Combine,
    /// Full tiles of the range: `n / TILE`.
    tiles: usize,
    slots: usize,
    mem: Memory,
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
        let per = (LEAVES_PER_SLOT * LEAF_BYTES) as usize;
        // (This thread may not have run a launch yet: a launch in flight.)
        gpu.ctx.bind_to_thread().map_err(cuda_err("context"))?;
        let kept = gpu
            .reduce_mem
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let (tile_mem, leaf_mem) =
            kept.map_or((None, None), |m| (Some(m.tile_mem), Some(m.leaf_mem)));
        // What is kept serves when it is large enough; else it is freed
        // before its successor is made.
        let fit = |m: Option<DeviceMem>, bytes: usize, what: &'static str| match m
            .filter(|m| m.bytes() >= bytes)
        {
            Some(m) => Ok(m),
            None => DeviceMem::new(&gpu.ctx, bytes).map_err(cuda_err(what)),
        };
        let tile_mem = fit(tile_mem, tiles * 9, "reduction tiles")?;
        let leaf_mem = fit(leaf_mem, slots * (per + 4), "reduction leaves")?;
        if tiles > 0 {
            // SAFETY: the flags, `tiles` bytes after the words, inside the
            // allocation (at least `9 * tiles` bytes).
            unsafe { raw::memset(tile_mem.at() + 8 * tiles as u64, 0, tiles, stream) }
                .map_err(cuda_err("reduction tiles"))?;
        }
        Ok(Reducing {
            combine,
            tiles,
            slots,
            mem: Memory { tile_mem, leaf_mem },
            leaves: Vec::new(),
        })
    }

    /// The context's reduction fields.
    pub(super) fn fill(&self, ctx: &mut DeviceCtx) {
        ctx.tiles = self.mem.tile_mem.at();
        ctx.tile_flags = self.mem.tile_mem.at() + 8 * self.tiles as u64;
        ctx.leaves = self.mem.leaf_mem.at();
        ctx.leaf_counts = self.leaves_bytes() as u64 + self.mem.leaf_mem.at();
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
        let at = self.mem.leaf_mem.at() + self.leaves_bytes() as u64;
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
                self.mem.leaf_mem.at() + (first * per * 8) as u64,
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
    /// warp combined and the leaves. Returns them and the bytes copied;
    /// the memory goes back to `gpu` for the next reduction.
    pub(super) fn nodes(
        mut self,
        gpu: &Gpu,
        stream: sys::CUstream,
    ) -> Result<(Vec<Node>, u64), OffloadError> {
        let nodes = self.tile_nodes(stream);
        *gpu.reduce_mem
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(self.mem);
        nodes
    }

    fn tile_nodes(&mut self, stream: sys::CUstream) -> Result<(Vec<Node>, u64), OffloadError> {
        let mut flags = vec![0u8; self.tiles];
        let at = self.mem.tile_mem.at();
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
        Ok((std::mem::take(&mut self.leaves), got))
    }
}

const _: () = assert!(gpu::TILE == 1 << TILE_LEVEL);
