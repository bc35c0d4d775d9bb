//! Re-entry points: starting a stopped workitem again in compiled code,
//! from its save record, at the instruction where it stopped.
//!
//! A workitem that stopped for a safepoint (at a back-edge poll, or in an
//! allocation's slow path) or for a full heap left a record whose values
//! are the live state of every frame at a re-entry point
//! ([`offload_deopt::reentry_point`]). When a backend lowers a copy of the
//! body with [`Walker::lower_with_landings`], each re-entry point it meets
//! — in the kernel or in any inlined copy of a callee — gets a *landing*:
//! a block that loads every value of the site's record into the variables
//! the site's exit stores from (the same [`Walker::exit`] map, so exit and
//! re-entry cannot disagree) and jumps to the instruction, which then runs
//! as if control had come there normally. The backend's slot loop reads
//! the record's site word and dispatches to the landing of that site.
//!
//! A landing for a loop header jumps to the header's block; one for an
//! allocation starts a block of its own at the instruction (the code
//! before falls into it). A landing below a loop's header gives the loop a
//! second entry, so the CPU backend lands in its hot copies of the body
//! only at the kernel's outermost loop headers ([`Scope::OutermostLoops`])
//! and keeps the other landings in a copy of their own (`crate::cpu`); the
//! PTX has one copy with every landing.

use super::{Backend, Walker};
use crate::JitError;
use offload_deopt::Reason;
use offload_ir::analysis::FuncAnalysis;
use offload_ir::{Bci, SiteId};

/// Which re-entry points a copy of the body lands at.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every one, in the kernel and in inlined callees.
    Every,
    /// Only the headers of the kernel's outermost loops: the landings a
    /// hot copy of the body can have and keep its loops natural (a loop
    /// entered at its header has one entry; one entered below it, or
    /// inside another loop, has two).
    OutermostLoops,
}

/// Whether the loop header `h` of `a` lies in no other loop (bytecode
/// order: no back-edge spans it other than its own).
pub(crate) fn outermost_header(a: &FuncAnalysis, h: Bci) -> bool {
    a.loop_headers.contains(&h)
        && !a
            .back_edges
            .iter()
            .any(|e| e.to != h && e.to < h && h <= e.from)
}

impl<B: Backend> Walker<'_, B> {
    /// Lower the current frame's whole body (its blocks made, entered by
    /// no fall-through) with a landing at every re-entry point, and return
    /// the landings by site.
    pub(crate) fn lower_with_landings(&mut self) -> Result<Vec<(SiteId, B::Block)>, JitError> {
        let n = self.v.func(self.cur.func).body.len() as Bci;
        self.landing_in(Scope::Every, |w| w.lower_range(0, n, true).map(|_| ()))
    }

    /// Run `lower` with landings at the re-entry points `scope` names, and
    /// return the landings it made, by site.
    pub(crate) fn landing_in(
        &mut self,
        scope: Scope,
        lower: impl FnOnce(&mut Self) -> Result<(), JitError>,
    ) -> Result<Vec<(SiteId, B::Block)>, JitError> {
        let outer = (self.landings.replace(Vec::new()), self.landing_scope);
        self.landing_scope = scope;
        let res = lower(self);
        let landings = std::mem::replace(&mut self.landings, outer.0).unwrap_or_default();
        self.landing_scope = outer.1;
        res?;
        Ok(landings)
    }

    /// Whether the current frame's instruction at `bci` gets a landing.
    pub(crate) fn lands_at(&self, bci: Bci) -> bool {
        self.landings.is_some()
            && self
                .cur
                .analysis
                .site_at(bci)
                .is_some_and(offload_deopt::reentry_point)
            && match self.landing_scope {
                Scope::Every => true,
                Scope::OutermostLoops => {
                    self.outer.is_empty() && outermost_header(self.cur.analysis, bci)
                }
            }
            && !self.landed_here(bci)
    }

    /// Whether the kernel's instruction at `bci` has its landing in this
    /// copy already (a predicated loop's header lands where its predicate
    /// is evaluated, not again in its checked version).
    fn landed_here(&self, bci: Bci) -> bool {
        let Some(site) = self.meta.site_at(bci).filter(|_| self.outer.is_empty()) else {
            return false;
        };
        self.landings
            .as_ref()
            .is_some_and(|l| l.iter().any(|(id, _)| *id == site.id))
    }

    /// Emit the landing of the current frame's instruction at `bci` (with
    /// the stack depth of its entry already set), the code before being
    /// `terminated` or not. The landing jumps to `leader`, the block that
    /// starts at the instruction, or with `None` to a new block that the
    /// code before falls into. Returns whether the code is now terminated:
    /// for a leader the caller enters its block next; otherwise emission
    /// goes on in the new block.
    pub(crate) fn landing(&mut self, bci: Bci, leader: Option<B::Block>, terminated: bool) -> bool {
        let target = match &leader {
            Some(b) => b.clone(),
            None => B::new_block(self),
        };
        if !terminated {
            B::jump(self, &target);
        }
        let id = self.site_id(bci);
        // Every re-entry point has `Safepoint` among its reasons (a poll,
        // or an allocation's slow path); the values are the same for all.
        let exit = self.exit(id, Reason::Safepoint, bci);
        let land = B::new_block(self);
        B::switch_to(self, &land);
        for s in &exit.slots {
            let x = B::reentry_value(self, s.word, s.kind);
            B::def_var(self, &s.var, s.kind, x);
        }
        B::jump(self, &target);
        self.landings
            .as_mut()
            .expect("lands_at checked")
            .push((id, land));
        if leader.is_some() {
            true
        } else {
            B::switch_to(self, &target);
            false
        }
    }
}
