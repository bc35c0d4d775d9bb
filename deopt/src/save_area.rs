//! The save area: a fixed number of records per concurrent slot.

use crate::metadata::{DeoptMetadata, Reason, SaveLayout};
use offload_ir::SiteId;
use std::sync::atomic::{AtomicU64, Ordering};

/// A decoded save record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The workitem that stopped.
    pub workitem: i64,
    /// Where.
    pub site: SiteId,
    /// Why.
    pub reason: Reason,
    /// The site's frame-state values, in record order.
    pub values: Vec<u64>,
}

/// A record that does not make sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeoptError {
    /// Slot out of range.
    #[error("save-area slot {slot} out of range ({slots} slots)")]
    NoSuchSlot {
        /// The slot.
        slot: usize,
        /// Slots there are.
        slots: usize,
    },
    /// The site id is not a site of the kernel version.
    #[error(
        "save record in slot {slot} names site {site}, which kernel version {version} does not have"
    )]
    BadSite {
        /// The slot.
        slot: usize,
        /// The site id.
        site: u32,
        /// The kernel version.
        version: u32,
    },
    /// The reason code is unknown, or not one the site can have.
    #[error("save record in slot {slot}: reason code {code} is not possible at site {site}")]
    BadReason {
        /// The slot.
        slot: usize,
        /// The code.
        code: u32,
        /// The site.
        site: u32,
    },
    /// The value count does not match the site's frame state.
    #[error("site {site} has {expected} live values, the record carries {found}")]
    BadWidth {
        /// The site.
        site: u32,
        /// Values the site has.
        expected: usize,
        /// Values given.
        found: usize,
    },
    /// A slot counts a record that is empty.
    #[error("save record {record} is counted by its slot but empty")]
    Empty {
        /// The record's index in the area.
        record: usize,
    },
    /// A record the host asked compiled code to resume names a site the
    /// code has no landing for.
    #[error("save record {record}: compiled code cannot resume site {site} (no landing)")]
    NoLanding {
        /// The record's index in the area.
        record: usize,
        /// The site.
        site: u32,
    },
    /// The record is wider than the layout.
    #[error("a record of {words} words does not fit the layout's {record_words}")]
    TooWide {
        /// Words needed.
        words: usize,
        /// Words per record.
        record_words: u32,
    },
    /// The area's memory could not be had: its size overflows, or the
    /// allocator refused it.
    #[error(
        "a save area of {records} records of {record_words} words cannot be allocated (fewer workers or deopt records per worker need less)"
    )]
    TooLarge {
        /// Records asked for.
        records: usize,
        /// Words per record.
        record_words: u32,
    },
}

/// Save records of one layout: C × K, C being the number of concurrent
/// slots and K the records each slot may fill before it stops —
/// never the number of workitems.
#[derive(Debug)]
pub struct SaveArea {
    layout: SaveLayout,
    slots: usize,
    words: Box<[AtomicU64]>,
}

impl SaveArea {
    /// An area of `slots` empty records.
    ///
    /// # Panics
    ///
    /// If the area cannot be allocated; [`SaveArea::try_new`] says so
    /// instead.
    pub fn new(slots: usize, layout: SaveLayout) -> SaveArea {
        SaveArea::try_new(slots, layout).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An area of `slots` empty records, or [`DeoptError::TooLarge`] if its
    /// size overflows or the allocator refuses it (a runtime configured
    /// with more records than the machine has memory for gets an error,
    /// not an abort).
    pub fn try_new(slots: usize, layout: SaveLayout) -> Result<SaveArea, DeoptError> {
        let too_large = || DeoptError::TooLarge {
            records: slots,
            record_words: layout.record_words,
        };
        let rw = layout.record_words as usize;
        let n = slots
            .checked_mul(rw)
            .filter(|n| n.checked_mul(8).is_some_and(|b| b <= isize::MAX as usize))
            .ok_or_else(too_large)?;
        let mut words = Vec::new();
        words.try_reserve_exact(n).map_err(|_| too_large())?;
        words.extend((0..n).map(|i| {
            AtomicU64::new(if i % rw == SaveLayout::SITE_WORD as usize {
                SaveLayout::EMPTY
            } else {
                0
            })
        }));
        Ok(SaveArea {
            layout,
            slots,
            words: words.into_boxed_slice(),
        })
    }

    /// Number of records.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The layout.
    pub fn layout(&self) -> SaveLayout {
        self.layout
    }

    /// The first word of the area, for compiled code that writes records
    /// directly (record `s` starts at word `s * record_words`).
    pub fn as_ptr(&self) -> *mut u64 {
        // `AtomicU64` has the same in-memory representation as `u64`.
        self.words.as_ptr() as *mut u64
    }

    /// Bytes used: O(slots), whatever the range.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    fn base(&self, slot: usize) -> Result<usize, DeoptError> {
        if slot < self.slots {
            Ok(slot * self.layout.record_words as usize)
        } else {
            Err(DeoptError::NoSuchSlot {
                slot,
                slots: self.slots,
            })
        }
    }

    /// Store a record into `slot` (the host-side writer; device code stores
    /// the same words directly). The site word is written last, with release
    /// ordering, so a reader that sees it sees the values.
    pub fn write(&self, slot: usize, r: &Record) -> Result<(), DeoptError> {
        let base = self.base(slot)?;
        let words = SaveLayout::HEADER_WORDS as usize + r.values.len();
        if words > self.layout.record_words as usize {
            return Err(DeoptError::TooWide {
                words,
                record_words: self.layout.record_words,
            });
        }
        self.words[base].store(r.workitem as u64, Ordering::Relaxed);
        for (i, &v) in r.values.iter().enumerate() {
            self.words[base + SaveLayout::HEADER_WORDS as usize + i].store(v, Ordering::Relaxed);
        }
        self.words[base + SaveLayout::SITE_WORD as usize]
            .store(SaveLayout::site_word(r.site, r.reason), Ordering::Release);
        Ok(())
    }

    /// Decode the record in `slot` against the kernel version's metadata;
    /// `None` if the slot is empty.
    pub fn read(&self, slot: usize, meta: &DeoptMetadata) -> Result<Option<Record>, DeoptError> {
        let mut values = Vec::new();
        Ok(self
            .read_into(slot, meta, &mut values)?
            .map(|(workitem, site, reason)| Record {
                workitem,
                site,
                reason,
                values,
            }))
    }

    /// Decode the record in `slot` without allocating: its values replace
    /// the contents of `values`, and the header comes back as (workitem,
    /// site, reason); `None` if the slot is empty.
    #[inline]
    pub fn read_into(
        &self,
        slot: usize,
        meta: &DeoptMetadata,
        values: &mut Vec<u64>,
    ) -> Result<Option<(i64, SiteId, Reason)>, DeoptError> {
        let base = self.base(slot)?;
        let sw = self.words[base + SaveLayout::SITE_WORD as usize].load(Ordering::Acquire);
        if sw == SaveLayout::EMPTY {
            return Ok(None);
        }
        let (site_id, code) = (sw as u32, (sw >> 32) as u32);
        let site = meta.site(SiteId(site_id)).ok_or(DeoptError::BadSite {
            slot,
            site: site_id,
            version: meta.version,
        })?;
        let reason = Reason::from_code(code)
            .filter(|r| site.reasons.contains(r))
            .ok_or(DeoptError::BadReason {
                slot,
                code,
                site: site_id,
            })?;
        let n = site.slots.len();
        if SaveLayout::HEADER_WORDS as usize + n > self.layout.record_words as usize {
            return Err(DeoptError::BadWidth {
                site: site_id,
                expected: n,
                found: self.layout.record_words as usize - SaveLayout::HEADER_WORDS as usize,
            });
        }
        values.clear();
        values.extend((0..n).map(|i| {
            self.words[base + SaveLayout::HEADER_WORDS as usize + i].load(Ordering::Relaxed)
        }));
        Ok(Some((
            self.words[base].load(Ordering::Relaxed) as i64,
            SiteId(site_id),
            reason,
        )))
    }

    /// Empty the record in `slot`.
    pub fn clear_one(&self, slot: usize) -> Result<(), DeoptError> {
        let base = self.base(slot)?;
        self.words[base + SaveLayout::SITE_WORD as usize]
            .store(SaveLayout::EMPTY, Ordering::Release);
        Ok(())
    }

    /// Every non-empty record.
    pub fn records(&self, meta: &DeoptMetadata) -> Result<Vec<Record>, DeoptError> {
        (0..self.slots)
            .filter_map(|s| self.read(s, meta).transpose())
            .collect()
    }

    /// The site word of record `s` (`s < slots`).
    fn site_word(&self, s: usize) -> &AtomicU64 {
        &self.words[s * self.layout.record_words as usize + SaveLayout::SITE_WORD as usize]
    }

    /// Show the collector every reference in the area's records (the
    /// metadata's [`crate::SiteMap::ref_words`] of each record's site):
    /// `f` reads each and may replace it (the object moved). Only while no
    /// one writes records (at a safepoint). A record whose site the
    /// metadata does not have is an error, and nothing of it is visited.
    pub fn visit_refs(
        &self,
        meta: &DeoptMetadata,
        f: &mut dyn FnMut(&mut u32),
    ) -> Result<(), DeoptError> {
        let rw = self.layout.record_words as usize;
        for slot in 0..self.slots {
            let sw = self.site_word(slot).load(Ordering::Acquire);
            if sw == SaveLayout::EMPTY {
                continue;
            }
            let site = meta.site(SiteId(sw as u32)).ok_or(DeoptError::BadSite {
                slot,
                site: sw as u32,
                version: meta.version,
            })?;
            for w in site.ref_words() {
                let Some(cell) = self.words.get(slot * rw + w as usize) else {
                    continue;
                };
                let mut r = cell.load(Ordering::Relaxed) as u32;
                f(&mut r);
                cell.store(u64::from(r), Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Whether every record is empty (an area that may be reused as is).
    pub fn is_clear(&self) -> bool {
        self.is_clear_in(0..self.slots)
    }

    /// Whether records `range` (clipped to the area) are empty.
    pub fn is_clear_in(&self, range: std::ops::Range<usize>) -> bool {
        (range.start.min(self.slots)..range.end.min(self.slots))
            .all(|s| self.site_word(s).load(Ordering::Acquire) == SaveLayout::EMPTY)
    }

    /// Empty every record (before a relaunch).
    pub fn clear(&self) {
        for s in 0..self.slots {
            self.site_word(s)
                .store(SaveLayout::EMPTY, Ordering::Release);
        }
    }
}
