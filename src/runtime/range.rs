//! The workitems of a launch: a range, or two or three of them for a
//! kernel over a 2-D or 3-D range (`offload_lang::ranges`).

use crate::OffloadError;
use crate::report::LaunchShape;
use std::ops::Range;

/// What a launch runs over: `lo..hi` (one workitem per index), or
/// `(lo0..hi0, lo1..hi1)` and `(lo0..hi0, lo1..hi1, lo2..hi2)` for a
/// kernel that takes two or three indices (`fn k((i, j): (i32, i32), ...)`
/// in source, `kernel!(move |i, j| ...)` in Rust). Every index tuple of
/// the ranges is one workitem; the last index is the innermost, so
/// consecutive workitems differ in it (consecutive GPU threads touch
/// consecutive elements of a row).
///
/// Reports number the workitems of a 2-D or 3-D launch row by row from 0
/// (the flattened range); [`LaunchShape::coords`] turns such a number back
/// into indices, and the deopt table shows them.
///
/// ```
/// use offload::LaunchRange;
/// let r: LaunchRange = (0..4, 1..3).into();
/// assert_eq!((r.dims(), r.len()), (2, 8));
/// let one: LaunchRange = (0..10).into();
/// assert_eq!((one.dims(), one.len()), (1, 10));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchRange {
    ranges: Vec<Range<i64>>,
}

impl From<Range<i64>> for LaunchRange {
    fn from(r: Range<i64>) -> Self {
        LaunchRange { ranges: vec![r] }
    }
}

impl From<(Range<i64>, Range<i64>)> for LaunchRange {
    fn from((a, b): (Range<i64>, Range<i64>)) -> Self {
        LaunchRange { ranges: vec![a, b] }
    }
}

impl From<(Range<i64>, Range<i64>, Range<i64>)> for LaunchRange {
    fn from((a, b, c): (Range<i64>, Range<i64>, Range<i64>)) -> Self {
        LaunchRange {
            ranges: vec![a, b, c],
        }
    }
}

impl LaunchRange {
    /// Its dimensions: 1, 2 or 3.
    pub fn dims(&self) -> usize {
        self.ranges.len()
    }

    /// Its workitems (0 for a range whose start is after its end, which a
    /// launch refuses; saturating at `u64::MAX`).
    pub fn len(&self) -> u64 {
        self.ranges
            .iter()
            .map(|r| r.end.saturating_sub(r.start).max(0) as u64)
            .fold(1u64, u64::saturating_mul)
    }

    /// Whether it has no workitem.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The one-dimensional range a launch of a kernel of `kernel_dims`
    /// dimensions (`name`) runs, and the values of the parameters that
    /// carry its shape (`offload_lang::ranges::hidden_names`), or why it
    /// cannot run over this range.
    /// `narrowed`: the kernel takes an index as an `i32`
    /// (`offload_lang::ranges::NARROWED_FLAT`), so every dimension must fit
    /// in `i32`.
    pub(crate) fn flatten(
        &self,
        kernel_dims: usize,
        narrowed: bool,
        name: &str,
    ) -> Result<Flat, OffloadError> {
        if kernel_dims != self.dims() {
            let says = |d: usize| match d {
                1 => "a range (`lo..hi`)".to_string(),
                d => format!("a {d}-D range ({d} ranges in a tuple)"),
            };
            return Err(OffloadError::Handle(format!(
                "kernel `{name}` runs over {}, and the launch gave {}",
                says(kernel_dims),
                says(self.dims())
            )));
        }
        for r in &self.ranges {
            if r.start > r.end {
                return Err(OffloadError::Range {
                    start: r.start,
                    end: r.end,
                });
            }
        }
        if self.dims() == 1 {
            return Ok((self.ranges[0].clone(), Vec::new(), None));
        }
        let fits = |x: i64| i32::try_from(x).is_ok();
        if narrowed
            && let Some(r) = self
                .ranges
                .iter()
                .find(|r| r.start < r.end && !(fits(r.start) && fits(r.end - 1)))
        {
            return Err(OffloadError::IndexRange {
                kernel: name.to_string(),
                start: r.start,
                end: r.end,
            });
        }
        let lens: Option<Vec<i64>> = self
            .ranges
            .iter()
            .map(|r| r.end.checked_sub(r.start))
            .collect();
        let total = lens
            .as_deref()
            .and_then(|l| l.iter().try_fold(1i64, |a, &n| a.checked_mul(n)))
            .ok_or_else(|| {
                let r: Vec<String> = self
                    .ranges
                    .iter()
                    .map(|r| format!("{}..{}", r.start, r.end))
                    .collect();
                OffloadError::Handle(format!(
                    "the launch's range ({}) has more workitems than an i64 counts",
                    r.join(", ")
                ))
            })?;
        let lens = lens.unwrap_or_default();
        if total > offload_lang::ranges::MAX_FLAT {
            return Err(OffloadError::Handle(format!(
                "the launch's range has {total} workitems; a 2-D or 3-D range has at most 2^52"
            )));
        }
        if narrowed && total > offload_lang::ranges::MAX_NARROWED_FLAT {
            return Err(OffloadError::Handle(format!(
                "kernel `{name}` takes `i32` indices, so its {}-D range may hold at most 2^31 workitems, and this one holds {total}: take `i64` indices for a larger range",
                self.dims()
            )));
        }
        // Each dimension's start, the length of each but the first, and
        // the reciprocals the kernel's prologue divides by
        // (`offload_lang::ranges::hidden_params`).
        let inv = |n: i64| (1.0 / n.max(1) as f64).to_bits();
        let mut hidden: Vec<u64> = self
            .ranges
            .iter()
            .map(|r| r.start as u64)
            .chain(lens[1..].iter().map(|&n| n as u64))
            .collect();
        match lens[..] {
            [_, n1] => hidden.push(inv(n1)),
            [_, n1, n2] => hidden.extend([inv(n1.saturating_mul(n2)), inv(n2)]),
            _ => {}
        }
        Ok((
            0..total,
            hidden,
            Some(LaunchShape {
                ranges: self.ranges.clone(),
            }),
        ))
    }
}

/// A launch's range flattened ([`LaunchRange::flatten`]): the range it
/// runs, the values of the kernel's shape parameters, and the shape of a
/// 2-D or 3-D launch.
pub(crate) type Flat = (Range<i64>, Vec<u64>, Option<LaunchShape>);
