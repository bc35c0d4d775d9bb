//! Reasons, site maps and the save-record layout.

use offload_ir::analysis::{DeoptSite, FrameState, FuncAnalysis, Value};
use offload_ir::isa::hz;
use offload_ir::{Bci, ClassId, ExceptionKind, FuncId, SiteId, Type};

/// Why a workitem deoptimized.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A null reference reached a dereference.
    NullCheck,
    /// An array index was out of bounds.
    BoundsCheck,
    /// An integer division by zero.
    DivideByZero,
    /// A `checkcast` failed.
    ClassCast,
    /// `newarray` with a negative length.
    NegativeSize,
    /// The TLAB could not be refilled (eden exhausted), or the policy said
    /// not to wait for a refill.
    AllocationFailure,
    /// The host requested a safepoint.
    Safepoint,
    /// Code compiled as unreachable was reached (a speculated-away branch).
    Unreached,
    /// A speculated receiver class or non-null guard failed.
    TypeGuard,
    /// An explicit `throw`, or a call whose callee stopped, handed to the host.
    Throw,
    /// The device has no code for this case and hands it to the host: sine
    /// and cosine of arguments so large that their reduction needs libm's
    /// multi-word 2/pi table (|x| >= 2^20*pi/2 in f64, 2^28*pi/2 in f32) on
    /// the GPU. The CPU device calls libm and never takes it.
    DeviceLimit,
}

impl Reason {
    /// Every reason, in code order.
    pub const ALL: [Reason; 11] = [
        Reason::NullCheck,
        Reason::BoundsCheck,
        Reason::DivideByZero,
        Reason::ClassCast,
        Reason::NegativeSize,
        Reason::AllocationFailure,
        Reason::Safepoint,
        Reason::Unreached,
        Reason::TypeGuard,
        Reason::Throw,
        Reason::DeviceLimit,
    ];

    /// The code stored in save records.
    pub fn code(self) -> u32 {
        // `ALL` lists the variants in declaration order.
        self as u32
    }

    /// The reason with this code.
    pub fn from_code(c: u32) -> Option<Reason> {
        Reason::ALL.get(c as usize).copied()
    }

    /// Short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Reason::NullCheck => "null",
            Reason::BoundsCheck => "bounds",
            Reason::DivideByZero => "div0",
            Reason::ClassCast => "cast",
            Reason::NegativeSize => "negsize",
            Reason::AllocationFailure => "alloc",
            Reason::Safepoint => "safepoint",
            Reason::Unreached => "unreached",
            Reason::TypeGuard => "typeguard",
            Reason::Throw => "throw",
            Reason::DeviceLimit => "devlimit",
        }
    }

    /// The exception the interpreter raises when it re-executes the site and
    /// the check really fails (`None` for reasons that are not failed checks).
    pub fn exception(self) -> Option<ExceptionKind> {
        Some(match self {
            Reason::NullCheck => ExceptionKind::NullPointer,
            Reason::BoundsCheck => ExceptionKind::IndexOutOfBounds,
            Reason::DivideByZero => ExceptionKind::Arithmetic,
            Reason::ClassCast => ExceptionKind::ClassCast,
            Reason::NegativeSize => ExceptionKind::NegativeArraySize,
            _ => return None,
        })
    }

    /// The reasons a site with these hazards (and a poll, if `poll`) can
    /// deoptimize for. A speculation adds its own reason (`Unreached`,
    /// `TypeGuard`) to the site it guards ([`DeoptMetadata::speculate`]).
    pub fn for_site(hazards: offload_ir::Hazards, poll: bool) -> Vec<Reason> {
        let mut out = Vec::new();
        for (bit, r) in [
            (hz::NULL_CHECK, Reason::NullCheck),
            (hz::BOUNDS_CHECK, Reason::BoundsCheck),
            (hz::DIV_CHECK, Reason::DivideByZero),
            (hz::CAST_CHECK, Reason::ClassCast),
            (hz::NEG_SIZE_CHECK, Reason::NegativeSize),
            (hz::ALLOCATES, Reason::AllocationFailure),
            (hz::THROWS, Reason::Throw),
            (hz::CALLS, Reason::Throw),
            (hz::HOST_MATH, Reason::DeviceLimit),
        ] {
            if hazards.has(bit) && !out.contains(&r) {
                out.push(r);
            }
        }
        // Allocation's slow path polls for safepoints too.
        if poll || hazards.has(hz::ALLOCATES) {
            out.push(Reason::Safepoint);
        }
        out
    }
}

/// What a compiled version assumed at one instruction, from the
/// interpreter's profile.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Assumption {
    /// The conditional branch always went one way (`taken`: it jumped; else
    /// it fell through); the other way is compiled as a deopt
    /// ([`Reason::Unreached`]).
    Branch {
        /// The direction the profile saw.
        taken: bool,
    },
    /// The virtual call's receiver is of one of these classes (module class
    /// ids); each is guarded and its implementation inlined, any other class
    /// deopts ([`Reason::TypeGuard`]).
    Receivers(Vec<ClassId>),
    /// The reference this instruction dereferences is never null: the check
    /// is a guard that deopts as a failed speculation
    /// ([`Reason::TypeGuard`]) instead of a null check.
    NonNull,
}

impl Assumption {
    /// The reason a failure of this assumption deopts with.
    pub fn reason(&self) -> Reason {
        match self {
            Assumption::Branch { .. } => Reason::Unreached,
            Assumption::Receivers(_) | Assumption::NonNull => Reason::TypeGuard,
        }
    }

    /// Short name of the kind, for reports: `branch`, `receivers`, `nonnull`.
    pub fn kind(&self) -> &'static str {
        match self {
            Assumption::Branch { .. } => "branch",
            Assumption::Receivers(_) => "receivers",
            Assumption::NonNull => "nonnull",
        }
    }
}

/// One speculation: an assumption about instruction `bci` of function
/// `func` (the kernel, or a function inlined into it — one speculation then
/// guards every inlined copy).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Speculation {
    /// The function.
    pub func: FuncId,
    /// The instruction.
    pub bci: Bci,
    /// What was assumed.
    pub assumed: Assumption,
}

impl std::fmt::Display for Speculation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "f{}@{}: ", self.func.0, self.bci)?;
        match &self.assumed {
            Assumption::Branch { taken: true } => write!(f, "branch always taken"),
            Assumption::Branch { taken: false } => write!(f, "branch never taken"),
            Assumption::Receivers(cs) => {
                let ids: Vec<String> = cs.iter().map(|c| c.0.to_string()).collect();
                write!(f, "receiver class in {{{}}}", ids.join(", "))
            }
            Assumption::NonNull => write!(f, "never null"),
        }
    }
}

/// A speculation compiled into a version, with the site that guards it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecRecord {
    /// The site whose exit the failed guard takes.
    pub site: SiteId,
    /// The speculation.
    pub spec: Speculation,
}

/// Where one frame-state value sits in the save record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SlotLoc {
    /// The local or stack slot.
    pub value: Value,
    /// Its type at the site.
    pub ty: Type,
    /// Its word in the record (counting the two header words).
    pub word: u32,
}

/// One frame of a deopt site: a kernel site has one; a site in code the
/// compiler inlined has the kernel's frame stopped at its call, the frames of
/// the calls in between, and the inlined function's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteFrame {
    /// The function.
    pub func: FuncId,
    /// Where it stopped: the call for an outer frame, the site itself for the
    /// innermost.
    pub bci: Bci,
    /// How many record values are this frame's (they follow the previous
    /// frame's).
    pub values: u32,
}

/// One deopt site of a kernel version with its frame-state map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiteMap {
    /// The site.
    pub id: SiteId,
    /// Its bytecode index in the kernel (for a site in inlined code, the
    /// kernel's call that leads to it; see `frames`).
    pub bci: Bci,
    /// Why it can deoptimize.
    pub reasons: Vec<Reason>,
    /// The live values of every frame, outermost frame first, and their
    /// record words.
    pub slots: Vec<SlotLoc>,
    /// The innermost frame's state as the `ir` analysis computed it.
    pub frame: FrameState,
    /// The frames, outermost (the kernel) first; the interpreter rebuilds
    /// them all and re-executes the innermost frame's instruction.
    pub frames: Vec<SiteFrame>,
    /// A *re-entry point* ([`reentry_point`]): a compiled version with
    /// re-entry code (`offload_jit::CompileOptions::no_reentry` unset) can
    /// resume a record of this site on the device — load the frames into
    /// its variables and jump to the innermost frame's instruction — when
    /// the record's reason is [`SiteMap::resumable`]. The same frame-state
    /// map serves the exit and the re-entry.
    pub reentry: bool,
}

/// Whether the analysis site `s` is a re-entry point: a loop header (where
/// back-edge polls stop a workitem for a safepoint; not the function's
/// entry, which polls between workitems without a record) or an
/// allocation (whose slow path stops for a safepoint or a full heap). At
/// either the device re-executes the instruction from the saved state,
/// exactly as the interpreter would.
pub fn reentry_point(s: &DeoptSite) -> bool {
    (s.poll && s.bci != 0) || s.hazards.has(hz::ALLOCATES)
}

impl SiteMap {
    /// Whether a record of this site with `reason` may be resumed on the
    /// device: the site is a re-entry point and the workitem stopped for a
    /// safepoint or a full heap — the host's business, not a property of
    /// the code (a failed check, speculation or device limit would only
    /// fail again, and goes to the interpreter).
    pub fn resumable(&self, reason: Reason) -> bool {
        self.reentry && matches!(reason, Reason::Safepoint | Reason::AllocationFailure)
    }

    /// The record words that hold references (the collector updates them).
    pub fn ref_words(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().filter(|s| s.ty.is_ref()).map(|s| s.word)
    }

    /// Every slot with the index (into [`SiteMap::frames`]) of the frame it
    /// belongs to, outermost frame first: what a code generator stores at
    /// a deopt exit.
    pub fn frame_slots(&self) -> impl Iterator<Item = (usize, &SlotLoc)> + '_ {
        self.frames
            .iter()
            .enumerate()
            .flat_map(|(fi, f)| std::iter::repeat_n(fi, f.values as usize))
            .zip(&self.slots)
    }
}

/// The shape of a save record, shared by every code generator and the
/// runtime.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SaveLayout {
    /// Words per record: the header plus the widest frame state.
    pub record_words: u32,
}

impl SaveLayout {
    /// Header words before the values.
    pub const HEADER_WORDS: u32 = 2;
    /// Word of the workitem index.
    pub const WORKITEM_WORD: u32 = 0;
    /// Word of the site id and reason.
    pub const SITE_WORD: u32 = 1;
    /// The site word of an empty record.
    pub const EMPTY: u64 = u64::MAX;

    /// Pack the site word.
    pub fn site_word(site: SiteId, reason: Reason) -> u64 {
        u64::from(reason.code()) << 32 | u64::from(site.0)
    }
}

/// The deopt metadata of one compiled kernel version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeoptMetadata {
    /// The kernel.
    pub kernel: FuncId,
    /// The compiled version.
    pub version: u32,
    /// Its sites, in bytecode order (ids are indices).
    pub sites: Vec<SiteMap>,
    /// The record layout.
    pub layout: SaveLayout,
    /// The speculations compiled into this version, in the order the code
    /// generator met them.
    pub speculations: Vec<SpecRecord>,
}

impl DeoptMetadata {
    /// The metadata of `kernel` from its shared analysis.
    pub fn new(a: &FuncAnalysis, kernel: FuncId, version: u32) -> DeoptMetadata {
        let sites: Vec<SiteMap> = a
            .sites
            .iter()
            .map(|s| SiteMap {
                id: s.id,
                bci: s.bci,
                reasons: Reason::for_site(s.hazards, s.poll),
                slots: s
                    .frame
                    .values()
                    .enumerate()
                    .map(|(i, (value, ty))| SlotLoc {
                        value,
                        ty,
                        word: SaveLayout::HEADER_WORDS + i as u32,
                    })
                    .collect(),
                frame: s.frame.clone(),
                frames: vec![SiteFrame {
                    func: kernel,
                    bci: s.bci,
                    values: s.frame.len() as u32,
                }],
                reentry: reentry_point(s),
            })
            .collect();
        DeoptMetadata {
            kernel,
            version,
            layout: SaveLayout {
                record_words: SaveLayout::HEADER_WORDS + a.max_frame as u32,
            },
            sites,
            speculations: Vec::new(),
        }
    }

    /// Record that the guard of `spec` exits through `site`, adding the
    /// speculation's reason to the site's reasons.
    pub fn speculate(&mut self, site: SiteId, spec: Speculation) {
        let reason = spec.assumed.reason();
        let s = &mut self.sites[site.index()];
        if !s.reasons.contains(&reason) {
            s.reasons.push(reason);
        }
        let rec = SpecRecord { site, spec };
        if !self.speculations.contains(&rec) {
            self.speculations.push(rec);
        }
    }

    /// The speculations a deopt at `site` for `reason` can come from.
    pub fn speculations_at(
        &self,
        site: SiteId,
        reason: Reason,
    ) -> impl Iterator<Item = &Speculation> + '_ {
        self.speculations
            .iter()
            .filter(move |r| r.site == site && r.spec.assumed.reason() == reason)
            .map(|r| &r.spec)
    }

    /// Add a site in inlined code: `outer` lists the frames stopped at their
    /// calls, outermost (the kernel) first, each with the analysis site of
    /// its call; `site` is the inlined function `func`'s own site. Returns
    /// the new site's id and widens the record layout if needed.
    pub fn add_inlined(
        &mut self,
        outer: &[(FuncId, &DeoptSite)],
        func: FuncId,
        site: &DeoptSite,
    ) -> SiteId {
        let id = SiteId(self.sites.len() as u32);
        let mut slots = Vec::new();
        let mut frames = Vec::new();
        for (f, s) in outer.iter().copied().chain(std::iter::once((func, site))) {
            for (value, ty) in s.frame.values() {
                slots.push(SlotLoc {
                    value,
                    ty,
                    word: SaveLayout::HEADER_WORDS + slots.len() as u32,
                });
            }
            frames.push(SiteFrame {
                func: f,
                bci: s.bci,
                values: s.frame.len() as u32,
            });
        }
        self.layout.record_words = self
            .layout
            .record_words
            .max(SaveLayout::HEADER_WORDS + slots.len() as u32);
        self.sites.push(SiteMap {
            id,
            bci: outer.first().map_or(site.bci, |(_, s)| s.bci),
            reasons: Reason::for_site(site.hazards, site.poll),
            slots,
            frame: site.frame.clone(),
            frames,
            reentry: reentry_point(site),
        });
        id
    }

    /// The site with this id.
    pub fn site(&self, id: SiteId) -> Option<&SiteMap> {
        self.sites.get(id.index())
    }

    /// The kernel's own site at this bytecode index (not one in inlined
    /// code).
    pub fn site_at(&self, bci: Bci) -> Option<&SiteMap> {
        self.sites
            .iter()
            .find(|s| s.bci == bci && s.frames.len() == 1)
    }
}
