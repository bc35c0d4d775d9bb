//! One simulated thread: its call stack of register files and the
//! execution of one instruction at a time.

use crate::alu;
use crate::inst::{
    Addr, AtomOp, Base, BoolOp, Inst, Op, Opnd, Scope, Sem, ShflMode, Space, Sreg, Ty, TyKind,
    VoteMode,
};
use crate::mem::{self, Fault, Kind, MemMap};
use crate::module::Module;

/// A frame: a function, its next instruction and its registers.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) func: u32,
    pub(crate) pc: u32,
    pub(crate) regs: Vec<u64>,
    /// The caller's registers that receive this frame's results.
    pub(crate) rets: Vec<u32>,
}

/// Where a thread sits in the grid, and its windows.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    pub(crate) tid: [u32; 3],
    pub(crate) ntid: [u32; 3],
    pub(crate) ctaid: [u32; 3],
    pub(crate) nctaid: [u32; 3],
    /// Linear thread index in the grid.
    pub(crate) global: u32,
    /// Linear block index.
    pub(crate) block: u32,
    /// Lane in the warp.
    pub(crate) lane: u32,
    /// Warp in the block.
    pub(crate) warp: u32,
    pub(crate) nwarp: u32,
    pub(crate) sm: u32,
    pub(crate) nsm: u32,
    /// Base addresses of the parameter buffer, the block's shared memory,
    /// the thread's local memory and the module's data.
    pub(crate) param: u64,
    pub(crate) shared: u64,
    pub(crate) local: u64,
    pub(crate) data: u64,
}

/// What a step did, besides going on.
#[derive(Debug, PartialEq)]
pub(crate) enum Event {
    /// Ready for the next instruction.
    Next,
    /// Yields its turn (`nanosleep`).
    Yield,
    /// Waits for its warp's lanes at a `shfl.sync` or `vote.sync`
    /// (`crate::grid` writes the result into the destination register).
    Warp(WarpReq),
    /// Waits at barrier `n`.
    Barrier(u32),
    /// Finished.
    Exit,
}

/// A lane's part in a warp-wide instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WarpReq {
    /// What the instruction does.
    pub(crate) kind: WarpKind,
    /// The destination register (in the lane's current frame).
    pub(crate) d: u32,
    /// The value the lane offers (`shfl`'s `a`; `vote`'s predicate, 0 or 1).
    pub(crate) value: u64,
    /// `shfl`'s `b` and `c`.
    pub(crate) b: u32,
    pub(crate) c: u32,
    /// The lanes taking part.
    pub(crate) mask: u32,
}

/// A warp-wide instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WarpKind {
    Shfl(ShflMode),
    Vote(VoteMode),
}

/// Why a thread stopped with an error.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Stop {
    Mem(Fault, u64, u64),
    Trap,
}

/// What the last instruction did that the cost model counts
/// (`crate::cost`); `None` for everything else.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Probe {
    /// A load, store or atomic that reached global memory (device or
    /// mapped host memory, or the module's data), whatever its space
    /// qualifier said.
    Global {
        /// The function and instruction index (one warp-wide instruction
        /// is the same instruction run by the warp's lanes together).
        func: u32,
        pc: u32,
        addr: u64,
        size: u64,
        what: Access,
    },
    /// A fence (or `membar`).
    Fence { sc: bool, scope: Scope },
}

/// The kind of a global access.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Access {
    /// A load; `strong` for `.volatile`, `.relaxed` and `.acquire`, with
    /// its scope (`.volatile` is `.sys`).
    Load {
        strong: bool,
        scope: Option<Scope>,
    },
    Store,
    Atomic,
}

/// A simulated thread.
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) frames: Vec<Frame>,
    pub(crate) place: Place,
    /// Instructions executed.
    pub(crate) steps: u64,
    /// Set by the step that accessed global memory or fenced.
    pub(crate) probe: Option<Probe>,
}

impl Thread {
    /// A thread starting `func` with `args` in its parameter registers.
    pub(crate) fn new(m: &Module, func: u32, place: Place, args: &[u64]) -> Thread {
        let f = &m.funcs[func as usize];
        let mut regs = vec![0u64; f.regs.len()];
        for (&r, &a) in f.arg_regs.iter().zip(args) {
            regs[r as usize] = a;
        }
        Thread {
            frames: vec![Frame {
                func,
                pc: 0,
                regs,
                rets: Vec::new(),
            }],
            place,
            steps: 0,
            probe: None,
        }
    }

    /// The instruction about to run (for diagnostics).
    pub(crate) fn current<'m>(&self, m: &'m Module) -> Option<(&'m str, &'m Inst)> {
        let fr = self.frames.last()?;
        let f = &m.funcs[fr.func as usize];
        f.code.get(fr.pc as usize).map(|i| (f.name.as_str(), i))
    }

    fn sreg(&self, s: Sreg) -> u64 {
        let p = &self.place;
        u64::from(match s {
            Sreg::Tid(d) => p.tid[d as usize],
            Sreg::Ntid(d) => p.ntid[d as usize],
            Sreg::Ctaid(d) => p.ctaid[d as usize],
            Sreg::Nctaid(d) => p.nctaid[d as usize],
            Sreg::Laneid => p.lane,
            Sreg::Warpid => p.warp,
            Sreg::Nwarpid => p.nwarp,
            Sreg::Smid => p.sm,
            Sreg::Nsmid => p.nsm,
            Sreg::Clock => self.steps as u32,
            Sreg::Clock64 => return self.steps,
            Sreg::Globaltimer => {
                return std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
            }
        })
    }

    fn window(&self, space: Space) -> u64 {
        match space {
            Space::Param => self.place.param,
            Space::Shared => self.place.shared,
            Space::Local => self.place.local,
            _ => self.place.data,
        }
    }

    /// Runs one instruction.
    pub(crate) fn step(&mut self, m: &Module, mem: &MemMap) -> Result<Event, Stop> {
        self.steps += 1;
        let depth = self.frames.len() - 1;
        let fr = &self.frames[depth];
        let func = &m.funcs[fr.func as usize];
        let Some(inst) = func.code.get(fr.pc as usize) else {
            // Falling off the end of a function returns.
            return self.ret(m);
        };
        self.frames[depth].pc += 1;
        if let Some((p, neg)) = inst.guard
            && (self.frames[depth].regs[p as usize] != 0) == neg
        {
            return Ok(Event::Next);
        }
        let rd = |t: &Thread, o: &Opnd| -> u64 {
            match *o {
                Opnd::Reg(r) => t.frames[depth].regs[r as usize],
                Opnd::Imm(v) => v,
                Opnd::Sreg(s) => t.sreg(s),
                Opnd::Sym(space, off) => t.window(space).wrapping_add(off),
            }
        };
        // Results are kept extended to 64 bits by their type (sign for `.s`
        // types, zero otherwise): PTX's rule for a destination register
        // wider than the instruction type. Reads take the low bits.
        macro_rules! wr {
            ($d:expr, $ty:expr, $v:expr) => {{
                let v = $ty.extend($v);
                self.frames[depth].regs[$d as usize] = v;
            }};
        }
        match &inst.op {
            Op::Mov { ty, d, a } => {
                let v = rd(self, a);
                wr!(*d, ty, v)
            }
            Op::Pack {
                d,
                parts,
                part_bits,
            } => {
                let mut v = 0u64;
                for (i, p) in parts.iter().enumerate() {
                    let part = rd(self, p) & mask(*part_bits);
                    v |= part << (i as u32 * part_bits);
                }
                self.frames[depth].regs[*d as usize] = v;
            }
            Op::Unpack {
                parts,
                a,
                part_bits,
            } => {
                let v = rd(self, a);
                for (i, &p) in parts.iter().enumerate() {
                    self.frames[depth].regs[p as usize] =
                        (v >> (i as u32 * part_bits)) & mask(*part_bits);
                }
            }
            Op::Bin { op, ty, d, a, b } => {
                let (x, y) = (rd(self, a), rd(self, b));
                let r = alu::bin(*op, *ty, x, y);
                if *op == crate::inst::BinOp::MulWide {
                    let wide = Ty {
                        kind: ty.kind,
                        bits: ty.bits * 2,
                    };
                    wr!(*d, wide, r)
                } else {
                    wr!(*d, ty, r)
                }
            }
            Op::Un { op, ty, d, a } => {
                let r = alu::un(*op, *ty, rd(self, a));
                let rty = if matches!(op, crate::inst::UnOp::Clz | crate::inst::UnOp::Popc) {
                    Ty {
                        kind: TyKind::U,
                        bits: 32,
                    }
                } else {
                    *ty
                };
                wr!(*d, rty, r)
            }
            Op::Mad {
                mode,
                ty,
                d,
                a,
                b,
                c,
            } => {
                let r = alu::mad(*mode, *ty, rd(self, a), rd(self, b), rd(self, c));
                let rty = if *mode == crate::inst::BinOp::MulWide {
                    Ty {
                        kind: ty.kind,
                        bits: ty.bits * 2,
                    }
                } else {
                    *ty
                };
                wr!(*d, rty, r)
            }
            Op::Fma {
                rnd,
                ty,
                d,
                a,
                b,
                c,
            } => {
                let r = alu::fma(*rnd, *ty, rd(self, a), rd(self, b), rd(self, c));
                wr!(*d, ty, r)
            }
            Op::Setp {
                cmp,
                ty,
                p,
                q,
                a,
                b,
                comb,
            } => {
                let t = alu::compare(*cmp, *ty, rd(self, a), rd(self, b));
                let (mut pv, mut qv) = (t, !t);
                if let Some((op, c, neg)) = comb {
                    let c = (self.frames[depth].regs[*c as usize] != 0) != *neg;
                    pv = boolop(*op, pv, c);
                    qv = boolop(*op, qv, c);
                }
                let regs = &mut self.frames[depth].regs;
                regs[*p as usize] = u64::from(pv);
                if let Some(q) = q {
                    regs[*q as usize] = u64::from(qv);
                }
            }
            Op::Selp { ty, d, a, b, p } => {
                let v = if self.frames[depth].regs[*p as usize] != 0 {
                    rd(self, a)
                } else {
                    rd(self, b)
                };
                wr!(*d, ty, ty.trunc(v))
            }
            Op::PredLogic { op, d, a, b } => {
                let (x, y) = (rd(self, a) != 0, rd(self, b) != 0);
                self.frames[depth].regs[*d as usize] = u64::from(boolop(*op, x, y));
            }
            Op::Cvt {
                dty,
                sty,
                rnd,
                sat,
                d,
                a,
            } => {
                let r = alu::cvt(*dty, *sty, *rnd, *sat, rd(self, a));
                wr!(*d, dty, r)
            }
            Op::Cvta { d, a } => {
                let v = rd(self, a);
                self.frames[depth].regs[*d as usize] = v;
            }
            Op::Ld {
                space,
                sem,
                scope,
                ty,
                d,
                addr,
            } => {
                let at = self.address(addr, depth);
                let size = u64::from(ty.bytes());
                let (p, global) = self.access(mem, *space, at, size)?;
                if global {
                    let strong = matches!(sem, Sem::Volatile | Sem::Relaxed | Sem::Acquire);
                    let scope = if *sem == Sem::Volatile {
                        Some(Scope::Sys)
                    } else {
                        *scope
                    };
                    self.probe_global(depth, at, size, Access::Load { strong, scope });
                }
                // SAFETY: `p` was checked against the launch's live map.
                let v = unsafe { mem::load(p, size) };
                wr!(*d, ty, v)
            }
            Op::St {
                space, ty, addr, a, ..
            } => {
                let at = self.address(addr, depth);
                let size = u64::from(ty.bytes());
                let v = rd(self, a);
                let (p, global) = self.access(mem, *space, at, size)?;
                if global {
                    self.probe_global(depth, at, size, Access::Store);
                }
                // SAFETY: as for loads.
                unsafe { mem::store(p, size, v) }
            }
            Op::Atom {
                space,
                op,
                ty,
                d,
                addr,
                b,
                c,
            } => {
                let at = self.address(addr, depth);
                let size = u64::from(ty.bytes());
                let y = ty.trunc(rd(self, b));
                let z = c.as_ref().map(|c| ty.trunc(rd(self, c)));
                let (p, global) = self.access(mem, *space, at, size)?;
                if global {
                    self.probe_global(depth, at, size, Access::Atomic);
                }
                let ty = *ty;
                let f = |old: u64| -> Option<u64> {
                    Some(match op {
                        AtomOp::Add if ty.is_float() => {
                            alu::bin(crate::inst::BinOp::Add, ty, old, y)
                        }
                        AtomOp::Add => ty.trunc(old.wrapping_add(y)),
                        AtomOp::Min => alu::bin(crate::inst::BinOp::Min, ty, old, y),
                        AtomOp::Max => alu::bin(crate::inst::BinOp::Max, ty, old, y),
                        AtomOp::Inc => {
                            if old >= y {
                                0
                            } else {
                                old + 1
                            }
                        }
                        AtomOp::Dec => {
                            if old == 0 || old > y {
                                y
                            } else {
                                old - 1
                            }
                        }
                        AtomOp::And => old & y,
                        AtomOp::Or => old | y,
                        AtomOp::Xor => old ^ y,
                        AtomOp::Exch => y,
                        AtomOp::Cas => {
                            if old == y {
                                z.unwrap_or(old)
                            } else {
                                return None;
                            }
                        }
                    })
                };
                // SAFETY: as for loads; the size is 4 or 8 (the decoder
                // admits only 32- and 64-bit atomics).
                let old = unsafe { mem::rmw(p, size, f) };
                if let Some(d) = d {
                    wr!(*d, ty, old)
                }
            }
            // Every access is sequentially consistent here: fences order
            // nothing more.
            Op::Fence { sc, scope } => {
                self.probe = Some(Probe::Fence {
                    sc: *sc,
                    scope: *scope,
                })
            }
            Op::Nanosleep(_) => return Ok(Event::Yield),
            Op::Shfl {
                mode,
                d,
                a,
                b,
                c,
                mask,
            } => {
                return Ok(Event::Warp(WarpReq {
                    kind: WarpKind::Shfl(*mode),
                    d: *d,
                    value: rd(self, a) & 0xffff_ffff,
                    b: rd(self, b) as u32,
                    c: rd(self, c) as u32,
                    mask: rd(self, mask) as u32,
                }));
            }
            Op::Vote {
                mode,
                d,
                p,
                neg,
                mask,
            } => {
                let on = (self.frames[depth].regs[*p as usize] != 0) != *neg;
                return Ok(Event::Warp(WarpReq {
                    kind: WarpKind::Vote(*mode),
                    d: *d,
                    value: u64::from(on),
                    b: 0,
                    c: 0,
                    mask: rd(self, mask) as u32,
                }));
            }
            Op::ActiveMask(d) => {
                let lane = self.place.lane;
                self.frames[depth].regs[*d as usize] = 1u64 << lane;
            }
            Op::Bar(n) => return Ok(Event::Barrier(rd(self, n) as u32)),
            Op::Bra(t) => self.frames[depth].pc = *t,
            Op::Call { func, rets, args } => {
                let callee = &m.funcs[*func as usize];
                let mut regs = vec![0u64; callee.regs.len()];
                for (&r, a) in callee.arg_regs.iter().zip(args) {
                    regs[r as usize] = rd(self, a);
                }
                self.frames.push(Frame {
                    func: *func,
                    pc: 0,
                    regs,
                    rets: rets.clone(),
                });
            }
            Op::Ret => return self.ret(m),
            Op::Exit => return Ok(Event::Exit),
            Op::Trap => return Err(Stop::Trap),
        }
        Ok(Event::Next)
    }

    /// Returns from the current frame; returning from the outermost one
    /// exits the thread and keeps that frame (its registers are the
    /// results of [`crate::call`]).
    fn ret(&mut self, m: &Module) -> Result<Event, Stop> {
        if self.frames.len() == 1 {
            return Ok(Event::Exit);
        }
        let done = self.frames.pop().expect("a frame to return from");
        let caller = self.frames.last_mut().expect("a caller");
        let f = &m.funcs[done.func as usize];
        for (&dst, &src) in done.rets.iter().zip(&f.ret_regs) {
            caller.regs[dst as usize] = done.regs[src as usize];
        }
        Ok(Event::Next)
    }

    fn address(&self, a: &Addr, depth: usize) -> u64 {
        let base = match a.base {
            Base::Reg(r) => self.frames[depth].regs[r as usize],
            Base::Var(space, off) => self.window(space).wrapping_add(off),
            Base::Abs(v) => v,
        };
        base.wrapping_add(a.off as u64)
    }

    /// Records a global access of the instruction just run (its pc is
    /// one behind).
    fn probe_global(&mut self, depth: usize, addr: u64, size: u64, what: Access) {
        let fr = &self.frames[depth];
        self.probe = Some(Probe::Global {
            func: fr.func,
            pc: fr.pc - 1,
            addr,
            size,
            what,
        });
    }

    /// Checks an access; the pointer, and whether it reached global
    /// memory.
    fn access(
        &self,
        mem: &MemMap,
        space: Space,
        at: u64,
        size: u64,
    ) -> Result<(*mut u8, bool), Stop> {
        let (block, me) = (self.place.block, self.place.global);
        let global = std::cell::Cell::new(false);
        mem.check(at, size, |k| {
            global.set(matches!(
                k,
                Kind::Device | Kind::HostMapped | Kind::ModuleData
            ));
            match space {
                Space::Generic => match k {
                    Kind::Device | Kind::HostMapped | Kind::ModuleData => true,
                    Kind::Shared(b) => b == block,
                    Kind::Local(t) => t == me,
                    Kind::Param => false,
                },
                Space::Global => matches!(k, Kind::Device | Kind::HostMapped | Kind::ModuleData),
                Space::Const => k == Kind::ModuleData,
                Space::Shared => k == Kind::Shared(block),
                Space::Local => k == Kind::Local(me),
                Space::Param => k == Kind::Param,
            }
        })
        .map(|p| (p, global.get()))
        .map_err(|f| Stop::Mem(f, at, size))
    }
}

fn boolop(op: BoolOp, a: bool, b: bool) -> bool {
    match op {
        BoolOp::And => a && b,
        BoolOp::Or => a || b,
        BoolOp::Xor => a != b,
    }
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}
