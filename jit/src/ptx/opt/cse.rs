//! Common subexpressions within a block (module docs of `super`, step 7).

use super::*;

/// A pure instruction that computes what an earlier one in its block
/// computed, from operands unchanged since, becomes a copy of that one's
/// result — a plain load too, when no store, atomic, fence, ordered load
/// or call that may write memory ran between (the source language's
/// `t[j]` read three times is one load). Returns whether anything changed.
pub(super) fn common(lines: &mut [Line], regs: &HashMap<String, Reg>) -> bool {
    let g = cfg(lines);
    let mut changed = false;
    for block in &g.blocks {
        // "op operands" → the register holding it; per register, the keys
        // that read it or are held in it.
        let mut avail: HashMap<String, String> = HashMap::new();
        let mut mentions: HashMap<String, Vec<String>> = HashMap::new();
        for n in block.clone() {
            let Line::Inst(i) = &mut lines[n] else {
                continue;
            };
            let dst = match (i.shape(), i.args.first()) {
                (Shape::Dest, Some(d)) if regs.contains_key(d) => Some(d.clone()),
                _ => None,
            };
            // A plain load repeats an earlier one while nothing that may
            // write memory (or order this thread's loads) ran between.
            if writes_or_orders(i) {
                avail.retain(|k, _| !k.starts_with("ld"));
            }
            let eligible = dst.is_some() && i.guard.is_none() && i.pure() && i.base() != "mov";
            let key = eligible.then(|| format!("{} {}", i.op, i.args[1..].join(", ")));
            if let (Some(k), Some(d)) = (&key, &dst)
                && let Some(prev) = avail.get(k)
                && prev != d
                && regs[prev].ty == regs[d].ty
            {
                *i = Inst {
                    guard: None,
                    op: format!("mov{}", regs[d].ty),
                    args: vec![d.clone(), prev.clone()],
                    note: None,
                };
                changed = true;
            }
            // What this line writes invalidates what reads or holds it.
            let written: Vec<String> = i.written().into_iter().map(String::from).collect();
            for w in &written {
                for k in mentions.remove(w).unwrap_or_default() {
                    avail.remove(&k);
                }
            }
            if let (Some(k), Some(d), Line::Inst(i)) = (key, dst, &lines[n])
                && i.base() != "mov"
            {
                let reads_itself = tokens(&k).any(|(s, e)| k[s..e] == *d);
                if !reads_itself && !avail.contains_key(&k) {
                    for (s, e) in tokens(&k) {
                        mentions
                            .entry(k[s..e].to_string())
                            .or_default()
                            .push(k.clone());
                    }
                    mentions.entry(d.clone()).or_default().push(k.clone());
                    avail.insert(k, d);
                }
            }
        }
    }
    changed
}

/// Whether `i` may write memory, or orders the loads after it: loads
/// repeated across it are loaded again. Calls into the math library
/// (`crate::ptxlib`, which stores nothing) are neither.
fn writes_or_orders(i: &Inst) -> bool {
    match i.base() {
        "st" | "red" | "atom" | "fence" | "membar" | "bar" | "barrier" | "nanosleep" | "trap"
        | "exit" => true,
        "ld" => !i.pure(),
        "call" => !i.args.iter().any(|a| {
            let a = a.trim();
            a.starts_with("offload_f32_") || a.starts_with("offload_f64_")
        }),
        _ => false,
    }
}
