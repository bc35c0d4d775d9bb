//! Decoding the warp-wide instructions (`shfl.sync`, `vote.sync`,
//! `activemask`; executed by `crate::warp`'s rendezvous).

use super::{Cx, Quals, Raw, one_type};
use crate::Error;
use crate::inst::{Op, ShflMode, Ty, TyKind, VoteMode};

/// `.b32`, the type of every operand here but `vote`'s predicates.
const B32: Ty = Ty {
    kind: TyKind::B,
    bits: 32,
};

/// `shfl.sync.MODE.b32 d, a, b, c, membermask`.
pub(super) fn shfl(cx: &Cx, q: &mut Quals, ops: &[Raw]) -> Result<Op, Error> {
    if !q.has("sync") {
        return Err(cx.err("only `shfl.sync` is modelled"));
    }
    let mode = match q.take(&["up", "down", "bfly", "idx"]) {
        Some("up") => ShflMode::Up,
        Some("down") => ShflMode::Down,
        Some("bfly") => ShflMode::Bfly,
        Some(_) => ShflMode::Idx,
        None => return Err(cx.err("needs `.up`, `.down`, `.bfly` or `.idx`")),
    };
    if one_type(cx, q)? != B32 {
        return Err(cx.err("takes `.b32`"));
    }
    cx.count(ops, 5)?;
    if matches!(ops[0], Raw::Pair(..)) {
        return Err(cx.err("a predicate destination `d|p` is not modelled"));
    }
    Ok(Op::Shfl {
        mode,
        d: cx.reg(&ops[0])?,
        a: cx.src(&ops[1], B32)?,
        b: cx.src(&ops[2], B32)?,
        c: cx.src(&ops[3], B32)?,
        mask: cx.src(&ops[4], B32)?,
    })
}

/// `vote.sync.MODE.TYPE d, p, membermask`.
pub(super) fn vote(cx: &Cx, q: &mut Quals, ops: &[Raw]) -> Result<Op, Error> {
    if !q.has("sync") {
        return Err(cx.err("only `vote.sync` is modelled"));
    }
    let mode = match q.take(&["all", "any", "uni", "ballot"]) {
        Some("all") => VoteMode::All,
        Some("any") => VoteMode::Any,
        Some("uni") => VoteMode::Uni,
        Some(_) => VoteMode::Ballot,
        None => return Err(cx.err("needs `.all`, `.any`, `.uni` or `.ballot`")),
    };
    let want = if mode == VoteMode::Ballot {
        B32
    } else {
        Ty {
            kind: TyKind::Pred,
            bits: 1,
        }
    };
    if one_type(cx, q)? != want {
        return Err(cx.err(format!("takes `{want}` here")));
    }
    cx.count(ops, 3)?;
    let d = if mode == VoteMode::Ballot {
        cx.reg(&ops[0])?
    } else {
        cx.pred(&ops[0])?
    };
    let (p, neg) = match &ops[1] {
        Raw::Not(r) => (cx.pred(r)?, true),
        r => (cx.pred(r)?, false),
    };
    let mask = cx.src(&ops[2], B32)?;
    Ok(Op::Vote {
        mode,
        d,
        p,
        neg,
        mask,
    })
}

/// `activemask.b32 d`.
pub(super) fn activemask(cx: &Cx, q: &mut Quals, ops: &[Raw]) -> Result<Op, Error> {
    if one_type(cx, q)? != B32 {
        return Err(cx.err("takes `.b32`"));
    }
    cx.count(ops, 1)?;
    Ok(Op::ActiveMask(cx.reg(&ops[0])?))
}
