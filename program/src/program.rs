//! A verified module prepared for execution: object layout, vtables, and the
//! shared analyses, with the module's classes placed in the heap's global
//! class-id space.

use offload_heap::ClassShape;
use offload_heap::layout::{HEADER_BYTES, kind_size};
use offload_ir::analysis::{FuncAnalysis, analyze};
use offload_ir::{ClassId, Elem, FuncId, FuncKind, Kind, Type, Verified};
use std::sync::Arc;

/// Field offsets and instance sizes of a module's classes.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Byte offset of each field (by [`offload_ir::FieldId`]) from the object start.
    pub field_offset: Vec<u32>,
    /// Instance size in bytes of each class (header included, multiple of 8).
    pub class_size: Vec<u32>,
    /// Offsets of every reference field of each class (inherited ones too).
    pub class_refs: Vec<Vec<u32>>,
}

impl Layout {
    /// Lay out every class: superclass fields first, each field aligned to
    /// its size.
    pub fn new(v: &Verified) -> Layout {
        let n = v.classes.len();
        let mut field_offset = vec![0u32; v.fields.len()];
        let mut class_size = vec![0u32; n];
        let mut class_refs = vec![Vec::new(); n];
        let mut done = vec![false; n];
        for c in 0..n {
            // Lay out the chain from the root down (the verifier ruled out cycles).
            let chain: Vec<ClassId> = v.ancestors(ClassId::new(c)).collect();
            for &k in chain.iter().rev() {
                if done[k.index()] {
                    continue;
                }
                let (mut end, mut refs) = match v.class(k).superclass {
                    Some(s) => (class_size[s.index()], class_refs[s.index()].clone()),
                    None => (HEADER_BYTES, Vec::new()),
                };
                for &f in &v.class(k).fields {
                    let kind = v.field(f).ty.kind();
                    let size = kind_size(kind);
                    end = end.div_ceil(size) * size;
                    field_offset[f.index()] = end;
                    if kind == Kind::Ref {
                        refs.push(end);
                    }
                    end += size;
                }
                class_size[k.index()] = end.div_ceil(8) * 8;
                class_refs[k.index()] = refs;
                done[k.index()] = true;
            }
        }
        Layout {
            field_offset,
            class_size,
            class_refs,
        }
    }
}

/// The most kinds a kernel's launches allocate on pages of their own
/// ([`Program::allocation_kinds`]); a kernel that makes more allocates
/// them all on mixed pages. Each kind costs a TLAB per slot (group) and,
/// when the launch ends, the unused rest of each.
pub const MAX_ALLOCATION_KINDS: usize = 8;

/// A verified module ready to run.
#[derive(Debug)]
pub struct Program {
    verified: Arc<Verified>,
    /// Global class id of the module's class 0.
    pub class_base: u32,
    /// Object layout.
    pub layout: Layout,
    vtables: Vec<Vec<FuncId>>,
    slot_of: Vec<Option<u32>>,
    analyses: Vec<Option<FuncAnalysis>>,
    /// [`Program::allocation_kinds`] of each function, once asked for.
    alloc_tags: Vec<std::sync::OnceLock<Box<[u32]>>>,
}

impl Program {
    /// Prepare `v`, placing its classes at global ids `class_base..`.
    pub fn new(v: Arc<Verified>, class_base: u32) -> Program {
        let vtables = (0..v.classes.len())
            .map(|c| v.vtable(ClassId::new(c)))
            .collect();
        let slot_of = (0..v.funcs.len())
            .map(|f| v.vtable_slot(FuncId::new(f)).map(|s| s as u32))
            .collect();
        let analyses = (0..v.funcs.len())
            .map(|f| {
                let f = FuncId::new(f);
                (!v.func(f).is_abstract()).then(|| analyze(&v, f))
            })
            .collect();
        Program {
            layout: Layout::new(&v),
            alloc_tags: (0..v.funcs.len()).map(|_| Default::default()).collect(),
            verified: v,
            class_base,
            vtables,
            slot_of,
            analyses,
        }
    }

    /// The verified module.
    pub fn verified(&self) -> &Verified {
        &self.verified
    }

    /// A shared handle to the verified module.
    pub fn verified_arc(&self) -> &Arc<Verified> {
        &self.verified
    }

    /// The analyses of `f` (`None` for abstract methods).
    pub fn analysis(&self, f: FuncId) -> Option<&FuncAnalysis> {
        self.analyses[f.index()].as_ref()
    }

    /// Whether kernel (or function) `k` may allocate: an allocating
    /// instruction in it or in any function it may call (for a `callvirt`,
    /// every implementation any class dispatches to). Only such kernels
    /// need the nursery reset at each workitem's end.
    pub fn may_allocate(&self, k: FuncId) -> bool {
        self.reaches(k, |_, inst| {
            inst.opcode().hazards().has(offload_ir::isa::hz::ALLOCATES)
        })
    }

    /// The kinds of what kernel (or function) `k` may allocate, in it or
    /// in any function it may call, as page tags (`offload_abi::pages`): a
    /// launch of `k` has a TLAB per kind per slot (group), carved from
    /// pages of that tag (`offload_heap::pages`), and compiled code picks
    /// an allocation site's TLAB by the position of its kind here.
    ///
    /// Each class it makes that has a superclass or a subclass is a kind
    /// of its own: only for those can the class a virtual call, a guarded
    /// inline or a class test needs differ between objects of one static
    /// type, so only those gain from being found by address (the paper's
    /// COAL, too, segregates only where it pays). Everything else it makes
    /// (arrays, whose tests read the header, and classes alone in their
    /// hierarchy) shares one kind on mixed pages, `MIXED`, which comes
    /// first: it keeps the fast path's TLAB state in a register and the
    /// per-workitem nursery reset (`offload_jit::cpu`), which the other
    /// kinds forgo — and the kernels that make nothing else (most) keep
    /// every allocation exactly as before. `[MIXED]` when `k` makes more
    /// than [`MAX_ALLOCATION_KINDS`] kinds, or nothing.
    pub fn allocation_kinds(&self, k: FuncId) -> &[u32] {
        use offload_heap::pages::{ARRAYS, MIXED};
        self.alloc_tags[k.index()].get_or_init(|| {
            let v = self.verified();
            let in_hierarchy = |c: ClassId| {
                v.classes[c.index()].superclass.is_some()
                    || v.classes.iter().any(|o| o.superclass == Some(c))
            };
            // What shares the mixed kind, and the classes of their own.
            let mut shared = std::collections::BTreeSet::new();
            let mut own = std::collections::BTreeSet::new();
            self.reaches(k, |_, inst| {
                match *inst {
                    offload_ir::Inst::New { class } if in_hierarchy(class) => {
                        own.insert(self.global_class(class));
                    }
                    offload_ir::Inst::New { class } => {
                        shared.insert(self.global_class(class));
                    }
                    offload_ir::Inst::NewArray { .. } => {
                        shared.insert(ARRAYS);
                    }
                    ref other => {
                        if other.opcode().hazards().has(offload_ir::isa::hz::ALLOCATES) {
                            shared.insert(MIXED);
                        }
                    }
                }
                false
            });
            own.retain(|&c| offload_heap::pages::names_class(c));
            let first = (!shared.is_empty()).then_some(MIXED);
            let kinds: Vec<u32> = first.into_iter().chain(own).collect();
            if kinds.is_empty() || kinds.len() > MAX_ALLOCATION_KINDS {
                Box::new([MIXED])
            } else {
                kinds.into()
            }
        })
    }

    /// Whether kernel `k`, or a function it may call, has an instruction
    /// for which `hit(function, instruction)` holds.
    pub fn reaches(
        &self,
        k: FuncId,
        mut hit: impl FnMut(FuncId, &offload_ir::Inst) -> bool,
    ) -> bool {
        let v = self.verified();
        let mut seen = std::collections::HashSet::new();
        let mut work = vec![k];
        while let Some(f) = work.pop() {
            if !seen.insert(f) {
                continue;
            }
            for inst in &v.func(f).body {
                if hit(f, inst) {
                    return true;
                }
                match *inst {
                    offload_ir::Inst::Call { func } => work.push(func),
                    offload_ir::Inst::CallVirt { method } => work.extend(
                        (0..v.classes.len()).filter_map(|c| self.dispatch(ClassId::new(c), method)),
                    ),
                    _ => {}
                }
            }
        }
        false
    }

    /// Whether kernel `k`, or a function it may call, has a re-entry point
    /// (`offload_deopt::reentry_point`: a loop, or an allocation).
    pub fn has_reentry_points(&self, k: FuncId) -> bool {
        self.reaches(k, |f, inst| {
            inst.opcode().hazards().has(offload_ir::isa::hz::ALLOCATES)
                || self.analysis(f).is_some_and(|a| !a.loop_headers.is_empty())
        })
    }

    /// The implementation of method `m` for an instance of class `c`.
    pub fn dispatch(&self, c: ClassId, m: FuncId) -> Option<FuncId> {
        let slot = self.slot_of[m.index()]?;
        self.vtables.get(c.index())?.get(slot as usize).copied()
    }

    /// The global id of class `c`.
    pub fn global_class(&self, c: ClassId) -> u32 {
        self.class_base + c.0
    }

    /// The module class of a global class id, if it is one of this module's.
    pub fn local_class(&self, global: u32) -> Option<ClassId> {
        global
            .checked_sub(self.class_base)
            .filter(|&l| (l as usize) < self.verified.classes.len())
            .map(ClassId)
    }

    /// An array element type with classes in the global id space.
    pub fn global_elem(&self, e: Elem) -> Elem {
        match e {
            Elem::Class(c) => Elem::Class(ClassId(self.global_class(c))),
            e => e,
        }
    }

    /// An array element type with global class ids back in module ids.
    pub fn local_elem(&self, e: Elem) -> Option<Elem> {
        match e {
            Elem::Class(c) => self.local_class(c.0).map(Elem::Class),
            e => Some(e),
        }
    }

    /// Whether an object with header `h` is an instance of module type `t`
    /// (arrays are invariant; every object is a `ref`).
    pub fn header_is_instance(&self, h: offload_heap::Header, t: Type) -> bool {
        use offload_heap::Header;
        match (h, t) {
            (Header::Filler { .. }, _) => false,
            (_, Type::Ref) => true,
            (Header::Object { class, .. }, Type::Class(c)) => self
                .local_class(class)
                .is_some_and(|l| self.verified.is_subclass(l, c)),
            (Header::Array { elem, dims, .. }, Type::Array(e, d)) => {
                d == dims && self.local_elem(elem) == Some(e)
            }
            _ => false,
        }
    }

    /// The type of an object with header `h`, written as in the text form.
    pub fn header_type_name(&self, h: offload_heap::Header) -> String {
        use offload_heap::Header;
        match h {
            Header::Object { class, .. } => match self.local_class(class) {
                Some(c) => self.verified.class(c).name.clone(),
                None => format!("<class {class} of another module>"),
            },
            Header::Array { elem, dims, .. } => match self.local_elem(elem) {
                Some(e) => self.verified.type_name(Type::Array(e, dims)),
                None => "<array of another module's class>".into(),
            },
            Header::Filler { .. } => "<dead object>".into(),
        }
    }

    /// What the heap verifier needs to know about a global class id.
    pub fn class_shape(&self, global: u32) -> Option<ClassShape> {
        let c = self.local_class(global)?;
        Some(ClassShape {
            size: self.layout.class_size[c.index()],
            ref_offsets: self.layout.class_refs[c.index()].clone(),
        })
    }

    /// Whether `f` is a kernel.
    pub fn is_kernel(&self, f: FuncId) -> bool {
        self.verified.func(f).kind == FuncKind::Kernel
    }
}
