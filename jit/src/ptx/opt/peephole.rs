//! Tests of tests (module docs of `super`, step 4), within a block.

use super::*;

/// `setp.{ne,eq}.u32 q, r, 0` of `r = selp.b32 1, 0, p` becomes
/// `mov.pred q, p` (or `not.pred q, p`), and a guard on `q = not.pred p`
/// reads `!p`; the copies and the dead `selp`/`not` go in the next steps.
/// Returns whether anything changed.
pub(super) fn tests_of_tests(lines: &mut [Line], regs: &HashMap<String, Reg>) -> bool {
    let g = cfg(lines);
    let mut changed = false;
    for block in &g.blocks {
        // r → (p, negated): r is p as 0/1 (negated: 1 when p is false).
        let mut bools: HashMap<String, (String, bool)> = HashMap::new();
        // q → p: q is !p.
        let mut nots: HashMap<String, String> = HashMap::new();
        for n in block.clone() {
            let Line::Inst(i) = &mut lines[n] else {
                continue;
            };
            if let Some((neg, q)) = &i.guard
                && let Some(p) = nots.get(q)
            {
                i.guard = Some((!neg, p.clone()));
                changed = true;
            }
            if i.base() == "setp"
                && i.guard.is_none()
                && i.args.len() == 3
                && i.args[2] == "0"
                && let Some((p, neg)) = bools.get(&i.args[1])
            {
                let mods: Vec<&str> = i.op.split('.').collect();
                let cmp = mods.get(1).copied();
                let int32 = matches!(mods.get(2).copied(), Some("u32" | "s32" | "b32"));
                if int32 && matches!(cmp, Some("ne" | "eq")) {
                    let same = (cmp == Some("ne")) != *neg;
                    *i = Inst {
                        guard: None,
                        op: if same { "mov.pred" } else { "not.pred" }.to_string(),
                        args: vec![i.args[0].clone(), p.clone()],
                    };
                    changed = true;
                }
            }
            let written = i.written();
            if !written.is_empty() {
                let hit = |x: &String| written.contains(&x.as_str());
                bools.retain(|r, (p, _)| !hit(r) && !hit(p));
                nots.retain(|q, p| !hit(q) && !hit(p));
            }
            if i.guard.is_some() {
                continue;
            }
            match (i.base(), i.args.as_slice()) {
                ("selp", [r, a, b, p]) if regs.contains_key(p) => {
                    let int32 = matches!(i.op.split('.').nth(1), Some("b32" | "u32" | "s32"));
                    match (a.as_str(), b.as_str()) {
                        ("1", "0") if int32 => {
                            bools.insert(r.clone(), (p.clone(), false));
                        }
                        ("0", "1") if int32 => {
                            bools.insert(r.clone(), (p.clone(), true));
                        }
                        _ => {}
                    }
                }
                ("not", [q, p]) if i.op == "not.pred" && regs.contains_key(p) && q != p => {
                    nots.insert(q.clone(), p.clone());
                }
                _ => {}
            }
        }
    }
    changed
}
