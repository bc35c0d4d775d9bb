//! Who may use the GPU now: launches that share it, and launches that
//! need it alone (docs/DESIGN.md, "Launches in flight").
//!
//! The heap image's coherence is kept per 64 KiB chunk (`offload_heap::
//! resident`): a send writes whole chunks, so a launch that sends a chunk
//! — or whose replays write one, to be sent before its next round — while
//! another launch's kernel writes the same chunk would undo that kernel's
//! writes. So each round holds the GPU in one of two ways, from its start
//! until the next round of the same launch starts (its replays and
//! re-entries between rounds are covered) or the launch ends:
//!
//! * **shared**, with a footprint: the chunks of the arrays of numbers the
//!   kernel captures. A kernel that allocates nothing, captures no object
//!   or array of references and sums into no copies reads and writes only
//!   those chunks, and so do its replays; its round sends only the stale
//!   chunks of its footprint. Rounds with disjoint footprints run at once,
//!   each on a lane of its own (`lane.rs`).
//! * **alone**: every other round (allocation, references, copies, an
//!   image that must grow first). It waits for every other hold to end,
//!   and keeps new ones out meanwhile.
//!
//! A collection moves arrays, so a footprint holds only until the next
//! collection: a hold whose footprint was taken before the last one is
//! **stale** — its launch may now write chunks it did not name — and no
//! round starts beside a stale hold. A stale hold ends at its launch's
//! next round, which takes the footprint anew.
//!
//! **Several GPUs** share one set of holds: a round on one GPU and a
//! round on another hold chunks as two rounds on one GPU do. Each GPU
//! writes only its own image, and the heap merges the chunks two GPUs
//! wrote when one fetch finds both (`offload_heap::resident`); but a fetch
//! between the two GPUs' marks would copy the first GPU's chunk, and the
//! second's, fetched later, would undo it — the merge needs the version
//! the second started from, which the heap keeps only for the parts of a
//! split launch (`offload_heap::twins`). So two GPUs' kernels write one
//! chunk at once only as parts of one split launch, which run beside each
//! other whatever they hold (an allocating part is alone on its own GPU).
//!
//! A round waits for its hold out of the running set of the runtime's
//! safepoints (`Control::outside`): the launch it waits for may need a
//! safepoint to finish. It takes the hold running, so that no collection
//! can come between the footprint it computed and the hold.

use crate::error::OffloadError;
use crate::protocol::Launch;
use offload_heap::layout::Ref;
use offload_heap::resident::CHUNK_BYTES;
use std::ops::Range;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// The chunks a round may touch, as sorted, disjoint runs.
pub(super) use crate::footprint::Footprint;

/// How a round wants the GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Want {
    /// Beside other rounds whose footprints are disjoint from this one.
    Shared(Footprint),
    /// With no other round.
    Alone,
}

/// One launch's hold.
#[derive(Debug)]
struct Hold {
    launch: u64,
    /// The GPU it holds (its image's number).
    gpu: usize,
    /// The split launch it is a part of (`crate::split`), if any.
    split: Option<u64>,
    /// The footprint (`None`: alone).
    footprint: Option<Footprint>,
    /// The collections that had run when the footprint was taken.
    collections: u64,
}

#[derive(Debug, Default)]
struct State {
    holds: Vec<Hold>,
    /// Rounds waiting to hold the GPU alone: no shared round starts
    /// meanwhile (they would keep it from ever being alone).
    alone_waiting: usize,
    /// The next launch's number.
    next: u64,
}

/// Who asks for a hold: the launch's number, the GPU (its image's
/// number), and the split launch it is a part of.
pub(super) type Who = (u64, usize, Option<u64>);

/// The GPU's holds.
#[derive(Debug, Default)]
pub(super) struct Share {
    state: Mutex<State>,
    changed: Condvar,
}

/// What [`Share::hold`] reports of the round it admitted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Admitted {
    /// Other launches' rounds that held the GPU beside this one when it
    /// was admitted (0 for a round alone).
    pub(super) beside: usize,
    /// The round's footprint (`None`: alone).
    pub(super) footprint: Option<Footprint>,
}

fn overlaps(a: &[Range<usize>], b: &[Range<usize>]) -> bool {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].start < b[j].end && b[j].start < a[i].end {
            return true;
        }
        if a[i].end <= b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    false
}

/// How a run of `launch` wants the GPU: shared, with its footprint
/// ([`footprint`]), when it has one and the image (`image_bytes` of heap)
/// holds it; alone otherwise.
pub(super) fn want(
    launch: &Launch<'_>,
    range: &Range<i64>,
    allocates: bool,
    image_bytes: usize,
    sizes: &Sizes,
) -> Result<Want, OffloadError> {
    let Some(fp) = footprint(launch, range, allocates, sizes)? else {
        return Ok(Want::Alone);
    };
    if fp.last().is_some_and(|r| r.end * CHUNK_BYTES > image_bytes) {
        // The image must grow first: only under a hold alone.
        return Ok(Want::Alone);
    }
    Ok(Want::Shared(fp))
}

/// The chunks a run of `launch` over `range` may touch
/// (`crate::footprint`), with the arrays' sizes from `sizes`; `None` when
/// it may touch any.
pub(super) fn footprint(
    launch: &Launch<'_>,
    range: &Range<i64>,
    allocates: bool,
    sizes: &Sizes,
) -> Result<Option<Footprint>, OffloadError> {
    let heap = &launch.env.heap;
    crate::footprint::of_call(&launch.call, allocates, range, |r| sizes.of(heap, r))
}

/// What a part of a split launch over `range` registers with the heap's
/// twins: the chunks it reads or writes ([`footprint`]), or, for one that
/// `allocates`, every chunk of the arrays of numbers it captures
/// (`crate::footprint::of_captures`; it adds its device eden's edges).
pub(super) fn captures(
    launch: &Launch<'_>,
    range: &Range<i64>,
    allocates: bool,
    sizes: &Sizes,
) -> Result<Option<Footprint>, OffloadError> {
    let heap = &launch.env.heap;
    if allocates {
        return crate::footprint::of_captures(&launch.call, |r| sizes.of(heap, r));
    }
    footprint(launch, range, false, sizes)
}

/// The sizes of the arrays runs have named, by address, while the heap's
/// top has not come down since ([`offload_heap::Heap::top_lowered`]: an
/// address then still names the same object). A warm launch of the same
/// arrays reads no header: reading one whose chunk the device wrote costs
/// a copy from the device.
#[derive(Debug, Default)]
pub(super) struct Sizes {
    known: Mutex<(u64, std::collections::HashMap<u32, u64>)>,
}

/// Addresses [`Sizes`] keeps at most (then it starts over).
const SIZES_KEPT: usize = 4096;

impl Sizes {
    /// The bytes of the object at `r`.
    fn of(&self, heap: &offload_heap::Heap, r: Ref) -> Result<u64, OffloadError> {
        let lowered = heap.top_lowered();
        {
            let mut k = self.known.lock().unwrap_or_else(PoisonError::into_inner);
            if k.0 != lowered || k.1.len() >= SIZES_KEPT {
                *k = (lowered, Default::default());
            }
            if let Some(&b) = k.1.get(&r.0) {
                return Ok(b);
            }
        }
        // Not `header`: that would fetch the chunk the device wrote.
        let bytes = crate::footprint::array_bytes(heap.peek_header(r), r)?;
        let mut k = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        // Kept only if the top did not come down meanwhile.
        if k.0 == lowered && heap.top_lowered() == lowered {
            k.1.insert(r.0, bytes);
        }
        Ok(bytes)
    }
}

impl State {
    /// Whether a round of `launch` wanting `want` may start now, when
    /// `collections` collections have run.
    fn admits(&self, (launch, gpu, split): Who, want: &Want, collections: u64) -> bool {
        // Parts of one split launch on other GPUs write their own images,
        // and the heap's twins merge what they write of one chunk: a
        // part's round, alone or not, runs beside them.
        let sibling = |h: &Hold| split.is_some() && h.split == split && h.gpu != gpu;
        let mut others = self
            .holds
            .iter()
            .filter(|h| h.launch != launch && !sibling(h));
        match want {
            Want::Alone => others.next().is_none(),
            Want::Shared(fp) => {
                self.alone_waiting == 0
                    && others.all(|h| {
                        h.collections == collections
                            && h.footprint.as_ref().is_some_and(|o| !overlaps(fp, o))
                    })
            }
        }
    }
}

impl Share {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A number for a launch's holds.
    pub(super) fn launch(&self) -> u64 {
        let mut st = self.lock();
        st.next += 1;
        st.next
    }

    /// Hold the GPU for a round of `launch`: ends the launch's last hold,
    /// then — with `want()` asked again after each wait (a collection
    /// while waiting moves the arrays a footprint names) — waits until the
    /// round may start, through `outside` (the running worker leaving the
    /// safepoints' running set while it waits). `collections()` counts
    /// the collections so far. `None`, holding nothing, once `give_up()`
    /// says so while it waits (the launch was interrupted: its deadline
    /// passed behind another launch).
    pub(super) fn hold(
        &self,
        who: Who,
        want: &mut dyn FnMut() -> Result<Want, OffloadError>,
        collections: &dyn Fn() -> u64,
        outside: &dyn Fn(&mut dyn FnMut()),
        give_up: &dyn Fn() -> bool,
    ) -> Result<Option<Admitted>, OffloadError> {
        let (launch, gpu, split) = who;
        self.release(launch);
        loop {
            if give_up() {
                return Ok(None);
            }
            let w = want()?;
            let n = collections();
            {
                let mut st = self.lock();
                if st.admits(who, &w, n) {
                    let beside = st.holds.len();
                    let footprint = match w {
                        Want::Shared(fp) => Some(fp),
                        Want::Alone => None,
                    };
                    st.holds.push(Hold {
                        launch,
                        gpu,
                        split,
                        footprint: footprint.clone(),
                        collections: n,
                    });
                    return Ok(Some(Admitted { beside, footprint }));
                }
            }
            outside(&mut || {
                let mut st = self.lock();
                let alone = matches!(w, Want::Alone);
                st.alone_waiting += usize::from(alone);
                // Woken by every change of the holds; a collection that
                // makes a hold stale changes nothing here, so the wait is
                // bounded and the round looks again.
                while !st.admits(who, &w, n) {
                    let (g, timeout) = self
                        .changed
                        .wait_timeout(st, std::time::Duration::from_millis(5))
                        .unwrap_or_else(PoisonError::into_inner);
                    st = g;
                    if timeout.timed_out() && (collections() != n || give_up()) {
                        break;
                    }
                }
                st.alone_waiting -= usize::from(alone);
            });
        }
    }

    /// End `launch`'s hold, if it has one.
    pub(super) fn release(&self, launch: u64) {
        let mut st = self.lock();
        let before = st.holds.len();
        st.holds.retain(|h| h.launch != launch);
        if st.holds.len() != before {
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
// One-run footprints are written as arrays of one range.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;
    use crate::footprint::normalize;

    fn shared(runs: &[Range<usize>]) -> Want {
        Want::Shared(normalize(runs.to_vec()))
    }

    #[test]
    fn footprints_overlap_only_where_they_share_a_chunk() {
        assert!(!overlaps(&[0..2, 5..7], &[2..5, 7..9]));
        assert!(overlaps(&[0..2, 5..7], &[6..8]));
        assert!(overlaps(&[3..4], &[0..10]));
        assert!(!overlaps(&[], &[0..10]));
        assert_eq!(
            normalize(vec![5..7, 0..2, 1..3, 7..8, 9..9]),
            vec![0..3, 5..8]
        );
    }

    #[test]
    fn shared_rounds_with_disjoint_footprints_are_admitted_together() {
        let mut st = State::default();
        st.holds.push(Hold {
            launch: 1,
            gpu: 0,
            split: None,
            footprint: Some(vec![0..4]),
            collections: 0,
        });
        assert!(st.admits((2, 0, None), &shared(&[4..8]), 0));
        assert!(!st.admits((2, 0, None), &shared(&[3..5]), 0));
        // A launch's own hold never keeps it out.
        assert!(st.admits((1, 0, None), &shared(&[0..8]), 0));
        // Nothing is alone beside a hold.
        assert!(!st.admits((2, 0, None), &Want::Alone, 0));
        assert!(st.admits((1, 0, None), &Want::Alone, 0));
    }

    #[test]
    fn a_hold_from_before_a_collection_keeps_every_round_out() {
        let mut st = State::default();
        st.holds.push(Hold {
            launch: 1,
            gpu: 0,
            split: None,
            footprint: Some(vec![0..4]),
            collections: 0,
        });
        assert!(!st.admits((2, 0, None), &shared(&[10..12]), 1));
    }

    #[test]
    fn a_round_waiting_to_be_alone_keeps_new_shared_rounds_out() {
        let mut st = State::default();
        st.holds.push(Hold {
            launch: 1,
            gpu: 0,
            split: None,
            footprint: None,
            collections: 0,
        });
        assert!(!st.admits((2, 0, None), &shared(&[10..12]), 0));
        st.holds.clear();
        st.alone_waiting = 1;
        assert!(!st.admits((2, 0, None), &shared(&[10..12]), 0));
        assert!(st.admits((2, 0, None), &Want::Alone, 0));
    }

    #[test]
    fn parts_of_one_split_launch_on_other_gpus_share_chunks() {
        let mut st = State::default();
        st.holds.push(Hold {
            launch: 1,
            gpu: 0,
            split: Some(7),
            footprint: Some(vec![0..4]),
            collections: 0,
        });
        // Another part of split 7, on GPU 1: admitted over the same
        // chunks, even after a collection (the twins cover any chunk).
        assert!(st.admits((2, 1, Some(7)), &shared(&[0..4]), 0));
        assert!(st.admits((2, 1, Some(7)), &shared(&[0..4]), 1));
        // On the same GPU, another split, or no split: the usual rule.
        assert!(!st.admits((2, 0, Some(7)), &shared(&[0..4]), 0));
        assert!(!st.admits((2, 1, Some(8)), &shared(&[0..4]), 0));
        assert!(!st.admits((2, 1, None), &shared(&[0..4]), 0));
        // A part alone on its GPU (it allocates, or its image grows) runs
        // beside its siblings on other GPUs, and they beside it; any
        // other launch waits for it.
        assert!(st.admits((2, 1, Some(7)), &Want::Alone, 0));
        assert!(!st.admits((2, 0, Some(7)), &Want::Alone, 0));
        assert!(!st.admits((2, 1, Some(8)), &Want::Alone, 0));
        st.holds.push(Hold {
            launch: 2,
            gpu: 1,
            split: Some(7),
            footprint: None,
            collections: 0,
        });
        assert!(st.admits((3, 2, Some(7)), &shared(&[0..4]), 0));
        assert!(st.admits((3, 2, Some(7)), &Want::Alone, 1));
        assert!(!st.admits((3, 2, None), &shared(&[9..10]), 0));
    }

    #[test]
    fn a_waiting_round_starts_when_the_hold_in_its_way_ends() {
        let share = std::sync::Arc::new(Share::default());
        let (a, b) = (share.launch(), share.launch());
        let plain = |f: &mut dyn FnMut()| f();
        let none = || 0;
        let no = || false;
        share
            .hold(
                (a, 0, None),
                &mut || Ok(shared(&[0..4])),
                &none,
                &plain,
                &no,
            )
            .unwrap();
        let s2 = share.clone();
        let waiter = std::thread::spawn(move || {
            s2.hold(
                (b, 0, None),
                &mut || Ok(shared(&[2..6])),
                &|| 0,
                &|f: &mut dyn FnMut()| f(),
                &|| false,
            )
            .unwrap()
            .unwrap()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!waiter.is_finished(), "admitted over an overlapping hold");
        share.release(a);
        let got = waiter.join().unwrap();
        assert_eq!((got.beside, got.footprint), (0, Some(vec![2..6])));
        // Disjoint: admitted at once, beside the one hold there is.
        let c = share.launch();
        let got = share
            .hold(
                (c, 0, None),
                &mut || Ok(shared(&[8..9])),
                &none,
                &plain,
                &no,
            )
            .unwrap()
            .unwrap();
        assert_eq!((got.beside, got.footprint), (1, Some(vec![8..9])));
        // A round that gives up while it waits holds nothing.
        let d = share.launch();
        let asked = std::sync::atomic::AtomicBool::new(false);
        let got = share
            .hold(
                (d, 0, None),
                &mut || Ok(Want::Alone),
                &none,
                &plain,
                &|| asked.swap(true, std::sync::atomic::Ordering::Relaxed),
            )
            .unwrap();
        assert!(got.is_none());
        share.release(c);
        share.release(b);
        assert!(share.lock().holds.is_empty());
    }
}
