//! `reduce COMBINE KERNEL RANGE ARGS...` and `let NAME = reduce ...`: a
//! launch of a reducing kernel, whose combined value the REPL prints (and
//! `let` keeps).

use super::*;
use offload::{Closure, Combine, LaunchRange, Reduced, Reducible, Scalar};

/// What `run` launches: a kernel for each workitem, or a reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Launch {
    /// `run`.
    ForEach,
    /// `reduce COMBINE`.
    Reduce(Combine),
}

/// The usage line of `reduce`.
pub(super) const USAGE: &str =
    "usage: reduce sum|min|max KERNEL START..END ARGS... (`:help reduce`)";

/// `reduce`'s first word: the combine, or what is wrong with it.
pub(super) fn combine(word: Option<&&str>) -> Result<Combine> {
    let Some(w) = word else {
        bail!("{USAGE}");
    };
    Combine::parse(w).ok_or_else(|| {
        let names: Vec<&str> = Combine::ALL.iter().map(|c| c.name()).collect();
        ReplError::Entry(format!(
            "`{w}` is not a combine: reduce takes {}{}",
            names.join(", "),
            did_you_mean(w, names.iter().copied())
        ))
    })
}

/// Launch `closure` over `range` as `how` says: the report (or the error
/// that holds one), and for a reduction that completed, its value.
pub(super) fn launch(
    rt: &Runtime,
    how: Launch,
    range: LaunchRange,
    closure: &Closure,
) -> (std::result::Result<LaunchReport, OffloadError>, Option<Arg>) {
    let Launch::Reduce(c) = how else {
        return (par_offload(range, closure), None);
    };
    fn typed<T: Reducible>(
        r: std::result::Result<Reduced<T>, OffloadError>,
        arg: fn(T) -> Arg,
    ) -> (std::result::Result<LaunchReport, OffloadError>, Option<Arg>) {
        match r {
            Ok(Reduced { value, report }) => (Ok(report), Some(arg(value))),
            Err(e) => (Err(e), None),
        }
    }
    match closure.returns() {
        Some(Scalar::I32) => typed(rt.par_reduce::<i32>(range, closure, c), Arg::I32),
        Some(Scalar::I64) => typed(rt.par_reduce::<i64>(range, closure, c), Arg::I64),
        Some(Scalar::F64) => typed(rt.par_reduce::<f64>(range, closure, c), Arg::F64),
        // A kernel that returns nothing: the runtime's error names it.
        Some(Scalar::F32) | None => typed(rt.par_reduce::<f32>(range, closure, c), Arg::F32),
    }
}

/// The line that gives a reduction's value.
pub(super) fn value_line(c: Combine, value: &Arg, out: &mut String) {
    let _ = writeln!(
        out,
        "{} = {} ({})",
        c.name(),
        arg_text(value),
        arg_type(value)
    );
}
