//! Calls: every call is inlined ([`Walker::inline`]); a virtual call tests
//! the receiver's class and inlines the matching implementation
//! ([`Walker::call_virtual`]).

use super::{Backend, Frame, Outer, Walker, plan};
use crate::JitError;
use offload_ir::{Bci, FuncId, Kind};

impl<B: Backend> Walker<'_, B> {
    /// Inline a call of `callee` at `bci`: pop its arguments, lower its body
    /// in a frame of its own, and go on where it returns. Returns the
    /// result, if the callee returns one (not pushed).
    ///
    /// Recursion, nesting deeper than [`super::MAX_INLINE_DEPTH`] and more
    /// than [`super::MAX_INLINED_INSTS`] inlined instructions are refused
    /// with [`JitError::Unsupported`] (the kernel runs on the interpreter).
    pub(crate) fn inline(&mut self, bci: Bci, callee: FuncId) -> Result<Option<B::Val>, JitError> {
        let f = self.v.func(callee);
        let chain: Vec<FuncId> = self
            .outer
            .iter()
            .map(|o| o.frame.func)
            .chain([self.cur.func])
            .collect();
        let analysis = self.inliner.enter(self.prog, &chain, callee, bci)?;
        // Arguments, last first.
        let mut args = Vec::with_capacity(f.param_count as usize);
        for p in f.params().iter().rev() {
            args.push(self.pop(p.ty.kind()));
        }
        args.reverse();
        self.calls += 1;
        let n = self.calls;
        let join = B::join(self, f.ret.map(|t| t.kind()), false, n);
        let mut frame = Frame::new(callee, analysis, n);
        frame.ret_to = Some(join.clone());
        let caller = std::mem::replace(&mut self.cur, frame);
        self.outer.push(Outer {
            frame: caller,
            call_bci: bci,
        });
        for (i, l) in f.locals.iter().enumerate() {
            let kind = l.ty.kind();
            let var = B::local_var(self, n, i, kind);
            let val = match args.get(i) {
                Some(a) => a.clone(),
                None => self.zero(kind),
            };
            B::def_var(self, &var, kind, val);
            self.cur.locals.push(var);
        }
        self.make_blocks();
        // The callee's re-entry points get their sites (for this call
        // chain) now, in bytecode order, whether or not this copy of the
        // body has landings: a backend whose hot code has none (the CPU's)
        // and one whose has (the PTX) then number them alike.
        let points: Vec<_> = analysis
            .sites
            .iter()
            .filter(|s| offload_deopt::reentry_point(s))
            .map(|s| s.bci)
            .collect();
        for bci in points {
            self.site_id(bci);
        }
        let lowered = self.whole_body();
        let o = self.outer.pop().expect("pushed");
        self.cur = o.frame;
        lowered?;
        Ok(B::enter_join(self, &join))
    }

    /// `callvirt method` at `bci`: test the receiver's class against the
    /// classes of each implementation (every subclass of the method's class
    /// that this module has, or the classes the profile saw) and inline the
    /// matching one; a receiver of any other class deopts and the
    /// interpreter makes the call.
    pub(crate) fn call_virtual(&mut self, bci: Bci, method: FuncId) -> Result<(), JitError> {
        let m = self.v.func(method);
        let plan::VirtualCall {
            targets,
            miss,
            assumed,
        } = plan::virtual_call(self.prog, self.spec, self.cur.func, method, bci)?;
        if let Some(a) = assumed {
            self.speculate(bci, a);
        }
        let nargs = m.param_count as usize;
        let d0 = self.cur.depth;
        let recv_var = self.stack_var(d0 - nargs, Kind::Ref);
        let recv = B::use_var(self, &recv_var, Kind::Ref);
        self.null_check_unless_known(recv.clone(), bci, nargs - 1);
        // The receiver's page's tag (`Ok`) or its class (`Err`).
        let tag = match B::page_tag(self, recv.clone()) {
            Some(page) => Ok(page),
            None => Err(B::class_tag(self, recv.clone())),
        };
        self.calls += 1;
        let join = B::join(self, m.ret.map(|t| t.kind()), true, self.calls);
        match tag {
            Ok(page) => self.dispatch_by_page(bci, recv, page, targets, miss, &join)?,
            Err(tag) => self.dispatch_by_class(bci, tag, targets, miss, &join)?,
        }
        let r = B::enter_join(self, &join);
        self.cur.depth = d0 - nargs;
        if let (Some(t), Some(r)) = (m.ret, r) {
            self.push(t.kind(), r);
        }
        Ok(())
    }

    /// The implementations `targets` of a virtual call at `bci` chosen by
    /// the receiver's class `tag`, each inlined once and ending at `join`;
    /// a class no implementation was compiled for deopts (`miss`).
    fn dispatch_by_class(
        &mut self,
        bci: Bci,
        tag: B::Val,
        targets: Vec<(FuncId, Vec<u32>)>,
        miss: offload_deopt::Reason,
        join: &B::Join,
    ) -> Result<(), JitError> {
        let d0 = self.cur.depth;
        for (imp, ids) in targets {
            let hit = B::tag_in(self, tag.clone(), &ids);
            let next = B::guard(self, hit);
            self.cur.depth = d0;
            let r = self.inline(bci, imp)?;
            B::jump_join(self, join, r);
            B::switch_to(self, &next);
        }
        // A class no implementation was compiled for (or, speculating, one
        // the profile never saw): the interpreter calls.
        self.cur.depth = d0;
        self.deopt_here(bci, miss);
        Ok(())
    }

    /// The implementations `targets` of a virtual call at `bci` chosen by
    /// the tag `page` of the receiver `recv`'s page ([`Backend::page_tag`]),
    /// each inlined once and ending at `join`: the page's tag is tested
    /// against each implementation's classes; when none matches and the
    /// page names no class, the header's class is tested the same way (a
    /// receiver the launch itself made on mixed pages); a class no
    /// implementation was compiled for deopts (`miss`). On the hot path
    /// the tests read the table alone: no test of the tag's sign, no
    /// header.
    fn dispatch_by_page(
        &mut self,
        bci: Bci,
        recv: B::Val,
        page: B::Val,
        targets: Vec<(FuncId, Vec<u32>)>,
        miss: offload_deopt::Reason,
        join: &B::Join,
    ) -> Result<(), JitError> {
        let d0 = self.cur.depth;
        let arms: Vec<B::Block> = targets.iter().map(|_| B::new_block(self)).collect();
        let chain = |w: &mut Self, tag: &B::Val| {
            for ((_, ids), arm) in targets.iter().zip(&arms) {
                let hit = B::tag_in(w, tag.clone(), ids);
                B::branch_on(w, hit, true, arm);
            }
        };
        chain(self, &page);
        let deopt = B::new_block(self);
        let mixed = B::is_negative(self, page);
        B::branch_on(self, mixed, false, &deopt);
        let tag = B::header_tag(self, recv);
        chain(self, &tag);
        B::jump(self, &deopt);
        // A class no implementation was compiled for (or, speculating, one
        // the profile never saw): the interpreter calls.
        B::switch_to(self, &deopt);
        self.deopt_here(bci, miss);
        for ((imp, _), arm) in targets.iter().zip(&arms) {
            B::switch_to(self, arm);
            self.cur.depth = d0;
            let r = self.inline(bci, *imp)?;
            B::jump_join(self, join, r);
        }
        self.cur.depth = d0;
        Ok(())
    }

    /// The zero of kind `k`.
    pub(crate) fn zero(&mut self, k: Kind) -> B::Val {
        B::constant(self, super::Const::zero(k))
    }
}
