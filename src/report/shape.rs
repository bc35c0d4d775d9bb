//! The shape of a 2-D or 3-D launch, as its report keeps it.

use std::ops::Range;

/// The ranges of a 2-D or 3-D launch ([`crate::LaunchReport::shape`]),
/// whose workitems the report numbers row by row from 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    /// Each dimension's range, the innermost last.
    pub ranges: Vec<Range<i64>>,
}

impl LaunchShape {
    /// The indices of workitem `w` (its number in the flattened range).
    ///
    /// ```
    /// use offload::LaunchShape;
    /// let s = LaunchShape { ranges: vec![10..12, 0..5] };
    /// assert_eq!(s.coords(7), vec![11, 2]);
    /// ```
    pub fn coords(&self, w: i64) -> Vec<i64> {
        let mut rest = w;
        let mut out = vec![0; self.ranges.len()];
        for (d, r) in self.ranges.iter().enumerate().rev() {
            let n = (r.end - r.start).max(1);
            out[d] = r.start + rest % n;
            rest /= n;
        }
        out
    }

    /// Workitem `w` as its indices, `(i, j)`.
    pub fn name(&self, w: i64) -> String {
        let c: Vec<String> = self.coords(w).iter().map(i64::to_string).collect();
        format!("({})", c.join(", "))
    }
}

impl std::fmt::Display for LaunchShape {
    /// `(0..h, 0..w)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r: Vec<String> = self
            .ranges
            .iter()
            .map(|r| format!("{}..{}", r.start, r.end))
            .collect();
        write!(f, "({})", r.join(", "))
    }
}
