//! Common subexpressions within a block (module docs of `super`, step 7).

use super::*;

/// A pure instruction (not a load: a store between may change what it
/// reads) that computes what an earlier one in its block computed, from
/// operands unchanged since, becomes a copy of that one's result. Returns
/// whether anything changed.
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
            let eligible =
                dst.is_some() && i.guard.is_none() && i.pure() && !matches!(i.base(), "ld" | "mov");
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
