//! Small diamonds as predicated code (module docs of `super`, step 9):
//!
//! ```text
//! @!p bra U;  A;  bra L;  U: B;  L:      →      B;  @p A;  L:
//! ```
//!
//! where `A` and `B` each write one register, the same one, touch no
//! memory, and `A` does not read it (it runs after `B` now, which writes
//! it). Only this branch reaches `U`, and only `bra L` and `B`'s fall
//! reach `L`. The walker makes such a diamond of every `c ? x : y` with a
//! small arm (blackscholes's `if d < 0.0 { 1.0 - w } else { w }`): one or
//! two instructions run instead of three or four.

use super::*;

/// Whether `i` only computes its destination (no memory, no control, no
/// guard), and — as the arm that now runs whatever the condition, `always`
/// — nothing that a check on the other path may have kept it from (a
/// division).
fn computes(i: &Inst, always: bool) -> bool {
    i.guard.is_none()
        && i.shape() == Shape::Dest
        && i.pure()
        && i.base() != "ld"
        && !(always && matches!(i.base(), "div" | "rem"))
}

/// Rewrites every such diamond. Returns whether anything changed.
pub(super) fn diamonds(lines: &mut Vec<Line>) -> bool {
    let mut refs: HashMap<String, usize> = HashMap::new();
    for l in lines.iter() {
        if let Line::Inst(i) = l
            && i.is_jump()
            && let Some(t) = i.args.first()
        {
            *refs.entry(t.clone()).or_default() += 1;
        }
    }
    let mut changed = false;
    let mut n = 0;
    while n + 5 < lines.len() {
        let window = &lines[n..n + 6];
        let (
            Line::Inst(br),
            Line::Inst(a),
            Line::Inst(jump),
            Line::Label(u),
            Line::Inst(b),
            Line::Label(l),
        ) = (
            &window[0], &window[1], &window[2], &window[3], &window[4], &window[5],
        )
        else {
            n += 1;
            continue;
        };
        let fits = br.is_jump()
            && br.guard.is_some()
            && br.args.first() == Some(u)
            && jump.is_jump()
            && jump.guard.is_none()
            && jump.args.first() == Some(l)
            && refs.get(u) == Some(&1)
            && refs.get(l) == Some(&1)
            && computes(a, false)
            && computes(b, true)
            && a.args.first() == b.args.first()
            && !a.args[1..]
                .iter()
                .any(|x| tokens(x).any(|(s, e)| x[s..e] == a.args[0]));
        if !fits {
            n += 1;
            continue;
        }
        let (neg, p) = br.guard.clone().expect("guarded");
        let mut a = a.clone();
        // `@!p bra U` runs A when p holds (and `@p bra U` when it does not).
        a.guard = Some((!neg, p));
        let b = b.clone();
        let l = l.clone();
        lines.splice(n..n + 6, [Line::Inst(b), Line::Inst(a), Line::Label(l)]);
        changed = true;
        n += 3;
    }
    changed
}
