//! Branch cleanups (module docs of `super`, step 3).

use super::*;

/// The branch cleanups (module docs, step 3). Returns whether anything
/// changed.
pub(super) fn clean(lines: &mut Vec<Line>) -> bool {
    let mut changed = false;
    // Where each label's code begins: the first instruction after it.
    let first_inst = |lines: &[Line], from: usize| -> Option<usize> {
        (from..lines.len()).find(|&n| matches!(lines[n], Line::Inst(_)))
    };
    let mut label_at: HashMap<String, usize> = HashMap::new();
    for (n, l) in lines.iter().enumerate() {
        if let Line::Label(name) = l {
            label_at.insert(name.clone(), n);
        }
    }
    // Threading: a label whose code is `bra m` stands for m, for branches
    // with that branch's guard (any branch, when it has none).
    let mut target: HashMap<String, (Option<(bool, String)>, String)> = HashMap::new();
    for (name, &n) in &label_at {
        if let Some(f) = first_inst(lines, n)
            && let Line::Inst(i) = &lines[f]
            && i.is_jump()
            && let Some(t) = i.args.first()
        {
            target.insert(name.clone(), (i.guard.clone(), t.clone()));
        }
    }
    let resolve = |mut l: String, guard: &Option<(bool, String)>| {
        for _ in 0..32 {
            match target.get(&l) {
                Some((g, t)) if *t != l && (g.is_none() || g == guard) => l = t.clone(),
                _ => break,
            }
        }
        l
    };
    for l in lines.iter_mut() {
        if let Line::Inst(i) = l
            && i.is_jump()
            && let Some(t) = i.args.first()
        {
            let r = resolve(t.clone(), &i.guard);
            if r != *t {
                i.args[0] = r;
                changed = true;
            }
        }
    }
    // `@p bra a; bra b; a:` → `@!p bra b; a:`.
    let labels_between = |lines: &[Line], from: usize, to: usize, l: &str| {
        lines[from..to]
            .iter()
            .any(|x| matches!(x, Line::Label(n) if n == l))
    };
    let mut n = 0;
    while n + 1 < lines.len() {
        if let (Line::Inst(a), Line::Inst(b)) = (&lines[n], &lines[n + 1])
            && a.is_jump()
            && b.is_jump()
            && b.guard.is_none()
            && let Some((neg, p)) = a.guard.clone()
            && let Some(f) = first_inst(lines, n + 2)
            && labels_between(lines, n + 2, f, &a.args[0])
        {
            let to = b.args[0].clone();
            lines[n] = Line::Inst(Inst {
                guard: Some((!neg, p)),
                op: a.op.clone(),
                args: vec![to],
                note: a.note.clone(),
            });
            lines.remove(n + 1);
            changed = true;
            continue;
        }
        n += 1;
    }
    // Labels no branch names go (the entry needs none); then a branch to
    // the next instruction's label goes, and so does code after an
    // unconditional branch or return up to the next label.
    let named: std::collections::HashSet<String> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Inst(i) if i.is_jump() => i.args.first().cloned(),
            _ => None,
        })
        .collect();
    let before = lines.len();
    lines.retain(|l| !matches!(l, Line::Label(n) if !named.contains(n)));
    changed |= lines.len() != before;
    let mut keep = vec![true; lines.len()];
    let mut unreachable = false;
    for n in 0..lines.len() {
        match &lines[n] {
            Line::Label(_) => unreachable = false,
            Line::Other(_) => {}
            Line::Inst(i) => {
                if unreachable {
                    keep[n] = false;
                    continue;
                }
                if i.is_jump()
                    && let Some(f) = first_inst(lines, n + 1).or(Some(lines.len()))
                    && labels_between(lines, n + 1, f, &i.args[0])
                {
                    keep[n] = false;
                    continue;
                }
                if i.ends_block() && i.guard.is_none() {
                    unreachable = true;
                }
            }
        }
    }
    if keep.iter().any(|k| !k) {
        changed = true;
        let mut n = 0;
        lines.retain(|_| {
            n += 1;
            keep[n - 1]
        });
    }
    changed
}
