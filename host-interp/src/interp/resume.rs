//! Resuming deopted workitems: rebuilding the frames a save record
//! describes ([`ResumePlan`], planned once per site) and running on from
//! there.

use super::*;

/// One frame to rebuild when resuming: a function, the bytecode index of one
/// of its deopt sites, and the values of that site's frame state. Outer frames
/// must stop at a call site; their call's arguments are consumed by the frame
/// above them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumeFrame {
    /// The function.
    pub func: FuncId,
    /// The site's bytecode index.
    pub bci: Bci,
    /// The site's frame-state values.
    pub values: Vec<u64>,
}

/// The frames of one deopt site's records, resolved against the program
/// ([`Interpreter::resume_plan`]): resuming from it only copies values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumePlan {
    /// Outermost first.
    frames: Vec<PlannedFrame>,
    /// The record values all frames take.
    values: usize,
    /// The site's bytecode index in the kernel (for errors).
    bci: Bci,
}

/// One frame of a [`ResumePlan`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct PlannedFrame {
    func: FuncId,
    bci: Bci,
    /// The function's locals.
    nlocals: u32,
    /// The locals the first values go to; the rest are its operand stack.
    locals: Vec<u32>,
    /// Its values in the record.
    values: u32,
    /// Operand-stack values (the last ones) the next frame's call consumed
    /// as its arguments: not pushed back.
    consumed: u32,
}

/// A problem with a resume request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResumeError {
    /// No frames.
    #[error("nothing to resume")]
    Empty,
    /// The bci is not a deopt site of the function.
    #[error("bci {bci} is not a deopt site of `{func}`")]
    NotASite {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
    },
    /// The number of values does not match the frame state.
    #[error("site {bci} of `{func}` has {expected} live values, {found} given")]
    WrongValueCount {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
        /// Values the frame state has.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// An outer frame is not stopped at a call to the next frame's function.
    #[error("outer frame `{func}` at bci {bci} is not a call site")]
    NotACall {
        /// Function name.
        func: String,
        /// The bci.
        bci: Bci,
    },
}

impl<'a> Interpreter<'a> {
    /// Run kernel `k` for one workitem, stopping when it is about to execute
    /// the instruction at `site_bci` of the kernel's own frame for the
    /// `occurrence`-th time (0-based). Returns the frame-state values there,
    /// or `Finished` if the workitem never got there.
    pub fn run_to_site(
        &mut self,
        k: FuncId,
        workitem: i64,
        captures: &[u64],
        site_bci: Bci,
        occurrence: u64,
    ) -> Result<Outcome, Exception> {
        self.workitem = Some(workitem);
        self.check_entry(k, captures.len() + 1, true)?;
        if self
            .prog
            .analysis(k)
            .and_then(|a| a.site_at(site_bci))
            .is_none()
        {
            return Err(Exception {
                kind: ExceptionKind::IllegalArgument,
                workitem: Some(workitem),
                message: format!(
                    "bci {site_bci} is not a deopt site of `{}`",
                    self.v().func(k).name
                ),
                trace: Vec::new(),
            });
        }
        self.enter(
            k,
            std::iter::once(workitem as u64).chain(captures.iter().copied()),
        );
        self.exec(Some((site_bci, occurrence)))
    }

    /// Resume a workitem from deopt frame states (outermost frame first) and
    /// run it to its end. This is the entry point deopt replay uses.
    pub fn resume(
        &mut self,
        workitem: Option<i64>,
        frames: &[ResumeFrame],
    ) -> Result<Result<Option<u64>, Exception>, ResumeError> {
        if frames.is_empty() {
            return Err(ResumeError::Empty);
        }
        let planned = frames
            .iter()
            .enumerate()
            .map(|(i, rf)| {
                let callee = frames.get(i + 1).map(|n| n.func);
                self.plan_frame(rf.func, rf.bci, rf.values.len(), callee)
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.stack.clear();
        self.frames.clear();
        for (pf, rf) in planned.iter().zip(frames) {
            self.push_planned(pf, &rf.values);
        }
        self.workitem = workitem;
        Ok(self.exec(None).map(|o| match o {
            Outcome::Finished(v) => v,
            Outcome::Stopped(_) => None,
        }))
    }

    /// How to push the frame of `func` stopped at `bci` with the site's
    /// `n` live values; `callee` is the function of the next (inner)
    /// frame, if any, whose arguments this frame's stack no longer holds.
    /// Checks the frame state against the function's analysis.
    fn plan_frame(
        &self,
        func_id: FuncId,
        bci: Bci,
        n: usize,
        callee: Option<FuncId>,
    ) -> Result<PlannedFrame, ResumeError> {
        let v = self.v();
        let func = v.func(func_id);
        let a = self
            .prog
            .analysis(func_id)
            .ok_or_else(|| ResumeError::NotASite {
                func: func.name.clone(),
                bci,
            })?;
        // A potential site of the analysis, or a conditional branch a
        // compiled version speculated on, whose frame is its entry state.
        let speculated_branch = matches!(
            func.body.get(bci as usize),
            Some(
                Inst::BrIf { .. }
                    | Inst::BrUnless { .. }
                    | Inst::BrNull { .. }
                    | Inst::BrNonNull { .. }
            )
        );
        let site = match a.site_at(bci) {
            Some(s) => std::borrow::Cow::Borrowed(s),
            None => std::borrow::Cow::Owned(
                speculated_branch
                    .then(|| offload_ir::analysis::site_or_frame(v, func_id, a, bci))
                    .flatten()
                    .ok_or_else(|| ResumeError::NotASite {
                        func: func.name.clone(),
                        bci,
                    })?,
            ),
        };
        if site.frame.len() != n {
            return Err(ResumeError::WrongValueCount {
                func: func.name.clone(),
                bci,
                expected: site.frame.len(),
                found: n,
            });
        }
        // An outer frame: stopped at a call whose arguments the next frame
        // consumed.
        let consumed = match callee {
            None => 0,
            Some(next) => match func.body.get(bci as usize) {
                Some(Inst::Call { func: c }) if *c == next => v.func(*c).param_count,
                Some(Inst::CallVirt { method })
                    if v.func(*method).short_name() == v.func(next).short_name() =>
                {
                    v.func(*method).param_count
                }
                _ => {
                    return Err(ResumeError::NotACall {
                        func: func.name.clone(),
                        bci,
                    });
                }
            },
        };
        let locals: Vec<u32> = site.frame.locals.iter().map(|&(l, _)| l.0).collect();
        let stack = n - locals.len();
        if stack < consumed as usize {
            return Err(ResumeError::NotACall {
                func: func.name.clone(),
                bci,
            });
        }
        Ok(PlannedFrame {
            func: func_id,
            bci,
            nlocals: func.locals.len() as u32,
            locals,
            values: n as u32,
            consumed,
        })
    }

    /// Push a planned frame with its `values` (as many as it plans for).
    #[inline]
    fn push_planned(&mut self, pf: &PlannedFrame, values: &[u64]) {
        debug_assert_eq!(values.len(), pf.values as usize);
        let base = self.stack.len();
        self.stack.resize(base + pf.nlocals as usize, 0);
        let (locals, stack) = values.split_at(pf.locals.len());
        for (&l, &x) in pf.locals.iter().zip(locals) {
            self.stack[base + l as usize] = x;
        }
        self.stack
            .extend_from_slice(&stack[..stack.len() - pf.consumed as usize]);
        self.frames.push(Frame {
            func: pf.func,
            pc: pf.bci,
            base: base as u32,
        });
    }

    /// How to rebuild the frames of records from `site` of a kernel version
    /// with metadata `meta`: every frame checked against its function's
    /// analysis once, so that [`Interpreter::resume_planned`] only copies
    /// values. Replay makes one per site it meets.
    pub fn resume_plan(
        &self,
        meta: &offload_deopt::DeoptMetadata,
        site: offload_ir::SiteId,
    ) -> Result<ResumePlan, ResumeError> {
        let site = meta.site(site).ok_or_else(|| ResumeError::NotASite {
            func: self.v().func(meta.kernel).name.clone(),
            bci: u32::MAX,
        })?;
        let frames = site
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let callee = site.frames.get(i + 1).map(|n| n.func);
                self.plan_frame(f.func, f.bci, f.values as usize, callee)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if frames.is_empty() {
            return Err(ResumeError::Empty);
        }
        Ok(ResumePlan {
            values: frames.iter().map(|f| f.values as usize).sum(),
            bci: site.bci,
            frames,
        })
    }

    /// Resume a workitem whose record holds `values` for the site `plan`
    /// was made for, and run it to its end: the value it returns, for a
    /// reducing kernel. (The errors are boxed so that the whole stays a
    /// few words: replay resumes millions of workitems.)
    #[inline]
    pub fn resume_planned(
        &mut self,
        plan: &ResumePlan,
        workitem: i64,
        values: &[u64],
    ) -> Result<Result<Option<u64>, Box<Exception>>, Box<ResumeError>> {
        if plan.values != values.len() {
            return Err(Box::new(ResumeError::WrongValueCount {
                func: self.v().func(plan.frames[0].func).name.clone(),
                bci: plan.bci,
                expected: plan.values,
                found: values.len(),
            }));
        }
        self.stack.clear();
        self.frames.clear();
        let mut at = 0;
        for pf in &plan.frames {
            let n = pf.values as usize;
            self.push_planned(pf, &values[at..at + n]);
            at += n;
        }
        self.workitem = Some(workitem);
        Ok(self.finish())
    }

    /// Resume the workitem of a save record (decoded against its kernel
    /// version's metadata) and run it to its end: the host half of deopt
    /// replay.
    pub fn resume_record(
        &mut self,
        meta: &offload_deopt::DeoptMetadata,
        record: &offload_deopt::Record,
    ) -> Result<Result<(), Exception>, ResumeError> {
        self.resume_values(meta, record.workitem, record.site, &record.values)
    }

    /// [`Interpreter::resume_record`] from a record's parts (no copy of the
    /// values).
    pub fn resume_values(
        &mut self,
        meta: &offload_deopt::DeoptMetadata,
        workitem: i64,
        site: offload_ir::SiteId,
        values: &[u64],
    ) -> Result<Result<(), Exception>, ResumeError> {
        let plan = self.resume_plan(meta, site)?;
        match self.resume_planned(&plan, workitem, values) {
            Ok(r) => Ok(r.map(|_| ()).map_err(|e| *e)),
            Err(e) => Err(*e),
        }
    }
}
