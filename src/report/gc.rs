//! What collections did over a span of time: the report's [`GcSummary`].

use offload_heap::GcStats;
use std::time::Duration;

/// Collections over a span of time (a launch, or the runtime's life): the
/// figures [`crate::LaunchReport::gc`] and [`crate::Runtime::gc_totals`]
/// give.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GcSummary {
    /// Collections that ran.
    pub collections: u64,
    /// Their pauses added up (`GcStats::pause`: for each, the time to
    /// bring every worker to the safepoint plus the collection itself).
    pub pause: Duration,
    /// Bytes they freed, added up (`GcStats::freed`).
    pub freed: u64,
    /// Bytes they moved, added up (`GcStats::moved`).
    pub moved: u64,
    /// The longest single pause.
    pub max_pause: Duration,
}

impl GcSummary {
    /// What ran between `before` (an earlier value of the same totals) and
    /// `self`; the longest pause is the later totals' when it changed.
    pub(crate) fn since(&self, before: &GcSummary) -> GcSummary {
        GcSummary {
            collections: self.collections - before.collections,
            pause: self.pause.saturating_sub(before.pause),
            freed: self.freed - before.freed,
            moved: self.moved - before.moved,
            max_pause: if self.collections > before.collections {
                self.max_pause
            } else {
                Duration::ZERO
            },
        }
    }

    /// Count collection `st`.
    pub(crate) fn add(&mut self, st: &GcStats) {
        let pause = st.pause();
        self.collections += 1;
        self.pause += pause;
        self.freed += st.freed();
        self.moved += st.moved;
        self.max_pause = self.max_pause.max(pause);
    }
}

/// `N collections, P pause (longest L), F freed`, or `none`.
impl std::fmt::Display for GcSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.collections == 0 {
            return f.write_str("none");
        }
        write!(
            f,
            "{}, {} pause (longest {}), {} freed",
            crate::diagnostics::count_text(self.collections, "collection"),
            crate::diagnostics::duration_text(self.pause),
            crate::diagnostics::duration_text(self.max_pause),
            crate::diagnostics::bytes_text(self.freed)
        )
    }
}
