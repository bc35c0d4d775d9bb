//! `offload-deopt`: what a deoptimizing workitem leaves behind, and how the
//! runtime finds its way back from it.
//!
//! - [`Reason`]: why a workitem stopped (a failed check, an allocation
//!   failure, a safepoint, a failed speculation).
//! - [`DeoptMetadata`]: for one compiled kernel version, every deopt site
//!   (from the `ir` analyses) with its frame-state map — which values are
//!   live, their types, which are references, and the word of the save record
//!   each one occupies — and the [`SaveLayout`] shared with the code
//!   generators.
//! - [`SaveArea`]: C records, one per concurrent slot, each as wide as the
//!   kernel's widest frame state (Sumatra's "union"); never per workitem.
//! - [`NeverRan`]: the workitems that never started, in O(C): each slot's
//!   unstarted rest of its chunk plus the untouched `[cursor, end)`.
//! - [`DeoptCounters`]: counts per (kernel version, site, reason), for the
//!   recompilation policies.
//!
//! A save record is a run of 64-bit words:
//!
//! | word | contents |
//! |------|----------|
//! | 0    | the workitem index (`i64`) |
//! | 1    | site id in the low 32 bits, [`Reason`] code in the high 32; all ones when the slot is empty |
//! | 2..  | the frame-state values, in [`offload_ir::analysis::FrameState::values`] order: `i32`/`f32` in the low 32 bits, `i64`/`f64` whole, references as 32-bit heap word offsets |
//!
//! ```
//! use offload_deopt::{DeoptMetadata, Reason, Record, SaveArea};
//! use offload_ir::analysis::analyze;
//!
//! let src = "kernel k(i: i64, xs: i32[]) {\n    load xs\n    load i\n    i64.to_i32\n    i32.aload\n    pop\n    ret\n}\n";
//! let v = offload_ir::load("k.obc", src).unwrap();
//! let k = v.func_named("k").unwrap();
//! let meta = DeoptMetadata::new(&analyze(&v, k), k, 0);
//! let site = meta.sites.iter().find(|s| s.reasons.contains(&Reason::BoundsCheck)).unwrap();
//! let area = SaveArea::new(4, meta.layout);
//! area.write(2, &Record { workitem: 7, site: site.id, reason: Reason::BoundsCheck, values: vec![16, 7] }).unwrap();
//! let rec = area.read(2, &meta).unwrap().unwrap();
//! assert_eq!(rec.workitem, 7);
//! assert!(area.read(0, &meta).unwrap().is_none());
//! ```

#![deny(missing_docs)]

mod counters;
mod metadata;
mod never_ran;
mod save_area;

pub use counters::{DeoptCounters, KernelVersion};
pub use metadata::{
    Assumption, DeoptMetadata, Reason, SaveLayout, SiteFrame, SiteMap, SlotLoc, SpecRecord,
    Speculation, reentry_point,
};
pub use never_ran::NeverRan;
pub use save_area::{DeoptError, Record, SaveArea};
