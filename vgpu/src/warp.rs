//! Warp-wide instructions — `shfl.sync` and `vote.sync` — on a simulator
//! that runs threads one at a time ([`crate::grid`]): a lane that reaches
//! one waits here until every lane of its member mask that has not exited
//! has reached one with the same qualifiers and mask (PTX's rule for sm_70
//! and newer, where the lanes need not be at the same instruction); then
//! each lane gets its result in its destination register and runs again.
//!
//! Misuse that hardware leaves undefined is an error here, naming the
//! warp: a lane whose own bit is not in its mask, lanes of one warp
//! waiting with different instructions or masks, a mask naming a lane the
//! warp does not have, and a `shfl` reading a lane that exited or is not
//! in the mask.

use crate::exec::{Thread, WarpKind, WarpReq};
use crate::inst::{ShflMode, VoteMode};
use std::collections::BTreeMap;

/// The lanes waiting at a warp-wide instruction, per warp.
#[derive(Debug, Default)]
pub(crate) struct Rendezvous {
    /// By the warp's index in the grid: the waiting threads and their parts.
    waiting: BTreeMap<u64, Vec<(u32, WarpReq)>>,
}

/// The warp of thread `t`: its index in the grid.
fn warp_of(threads: &[Thread], t: u32) -> u64 {
    let p = &threads[t as usize].place;
    u64::from(p.block) * u64::from(p.nwarp) + u64::from(p.warp)
}

/// The thread of lane `l` in the warp of thread `t`, if the warp has it.
fn lane_thread(threads: &[Thread], t: u32, l: u32) -> Option<u32> {
    let p = &threads[t as usize].place;
    let i = (t - p.lane).checked_add(l)?;
    let q = &threads.get(i as usize)?.place;
    (q.block == p.block && q.warp == p.warp).then_some(i)
}

impl Rendezvous {
    /// Thread `t` reached a warp-wide instruction with `req`: the threads
    /// released (its warp's waiting lanes and itself, once the last has
    /// come; none while some are missing), or what is wrong.
    pub(crate) fn arrive(
        &mut self,
        threads: &mut [Thread],
        exited: &[bool],
        t: u32,
        req: WarpReq,
    ) -> Result<Vec<u32>, String> {
        let key = warp_of(threads, t);
        self.waiting.entry(key).or_default().push((t, req));
        self.try_release(threads, exited, key)
    }

    /// Thread `t` exited: lanes of its warp waiting only for it go on.
    pub(crate) fn exited(
        &mut self,
        threads: &mut [Thread],
        exited: &[bool],
        t: u32,
    ) -> Result<Vec<u32>, String> {
        let key = warp_of(threads, t);
        if self.waiting.contains_key(&key) {
            self.try_release(threads, exited, key)
        } else {
            Ok(Vec::new())
        }
    }

    /// A lane still waiting when nothing else can run, and why.
    pub(crate) fn stuck(&self, threads: &[Thread]) -> Option<(u32, String)> {
        let (_, group) = self.waiting.iter().next()?;
        let (t, req) = group[0];
        let p = &threads[t as usize].place;
        Some((
            t,
            format!(
                "{} lane(s) of warp {} of block {} wait at a warp-wide instruction (member mask {:#010x}) that the other lanes never reach",
                group.len(),
                p.warp,
                p.block,
                req.mask
            ),
        ))
    }

    fn try_release(
        &mut self,
        threads: &mut [Thread],
        exited: &[bool],
        key: u64,
    ) -> Result<Vec<u32>, String> {
        let group = &self.waiting[&key];
        let (t0, first) = group[0];
        let where_ = {
            let p = &threads[t0 as usize].place;
            format!("warp {} of block {}", p.warp, p.block)
        };
        let mut offered: [Option<u64>; 32] = [None; 32];
        for &(t, r) in group {
            let lane = threads[t as usize].place.lane;
            if r.kind != first.kind || r.mask != first.mask {
                return Err(format!(
                    "lanes of {where_} wait at different warp-wide instructions or member masks ({:#010x}, {:#010x})",
                    first.mask, r.mask
                ));
            }
            if r.mask & (1 << lane) == 0 {
                return Err(format!(
                    "lane {lane} of {where_} runs a warp-wide instruction with a member mask ({:#010x}) that leaves it out",
                    r.mask
                ));
            }
            offered[lane as usize] = Some(r.value);
        }
        for l in (0..32).filter(|l| first.mask & (1 << l) != 0) {
            let Some(i) = lane_thread(threads, t0, l) else {
                return Err(format!(
                    "the member mask {:#010x} names lane {l}, which {where_} does not have",
                    first.mask
                ));
            };
            if offered[l as usize].is_none() && !exited[i as usize] {
                return Ok(Vec::new());
            }
        }
        let group = self.waiting.remove(&key).expect("looked up");
        let mut released = Vec::with_capacity(group.len());
        for (t, r) in group {
            let lane = threads[t as usize].place.lane;
            let result = match r.kind {
                WarpKind::Shfl(mode) => {
                    let j = source_lane(mode, lane, r.b, r.c);
                    offered[j as usize].ok_or_else(|| {
                        format!(
                            "lane {lane} of {where_} reads lane {j} in a `shfl.sync`, which has exited or is not in the member mask"
                        )
                    })?
                }
                WarpKind::Vote(mode) => {
                    let on = offered.iter().flatten().map(|&v| v != 0);
                    match mode {
                        VoteMode::All => u64::from(on.clone().all(|x| x)),
                        VoteMode::Any => u64::from(on.clone().any(|x| x)),
                        VoteMode::Uni => {
                            let v: Vec<bool> = on.collect();
                            u64::from(v.iter().all(|&x| x == v[0]))
                        }
                        VoteMode::Ballot => offered
                            .iter()
                            .enumerate()
                            .filter(|(_, v)| v.is_some_and(|v| v != 0))
                            .fold(0u64, |m, (l, _)| m | 1 << l),
                    }
                }
            };
            let top = threads[t as usize]
                .frames
                .last_mut()
                .expect("a waiting thread has a frame");
            top.regs[r.d as usize] = result;
            released.push(t);
        }
        Ok(released)
    }
}

/// The lane `lane` reads in a `shfl.sync` of `mode` with `b` and `c`, by
/// the PTX ISA's formula (a lane out of its segment's bounds reads its
/// own value).
pub(crate) fn source_lane(mode: ShflMode, lane: u32, b: u32, c: u32) -> u32 {
    let (bval, cval, segmask) = (b & 0x1f, c & 0x1f, (c >> 8) & 0x1f);
    let max_lane = (lane & segmask) | (cval & !segmask);
    let min_lane = lane & segmask;
    let (j, ok) = match mode {
        ShflMode::Up => {
            let j = lane as i64 - i64::from(bval);
            (j, j >= i64::from(max_lane))
        }
        ShflMode::Down => {
            let j = i64::from(lane + bval);
            (j, j <= i64::from(max_lane))
        }
        ShflMode::Bfly => {
            let j = i64::from(lane ^ bval);
            (j, j <= i64::from(max_lane))
        }
        ShflMode::Idx => {
            let j = i64::from(min_lane | (bval & !segmask));
            (j, j <= i64::from(max_lane))
        }
    };
    if ok { j as u32 } else { lane }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_lanes_follow_the_isa() {
        // A full-warp tree of `shfl.down` (c = 31): in range, the lane
        // `b` above; past lane 31, its own.
        assert_eq!(source_lane(ShflMode::Down, 0, 1, 31), 1);
        assert_eq!(source_lane(ShflMode::Down, 30, 4, 31), 30);
        assert_eq!(source_lane(ShflMode::Down, 16, 16, 31), 16);
        // `up` with c = 0: below lane 0, its own.
        assert_eq!(source_lane(ShflMode::Up, 3, 1, 0), 2);
        assert_eq!(source_lane(ShflMode::Up, 0, 1, 0), 0);
        assert_eq!(source_lane(ShflMode::Bfly, 5, 1, 31), 4);
        assert_eq!(source_lane(ShflMode::Idx, 9, 0, 31), 0);
        // Segments of 8 (c = 0x1807 for `down`: segmask 0x18, clamp 7).
        assert_eq!(source_lane(ShflMode::Down, 8, 3, 0x1807), 11);
        assert_eq!(source_lane(ShflMode::Down, 14, 3, 0x1807), 14);
        assert_eq!(source_lane(ShflMode::Idx, 13, 2, 0x1807), 10);
    }
}
