//! Copy and constant propagation (module docs of `super`, steps 1 and 5).

use super::*;

/// What a copy's destination holds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Src {
    Reg(u32),
    /// An immediate, in the text PTX spells it in.
    Imm(String),
}

/// The copy `mov d, s` an instruction is, if it is one: unguarded, `s` a
/// register of `d`'s declared type or an immediate of `d`'s kind (a
/// float's `0f`/`0d` bits for a float register, a plain integer for an
/// integer one).
fn copy_of(i: &Inst, regs: &HashMap<String, Reg>) -> Option<(u32, Src)> {
    if i.base() != "mov" || i.guard.is_some() || i.args.len() != 2 {
        return None;
    }
    let d = regs.get(&i.args[0])?;
    let s = &i.args[1];
    if let Some(s) = regs.get(s) {
        return (d.ty == s.ty && d.id != s.id).then_some((d.id, Src::Reg(s.id)));
    }
    let t = s.strip_prefix('-').unwrap_or(s);
    let int = match t.strip_prefix("0x") {
        Some(h) => !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()),
        None => !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()),
    };
    let fits = match d.ty {
        ".f32" => s.starts_with("0f"),
        ".f64" => s.starts_with("0d"),
        ".b32" | ".b64" | ".u32" | ".u64" | ".s32" | ".s64" => int,
        _ => false,
    };
    fits.then(|| (d.id, Src::Imm(s.clone())))
}

/// Whether operand `at` of `i` may be an immediate: a source of an
/// arithmetic, logic or compare instruction (for `mad`/`fma` the addend
/// and second factor, for shifts and remainders the right operand, for a
/// division either: `1.0 / x`), never the predicate of a `selp` or
/// `setp`'s combining operand.
fn takes_immediate(i: &Inst, at: usize) -> bool {
    at < i.args.len()
        && match i.base() {
            "add" | "sub" | "mul" | "and" | "or" | "xor" | "min" | "max" => at == 1 || at == 2,
            "setp" => at == 1 || at == 2,
            "selp" => at == 1 || at == 2,
            "mad" | "fma" => at == 2 || at == 3,
            "div" => at == 1 || at == 2,
            "rem" | "shl" | "shr" => at == 2,
            _ => false,
        }
}

/// Rewrite each read of a copy's destination to its source where the copy
/// is available on every path (a forward "available copies" data flow;
/// a write to the destination or the source register kills a copy).
/// Returns whether anything changed.
pub(super) fn propagate(lines: &mut [Line], regs: &HashMap<String, Reg>) -> bool {
    // Every copy: (line, dst, src); per register, the copies it kills.
    let mut copies: Vec<(usize, u32, Src)> = Vec::new();
    for (n, l) in lines.iter().enumerate() {
        if let Line::Inst(i) = l
            && let Some((d, s)) = copy_of(i, regs)
        {
            copies.push((n, d, s));
        }
    }
    if copies.is_empty() {
        return false;
    }
    let nreg = regs.len();
    let mut kills: Vec<Vec<u32>> = vec![Vec::new(); nreg];
    let mut by_line: HashMap<usize, u32> = HashMap::new();
    for (c, (n, d, s)) in copies.iter().enumerate() {
        kills[*d as usize].push(c as u32);
        if let Src::Reg(s) = s {
            kills[*s as usize].push(c as u32);
        }
        by_line.insert(*n, c as u32);
    }
    let names: Vec<&str> = {
        let mut v = vec![""; nreg];
        for (n, r) in regs {
            v[r.id as usize] = n.as_str();
        }
        v
    };
    let g = cfg(lines);
    let nc = copies.len();
    // What each line writes (before the rewrite: rewriting reads only).
    let writes: Vec<Vec<u32>> = lines
        .iter()
        .map(|l| match l {
            Line::Inst(i) => uses_defs(i, regs).1,
            _ => Vec::new(),
        })
        .collect();
    // Transfer of one instruction on the available set.
    let step = |avail: &mut Bits, n: usize| {
        for &d in &writes[n] {
            for &c in &kills[d as usize] {
                avail.clear(c);
            }
        }
        if let Some(&c) = by_line.get(&n) {
            avail.set(c);
        }
    };
    let nb = g.blocks.len();
    let mut out: Vec<Bits> = vec![Bits::full(nc); nb];
    let mut ins: Vec<Bits> = vec![Bits::new(nc); nb];
    let mut changed = true;
    while changed {
        changed = false;
        for b in 0..nb {
            let mut a = if b == 0 || g.preds[b].is_empty() {
                Bits::new(nc)
            } else {
                let mut a = Bits::full(nc);
                for &p in &g.preds[b] {
                    a.and(&out[p]);
                }
                a
            };
            ins[b] = a.clone();
            for n in g.blocks[b].clone() {
                if let Line::Inst(_) = &lines[n] {
                    step(&mut a, n);
                }
            }
            if a != out[b] {
                out[b] = a;
                changed = true;
            }
        }
    }
    // Per destination register, its copies.
    let mut of_dst: Vec<Vec<u32>> = vec![Vec::new(); nreg];
    for (c, (_, d, _)) in copies.iter().enumerate() {
        of_dst[*d as usize].push(c as u32);
    }
    let available = |r: u32, a: &Bits| of_dst[r as usize].iter().copied().find(|&c| a.has(c));
    let mut rewrote = false;
    for (b, a_in) in ins.iter().enumerate() {
        let mut a = a_in.clone();
        for n in g.blocks[b].clone() {
            let Line::Inst(i) = &mut lines[n] else {
                continue;
            };
            // Registers read through their copies (in any operand text).
            let through = |text: &str, a: &Bits| -> Option<String> {
                let mut out = String::new();
                let mut last = 0;
                for (s, e) in tokens(text) {
                    let Some(r) = regs.get(&text[s..e]) else {
                        continue;
                    };
                    if let Some(c) = available(r.id, a)
                        && let Src::Reg(src) = copies[c as usize].2
                    {
                        out.push_str(&text[last..s]);
                        out.push_str(names[src as usize]);
                        last = e;
                    }
                }
                (last > 0).then(|| {
                    out.push_str(&text[last..]);
                    out
                })
            };
            if let Some((_, p)) = &mut i.guard
                && let Some(t) = through(p, &a)
            {
                *p = t;
                rewrote = true;
            }
            let first_read = if i.shape() == Shape::NoDest { 0 } else { 1 };
            for at in first_read..i.args.len() {
                if let Some(t) = through(&i.args[at], &a) {
                    i.args[at] = t;
                    rewrote = true;
                }
            }
            // Constants, where the instruction keeps a register source.
            for at in first_read..i.args.len() {
                let Some(r) = regs.get(&i.args[at]) else {
                    continue;
                };
                let Some(c) = available(r.id, &a) else {
                    continue;
                };
                let Src::Imm(imm) = &copies[c as usize].2 else {
                    continue;
                };
                let other_reg = (1..i.args.len())
                    .filter(|&k| k != at)
                    .any(|k| regs.contains_key(&i.args[k]));
                if takes_immediate(i, at) && other_reg {
                    i.args[at] = imm.clone();
                    rewrote = true;
                }
            }
            step(&mut a, n);
        }
    }
    rewrote
}
