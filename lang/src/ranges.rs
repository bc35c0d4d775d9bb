//! Kernels over two- and three-dimensional ranges.
//!
//! A kernel whose first parameter is a tuple of indices,
//!
//! ```text
//! #[kernel]
//! fn heat((i, j): (i32, i32), t: &[f32], u: &mut [f32], w: i32) { ... }
//! ```
//!
//! runs once for every `(i, j)` of a range `(lo0..hi0, lo1..hi1)`, the last
//! index the innermost (consecutive workitems differ in `j`, so a GPU warp's
//! threads touch consecutive elements of a row). The front end rewrites it,
//! before anything else reads it, into a kernel of the one-dimensional
//! form every executor runs: its first parameter is the workitem's number
//! in the range flattened row by row, and the range's shape comes in
//! parameters after the captures, which the runtime binds at each launch
//! (`offload::LaunchRange`):
//!
//! ```text
//! fn heat(__range_flat32: i64, t: &[f32], u: &mut [f32], w: i32,
//!         __range_lo0: i64, __range_lo1: i64, __range_n1: i64, __range_inv1: f64) {
//!     // q, r: the flat number's quotient and remainder by __range_n1
//!     // (as `i32`s, with `i32` indices: the launch then has at most
//!     // 2^31 workitems; through the `f64` reciprocal otherwise)
//!     let i: i32 = (__range_lo0 as i32) + q;
//!     let j: i32 = (__range_lo1 as i32) + r;
//!     ...
//! }
//! ```
//!
//! (three dimensions: [`hidden_params`]). The
//! names are reserved ([`RESERVED_PREFIX`]); [`dims_of`] reads a kernel's
//! dimensions back from its parameters, so bytecode written this way by
//! hand is a multi-dimensional kernel too.

use crate::error::{Error, R, span_of};
use proc_macro2::{Group, Span, TokenStream, TokenTree};
use syn::spanned::Spanned;

/// Names that start so are the front end's own.
pub const RESERVED_PREFIX: &str = "__range_";

/// The name of a multi-dimensional kernel's first parameter when one of
/// its indices is an `i32`: a launch must keep every index within `i32`
/// (no workitem wraps onto another's indices).
pub const NARROWED_FLAT: &str = "__range_flat32";

/// The dimensions of a kernel whose parameter names are `params` (its
/// first, the index, included): 1, or 2 or 3 when its last parameters are
/// the range's shape as [`rewrite`] declares it.
pub fn dims_of<'a>(params: impl IntoIterator<Item = &'a str>) -> usize {
    let names: Vec<&str> = params.into_iter().collect();
    for dims in [3usize, 2] {
        let hidden = hidden_names(dims);
        if names.len() > hidden.len() && names[names.len() - hidden.len()..] == hidden[..] {
            return dims;
        }
    }
    1
}

/// The names of the parameters that carry the shape of a range of `dims`
/// dimensions, in order ([`hidden_params`]).
pub fn hidden_names(dims: usize) -> Vec<&'static str> {
    hidden_params(dims).into_iter().map(|(n, _)| n).collect()
}

/// The parameters that carry the shape of a range of `dims` dimensions,
/// with their types, in order: each dimension's start, the length of each
/// but the first, and the reciprocals the prologue divides by (of the
/// second length; in 3-D, of the product of the last two, then of the
/// third).
pub fn hidden_params(dims: usize) -> Vec<(&'static str, &'static str)> {
    match dims {
        2 => vec![
            ("__range_lo0", "i64"),
            ("__range_lo1", "i64"),
            ("__range_n1", "i64"),
            ("__range_inv1", "f64"),
        ],
        3 => vec![
            ("__range_lo0", "i64"),
            ("__range_lo1", "i64"),
            ("__range_lo2", "i64"),
            ("__range_n1", "i64"),
            ("__range_n2", "i64"),
            ("__range_inv12", "f64"),
            ("__range_inv2", "f64"),
        ],
        _ => vec![],
    }
}

/// The largest flat workitem number the prologue divides exactly (its
/// quotients go through an `f64`): a multi-dimensional launch has at most
/// this many workitems.
pub const MAX_FLAT: i64 = 1 << 52;

/// The most workitems of a multi-dimensional launch of a kernel with an
/// `i32` index ([`NARROWED_FLAT`]): its prologue divides the flat number
/// as an `i32`.
pub const MAX_NARROWED_FLAT: i64 = 1 << 31;

/// Rewrite every kernel of `file` whose first parameter is a tuple of
/// indices (see the module docs).
pub fn rewrite(mut file: syn::File) -> R<syn::File> {
    for item in &mut file.items {
        if let syn::Item::Fn(f) = item
            && f.attrs.iter().any(|a| a.path().is_ident("kernel"))
        {
            rewrite_kernel(f)?;
        }
    }
    Ok(file)
}

fn rewrite_kernel(f: &mut syn::ItemFn) -> R<()> {
    for input in &f.sig.inputs {
        if let syn::FnArg::Typed(pt) = input
            && let syn::Pat::Ident(pi) = &*pt.pat
            && pi.ident.to_string().starts_with(RESERVED_PREFIX)
        {
            return Err(Error::new(
                span_of(pi.ident.span()),
                format!("names that start with `{RESERVED_PREFIX}` are reserved"),
            ));
        }
    }
    let Some(syn::FnArg::Typed(first)) = f.sig.inputs.first() else {
        return Ok(());
    };
    let syn::Pat::Tuple(pat) = &*first.pat else {
        return Ok(());
    };
    let sp = first.span();
    let bad = || {
        Error::new(
            span_of(sp),
            "a kernel over a 2-D or 3-D range takes its indices as `(i, j): (i32, i32)` or `(i, j, k): (i64, i64, i64)`",
        )
    };
    let syn::Type::Tuple(tys) = &*first.ty else {
        return Err(bad());
    };
    let names: Vec<String> = pat
        .elems
        .iter()
        .map(|p| match p {
            syn::Pat::Ident(pi) if pi.by_ref.is_none() && pi.subpat.is_none() => {
                Ok(pi.ident.to_string())
            }
            _ => Err(bad()),
        })
        .collect::<R<_>>()?;
    let types: Vec<String> = tys
        .elems
        .iter()
        .map(|t| match t {
            syn::Type::Path(p) if p.path.is_ident("i32") => Ok("i32".to_string()),
            syn::Type::Path(p) if p.path.is_ident("i64") => Ok("i64".to_string()),
            _ => Err(bad()),
        })
        .collect::<R<_>>()?;
    let dims = names.len();
    if !(2..=3).contains(&dims) || types.len() != dims {
        return Err(bad());
    }
    // The flat number's name says whether an index is narrowed to `i32`
    // ([`NARROWED_FLAT`]): the runtime then refuses ranges outside it.
    let flat_name = if types.iter().any(|t| t == "i32") {
        NARROWED_FLAT
    } else {
        "__range_flat"
    };
    // Each index from the flat number: a quotient and a remainder by a
    // length. A 64-bit integer division is a subroutine of tens of
    // instructions on a GPU, so the quotient is the product with the
    // length's reciprocal (an `f64` the runtime binds), truncated, and
    // corrected by one either way without a branch: exact while the flat
    // number is below 2^52 ([`MAX_FLAT`], which the runtime checks), as
    // the product's error is then below one. (Kernels with `i32` indices
    // decode with `i32` arithmetic instead: `divide32` below.)
    let divide = |x: &str, n: &str, inv: &str, q: &str, r: &str| {
        format!(
            "let {q}0: i64 = (({x} as f64) * {inv}) as i64; \
             let {r}0: i64 = {x} - {q}0 * {n}; \
             let {q}: i64 = {q}0 + ({r}0 >> 63) - (({n} - 1 - {r}0) >> 63); \
             let {r}: i64 = {x} - {q} * {n};"
        )
    };
    // With `i32` indices the launch has at most 2^31 workitems
    // ([`MAX_NARROWED_FLAT`], which the runtime checks) and every start
    // fits `i32`: `i32` division and remainder then decode exactly, and
    // the CPU's lockstep groups see them as what they are — the row the
    // same for a group's lanes and the column consecutive (a 2-D stencil
    // runs four workitems to a SIMD body there).
    let divide32 = |x: &str, n: &str, q: &str, r: &str| {
        format!("let {q}: i32 = {x} / {n}; let {r}: i32 = {x} % {n};")
    };
    let narrowed = flat_name == NARROWED_FLAT;
    let mut prologue = String::from("{");
    let coords: Vec<String> = if narrowed {
        prologue.push_str(&format!("let __range_f: i32 = {flat_name} as i32;"));
        if dims == 2 {
            prologue.push_str("let __range_m1: i32 = __range_n1 as i32;");
            prologue.push_str(&divide32(
                "__range_f",
                "__range_m1",
                "__range_q",
                "__range_r",
            ));
            vec!["__range_q".into(), "__range_r".into()]
        } else {
            prologue.push_str(
                "let __range_m2: i32 = __range_n2 as i32; \
                 let __range_m12: i32 = (__range_n1 * __range_n2) as i32;",
            );
            prologue.push_str(&divide32(
                "__range_f",
                "__range_m12",
                "__range_q",
                "__range_r",
            ));
            prologue.push_str(&divide32(
                "__range_r",
                "__range_m2",
                "__range_s",
                "__range_t",
            ));
            vec!["__range_q".into(), "__range_s".into(), "__range_t".into()]
        }
    } else if dims == 2 {
        prologue.push_str(&divide(
            flat_name,
            "__range_n1",
            "__range_inv1",
            "__range_q",
            "__range_r",
        ));
        vec!["__range_q".into(), "__range_r".into()]
    } else {
        prologue.push_str(&divide(
            flat_name,
            "(__range_n1 * __range_n2)",
            "__range_inv12",
            "__range_q",
            "__range_r",
        ));
        prologue.push_str(&divide(
            "__range_r",
            "__range_n2",
            "__range_inv2",
            "__range_s",
            "__range_t",
        ));
        vec!["__range_q".into(), "__range_s".into(), "__range_t".into()]
    };
    for (d, (name, ty)) in names.iter().zip(&types).enumerate() {
        let value = match (narrowed, ty.as_str()) {
            (true, "i64") => format!("__range_lo{d} + {} as i64", coords[d]),
            (true, _) => format!("(__range_lo{d} as i32) + {}", coords[d]),
            (false, "i64") => format!("__range_lo{d} + {}", coords[d]),
            (false, _) => format!("(__range_lo{d} + {}) as {ty}", coords[d]),
        };
        prologue.push_str(&format!("let {name}: {ty} = {value};"));
    }
    prologue.push('}');
    let block: syn::Block = parse_at(&prologue, sp)?;
    let flat: syn::FnArg = parse_at(&format!("{flat_name}: i64"), sp)?;
    let hidden: Vec<syn::FnArg> = hidden_params(dims)
        .into_iter()
        .map(|(n, t)| parse_at(&format!("{n}: {t}"), sp))
        .collect::<R<_>>()?;
    let mut inputs: Vec<syn::FnArg> = f.sig.inputs.iter().skip(1).cloned().collect();
    inputs.insert(0, flat);
    inputs.extend(hidden);
    f.sig.inputs = inputs.into_iter().collect();
    let mut stmts = block.stmts;
    stmts.append(&mut f.block.stmts);
    f.block.stmts = stmts;
    Ok(())
}

/// Parse `text` with every token at `sp` (the tuple of indices it stands
/// for: errors and debug lines point there).
fn parse_at<T: syn::parse::Parse>(text: &str, sp: Span) -> R<T> {
    let ts: TokenStream = text
        .parse()
        .map_err(|_| Error::new(span_of(sp), "internal: the range's prologue does not lex"))?;
    syn::parse2(respan(ts, sp))
        .map_err(|_| Error::new(span_of(sp), "internal: the range's prologue does not parse"))
}

fn respan(ts: TokenStream, sp: Span) -> TokenStream {
    ts.into_iter()
        .map(|tt| match tt {
            TokenTree::Group(g) => {
                let mut n = Group::new(g.delimiter(), respan(g.stream(), sp));
                n.set_span(sp);
                TokenTree::Group(n)
            }
            mut other => {
                other.set_span(sp);
                other
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prologue's division, in Rust (`divide` in `rewrite_kernel`).
    fn divide(x: i64, n: i64) -> (i64, i64) {
        let inv = 1.0 / n as f64;
        let q0 = ((x as f64) * inv) as i64;
        let r0 = x - q0 * n;
        let q = q0 + (r0 >> 63) - ((n - 1 - r0) >> 63);
        (q, x - q * n)
    }

    #[test]
    fn the_reciprocal_division_is_exact_below_max_flat() {
        let ns = [
            1i64,
            2,
            3,
            7,
            10,
            1000,
            1_000_003,
            (1 << 26) + 1,
            (1 << 40) - 3,
        ];
        for n in ns {
            let mut xs = vec![0, 1, n - 1, n, n + 1, MAX_FLAT - 1, MAX_FLAT - n];
            // Multiples of n and their neighbours near the top.
            let top = (MAX_FLAT - 1) / n * n;
            xs.extend(
                [top - 1, top, top + 1]
                    .into_iter()
                    .filter(|&x| x < MAX_FLAT),
            );
            for k in 0..2000i64 {
                xs.push(
                    k.wrapping_mul(0x9E37_79B9_7F4A_7C15u64 as i64)
                        .rem_euclid(MAX_FLAT),
                );
            }
            for x in xs.into_iter().filter(|&x| x >= 0) {
                assert_eq!(divide(x, n), (x / n, x % n), "{x} / {n}");
            }
        }
    }

    #[test]
    fn dims_come_back_from_the_parameter_names() {
        assert_eq!(dims_of(["i", "a"]), 1);
        let mut two = vec!["__range_flat", "a"];
        two.extend(hidden_names(2));
        assert_eq!(dims_of(two.iter().copied()), 2);
        let mut three = vec!["__range_flat"];
        three.extend(hidden_names(3));
        assert_eq!(dims_of(three.iter().copied()), 3);
    }
}
