//! Dead code and coalescing (module docs of `super`, steps 2 and 6), on
//! backward liveness.

use super::*;

/// What each line reads and writes, and the registers live out of each
/// block.
struct Liveness {
    g: Cfg,
    ud: Vec<Option<(Vec<u32>, Vec<u32>)>>,
    live_out: Vec<Bits>,
}

impl Liveness {
    fn of(lines: &[Line], regs: &HashMap<String, Reg>) -> Liveness {
        let g = cfg(lines);
        let nb = g.blocks.len();
        let nreg = regs.len();
        let ud: Vec<Option<(Vec<u32>, Vec<u32>)>> = lines
            .iter()
            .map(|l| match l {
                Line::Inst(i) => Some(uses_defs(i, regs)),
                _ => None,
            })
            .collect();
        let mut lv = Liveness {
            g,
            ud,
            live_out: Vec::new(),
        };
        let mut live_in: Vec<Bits> = vec![Bits::new(nreg); nb];
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..nb).rev() {
                let mut live = lv.out_of(b, &live_in, nreg);
                for n in lv.g.blocks[b].clone().rev() {
                    if let Line::Inst(i) = &lines[n] {
                        lv.step(&mut live, n, i);
                    }
                }
                if live != live_in[b] {
                    live_in[b] = live;
                    changed = true;
                }
            }
        }
        lv.live_out = (0..nb).map(|b| lv.out_of(b, &live_in, nreg)).collect();
        lv
    }

    fn out_of(&self, b: usize, live_in: &[Bits], nreg: usize) -> Bits {
        let mut live = Bits::new(nreg);
        for &s in &self.g.succs[b] {
            live.or(&live_in[s]);
        }
        live
    }

    /// Liveness before line `n` from liveness after it. A guarded write
    /// may not happen, so it kills nothing.
    fn step(&self, live: &mut Bits, n: usize, i: &Inst) {
        let (uses, defs) = self.ud[n].as_ref().expect("an instruction");
        if i.guard.is_none() {
            for &d in defs {
                live.clear(d);
            }
        }
        for &u in uses {
            live.set(u);
        }
    }

    fn defs(&self, n: usize) -> &[u32] {
        &self.ud[n].as_ref().expect("an instruction").1
    }

    fn uses(&self, n: usize) -> &[u32] {
        &self.ud[n].as_ref().expect("an instruction").0
    }
}

/// Remove the instructions whose results no path reads. Returns whether
/// anything was removed.
pub(super) fn remove(lines: &mut Vec<Line>, regs: &HashMap<String, Reg>) -> bool {
    let lv = Liveness::of(lines, regs);
    let mut dead = vec![false; lines.len()];
    for b in 0..lv.g.blocks.len() {
        let mut live = lv.live_out[b].clone();
        for n in lv.g.blocks[b].clone().rev() {
            let Line::Inst(i) = &lines[n] else {
                continue;
            };
            let defs = lv.defs(n);
            if i.pure() && !defs.is_empty() && defs.iter().all(|&d| !live.has(d)) {
                dead[n] = true;
                continue;
            }
            lv.step(&mut live, n, i);
        }
    }
    drop_lines(lines, &dead)
}

/// Retarget `op t, ...; ...; mov d, t` to `op d, ...` (module docs, step
/// 6): within a block, `t` dead after the `mov` and read by nothing
/// between, `d` neither read nor written between, the defining
/// instruction unguarded and writing `t` alone, `d` and `t` of one type.
/// Returns whether anything changed.
pub(super) fn coalesce(lines: &mut Vec<Line>, regs: &HashMap<String, Reg>) -> bool {
    let lv = Liveness::of(lines, regs);
    let by_id: HashMap<u32, (&str, &'static str)> = regs
        .iter()
        .map(|(n, r)| (r.id, (n.as_str(), r.ty)))
        .collect();
    // (defining line, mov line, d's name).
    let mut merges: Vec<(usize, usize, String)> = Vec::new();
    let mut touched = vec![false; lines.len()];
    for b in 0..lv.g.blocks.len() {
        let block = lv.g.blocks[b].clone();
        let mut live = lv.live_out[b].clone();
        for m in block.clone().rev() {
            let Line::Inst(mv) = &lines[m] else {
                continue;
            };
            let plain_copy = mv.base() == "mov"
                && mv.guard.is_none()
                && mv.args.len() == 2
                && !touched[m]
                && regs
                    .get(&mv.args[0])
                    .zip(regs.get(&mv.args[1]))
                    .is_some_and(|(d, t)| d.ty == t.ty && d.id != t.id && !live.has(t.id));
            if plain_copy {
                let (d, t) = (regs[&mv.args[0]].id, regs[&mv.args[1]].id);
                let mut k = m;
                while k > block.start {
                    k -= 1;
                    let Line::Inst(x) = &lines[k] else {
                        continue;
                    };
                    let (uses, defs) = (lv.uses(k), lv.defs(k));
                    if touched[k] || uses.contains(&d) || defs.contains(&d) {
                        break;
                    }
                    if defs.contains(&t) {
                        if x.guard.is_none()
                            && defs.len() == 1
                            && x.shape() == Shape::Dest
                            && x.args.first().map(String::as_str) == Some(by_id[&t].0)
                        {
                            merges.push((k, m, by_id[&d].0.to_string()));
                            touched[k] = true;
                            touched[m] = true;
                        }
                        break;
                    }
                    if uses.contains(&t) {
                        break;
                    }
                }
            }
            lv.step(&mut live, m, mv);
        }
    }
    if merges.is_empty() {
        return false;
    }
    let mut dead = vec![false; lines.len()];
    for (k, m, d) in merges {
        if let Line::Inst(x) = &mut lines[k] {
            x.args[0] = d;
        }
        dead[m] = true;
    }
    drop_lines(lines, &dead);
    true
}

/// Remove the lines marked in `dead`; whether any was.
fn drop_lines(lines: &mut Vec<Line>, dead: &[bool]) -> bool {
    if !dead.iter().any(|&d| d) {
        return false;
    }
    let mut n = 0;
    lines.retain(|_| {
        n += 1;
        !dead[n - 1]
    });
    true
}
