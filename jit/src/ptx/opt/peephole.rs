//! Peepholes within a block: tests of tests (module docs of `super`,
//! step 4) and fusions (step 8).

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
                        note: None,
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

/// Whether `ty` (a declared register type) is 32 bits wide.
fn is32(ty: &str) -> bool {
    matches!(ty, ".b32" | ".u32" | ".s32")
}

/// Fusions (module docs of `super`, step 8):
///
/// - `cvt.{u32,s32}.{u64,s64} d, s` of a 32-bit register `s` (a value the
///   speculations narrowed already) is `mov.b32 d, s`, which copy
///   propagation then removes, and of a 64-bit `s` that an earlier such
///   `cvt` narrowed from `x` reads `x` (the same low 32 bits);
/// - `add.{u64,s64} d, t, b` (or `b, t`) of `t = mul.wide.{u32,s32} a, c`
///   or `t = mul.lo.{u64,s64} a, c` from earlier in the block, `a` and `c`
///   unchanged since, is `mad.wide.{u32,s32} d, a, c, b` (or
///   `mad.lo.{u64,s64}`): an element's address in one instruction. The
///   product dies when every add took it.
///
/// Returns whether anything changed.
pub(super) fn fuse(lines: &mut [Line], regs: &HashMap<String, Reg>) -> bool {
    let g = cfg(lines);
    let mut changed = false;
    let ty = |r: &str| regs.get(r).map(|x| x.ty);
    for block in &g.blocks {
        // t → (mad op, a, c).
        let mut products: HashMap<String, (String, String, String)> = HashMap::new();
        // s → x: the 64-bit `s` holds the low 32 bits of `x`, extended.
        let mut narrowed: HashMap<String, String> = HashMap::new();
        for n in block.clone() {
            let Line::Inst(i) = &mut lines[n] else {
                continue;
            };
            let narrowing = matches!(
                i.op.as_str(),
                "cvt.u32.u64" | "cvt.s32.s64" | "cvt.u32.s64" | "cvt.s32.u64"
            );
            if narrowing
                && let [_, src] = i.args.as_slice()
                && let Some(x) = narrowed.get(src)
            {
                // Narrowing a narrowed value: the low 32 bits are `x`'s.
                i.args[1] = x.clone();
                changed = true;
            }
            if narrowing
                && let [d, src] = i.args.as_slice()
                && ty(d).is_some_and(is32)
                && ty(src).is_some_and(is32)
            {
                i.op = "mov.b32".into();
                changed = true;
            }
            if matches!(i.op.as_str(), "add.u64" | "add.s64")
                && let [d, x, y] = i.args.as_slice()
            {
                let hit = products
                    .get(x)
                    .map(|p| (p, y))
                    .or_else(|| products.get(y).map(|p| (p, x)));
                if let Some(((op, a, c), b)) = hit {
                    i.args = vec![d.clone(), a.clone(), c.clone(), b.clone()];
                    i.op = op.clone();
                    changed = true;
                }
            }
            let written = i.written();
            if !written.is_empty() {
                let hit = |x: &String| written.contains(&x.as_str());
                products.retain(|t, (_, a, c)| !hit(t) && !hit(a) && !hit(c));
                narrowed.retain(|s, x| !hit(s) && !hit(x));
            }
            if narrowing
                && i.guard.is_none()
                && let [d, x] = i.args.as_slice()
                && d != x
                && ty(d).is_some_and(|t| !is32(t))
            {
                narrowed.insert(d.clone(), x.clone());
            }
            if i.guard.is_none()
                && let [t, a, c] = i.args.as_slice()
                && t != a
                && t != c
                && ty(t).is_some()
            {
                let mad = match i.op.as_str() {
                    "mul.wide.u32" => "mad.wide.u32",
                    "mul.wide.s32" => "mad.wide.s32",
                    "mul.lo.u64" => "mad.lo.u64",
                    "mul.lo.s64" => "mad.lo.s64",
                    _ => continue,
                };
                products.insert(t.clone(), (mad.into(), a.clone(), c.clone()));
            }
        }
    }
    changed
}
