//! Deopt counters per (kernel version, site, reason).

use crate::metadata::Reason;
use dashmap::DashMap;
use offload_ir::{FuncId, SiteId};
use std::collections::BTreeMap;

/// A compiled version of a kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelVersion {
    /// The kernel.
    pub kernel: FuncId,
    /// The version number.
    pub version: u32,
}

/// Deopt counts, safe to bump from many threads.
#[derive(Debug, Default)]
pub struct DeoptCounters {
    map: DashMap<(KernelVersion, SiteId, Reason), u64>,
}

impl DeoptCounters {
    /// No counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add `n` deopts.
    pub fn add(&self, kv: KernelVersion, site: SiteId, reason: Reason, n: u64) {
        *self.map.entry((kv, site, reason)).or_default() += n;
    }

    /// The count of one key.
    pub fn get(&self, kv: KernelVersion, site: SiteId, reason: Reason) -> u64 {
        self.map.get(&(kv, site, reason)).map_or(0, |v| *v)
    }

    /// Total deopts of a kernel version.
    pub fn total(&self, kv: KernelVersion) -> u64 {
        self.map
            .iter()
            .filter(|e| e.key().0 == kv)
            .map(|e| *e.value())
            .sum()
    }

    /// Counts of a kernel version by reason.
    pub fn by_reason(&self, kv: KernelVersion) -> BTreeMap<Reason, u64> {
        let mut out = BTreeMap::new();
        for e in self.map.iter().filter(|e| e.key().0 == kv) {
            *out.entry(e.key().2).or_default() += *e.value();
        }
        out
    }

    /// Counts of a kernel version by site and reason, in site order.
    pub fn by_site(&self, kv: KernelVersion) -> BTreeMap<(SiteId, Reason), u64> {
        self.map
            .iter()
            .filter(|e| e.key().0 == kv)
            .map(|e| ((e.key().1, e.key().2), *e.value()))
            .collect()
    }
}
