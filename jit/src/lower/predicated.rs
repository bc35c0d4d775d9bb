//! Predicated loops, lowered alike by both backends (the analysis is the
//! CPU's `cpu::opt::loop_predicates`, which the backends pass in: the
//! walker does not depend on a backend): the body around them, and the
//! unrolled unchecked copies of one. What differs — how the entry test is
//! evaluated and which accesses go unchecked — is each backend's.

use super::{Backend, Walker};
use crate::JitError;
use offload_ir::Bci;

/// An unrolled loop's round test (`Walker::unchecked_loop_copies`): the
/// header test's branch, and the lowering of the test of a round.
pub(crate) type RoundTest<'r, W> = (Bci, &'r mut dyn FnMut(&mut W));

impl<B: Backend> Walker<'_, B> {
    /// Lower the current frame's body with `loops` (the kernel's
    /// predicated loops: an inlined callee's frame has none) in two versions
    /// each: `entry` lowers a loop's entry — its test, the unchecked copies
    /// and the jump to the checked version — given whether the code before
    /// it is terminated; the checked version is lowered here, from the
    /// header.
    pub(crate) fn body_with_predicated_loops<L>(
        &mut self,
        loops: &[L],
        header: impl Fn(&L) -> Bci,
        mut entry: impl FnMut(&mut Self, &L, bool) -> Result<(), JitError>,
    ) -> Result<(), JitError> {
        let loops = if self.outer.is_empty() { loops } else { &[] };
        let n = self.v.func(self.cur.func).body.len() as Bci;
        let mut terminated = true;
        let mut from = 0;
        for lp in loops {
            let h = header(lp);
            let mut t = self.lower_range(from, h, terminated)?;
            let injected = self.opts.inject.is_some_and(|i| i.site_bci == h);
            if self.lands_at(h) && !injected {
                // Resumed at the header, the loop's test decides which
                // version runs the rest, as on any other entry. (An
                // injected deopt at the header sits in each version, where
                // a landing cannot follow it: the re-entry copy's does.)
                let at = self.cur.blocks[&h].clone();
                self.cur.depth = self.depth_at(h);
                t = self.landing(h, Some(at), t);
            }
            entry(self, lp, t)?;
            terminated = true;
            from = h;
        }
        self.lower_range(from, n, terminated)?;
        Ok(())
    }

    /// Lower the unchecked version of the loop `[h, last]` (its header and
    /// last instruction) from `fast` (the entry test passed), in `copies`
    /// copies of the loop, each with
    /// blocks of its own: copy j's back-edges go to copy j + 1's header
    /// without a poll, and the last copy's to the first's through the
    /// safepoint poll, so that one poll serves the copies' iterations. No
    /// landings in them: a workitem resumed in the loop enters it where
    /// its test is made, or in the checked version. The loop's blocks are
    /// the checked version's again afterwards.
    ///
    /// With `round` — the header test's branch and a lowering of the
    /// round's test — each round of the copies starts with that test
    /// (which leaves for the checked version when fewer than `copies`
    /// iterations may be left), and the copies' header tests are not made.
    pub(crate) fn unchecked_loop_copies(
        &mut self,
        (h, last): (Bci, Bci),
        copies: u32,
        fast: B::Block,
        mut round: Option<RoundTest<'_, Self>>,
    ) -> Result<(), JitError> {
        let inside: Vec<(Bci, B::Block)> = self
            .cur
            .blocks
            .iter()
            .filter(|&(k, _)| (h..=last).contains(k))
            .map(|(&k, b)| (k, b.clone()))
            .collect();
        let copies = copies.max(1) as usize;
        let mut headers = vec![fast];
        headers.extend((1..copies).map(|_| B::new_block(self)));
        let landings = self.landings.take();
        let mut res: Result<bool, JitError> = Ok(true);
        for j in 0..copies {
            for (k, _) in &inside {
                let nb = if *k == h {
                    headers[j].clone()
                } else {
                    B::new_block(self)
                };
                self.cur.blocks.insert(*k, nb);
            }
            if j == 0
                && let Some((test, emit)) = round.as_mut()
            {
                // The round's test, then copy 0's header in a block of its
                // own (the last copy's back-edges come to the test).
                let c0 = B::new_block(self);
                B::switch_to(self, &headers[0]);
                emit(self);
                B::jump(self, &c0);
                self.cur.blocks.insert(h, c0);
                self.cur.stays = Some(*test);
            }
            let next = headers[(j + 1) % copies].clone();
            let last_copy = j + 1 == copies;
            res = self.lower_range(h, h + 1, true).and_then(|t| {
                self.cur.blocks.insert(h, next);
                self.cur.poll_free_header = (!last_copy).then_some(h);
                self.lower_range(h + 1, last + 1, t)
            });
            self.cur.poll_free_header = None;
            match res {
                Ok(false) => {
                    // The last instruction falls through out of the loop.
                    let after = self.cur.blocks[&(last + 1)].clone();
                    B::jump(self, &after);
                }
                Ok(true) => {}
                Err(_) => break,
            }
        }
        self.cur.stays = None;
        self.landings = landings;
        for (k, b) in inside {
            self.cur.blocks.insert(k, b);
        }
        res.map(|_| ())
    }
}
