//! A loaded [`Module`]: its kernels, the closures made of them, and the
//! objects and arrays of references made from its classes.

use super::*;

impl Module {
    /// The module's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The prepared program (verified module, layout, analyses).
    pub fn program(&self) -> &Arc<Program> {
        &self.prog
    }

    /// The names of the kernels.
    pub fn kernels(&self) -> Vec<String> {
        let v = self.prog.verified();
        v.kernels().map(|k| v.func(k).name.clone()).collect()
    }

    /// The kernel named `kernel`, or an error listing the kernels there are.
    pub(crate) fn kernel_id(&self, kernel: &str) -> Result<FuncId, OffloadError> {
        self.prog
            .verified()
            .func_named(kernel)
            .filter(|&k| self.prog.is_kernel(k))
            .ok_or_else(|| {
                let all = self.kernels();
                let nearest =
                    offload_ir::nearest(kernel, all.iter().map(String::as_str)).map(str::to_string);
                OffloadError::NoSuchKernel {
                    module: self.name.clone(),
                    kernel: kernel.to_string(),
                    available: all.join(", "),
                    nearest,
                }
            })
    }

    /// Bind a kernel to its captures (every parameter after the index, in
    /// order). Each capture is checked against its parameter: numbers by
    /// type, references by the runtime type of the object they point at.
    /// Captured references must not be null.
    pub fn closure(
        &self,
        kernel: &str,
        captures: impl IntoIterator<Item = Arg>,
    ) -> Result<Closure, OffloadError> {
        let v = self.prog.verified();
        let k = self.kernel_id(kernel)?;
        let f = v.func(k);
        // The parameters after the index, less those that carry the
        // shape of a 2-D or 3-D range (bound at each launch).
        let dims = offload_lang::ranges::dims_of(f.params().iter().map(|p| p.name.as_str()));
        let hidden = offload_lang::ranges::hidden_names(dims).len();
        let params = &f.params()[1..f.params().len() - hidden];
        let captures: Vec<Arg> = captures.into_iter().collect();
        let cerr = |problem: String| OffloadError::Capture {
            kernel: kernel.to_string(),
            problem,
        };
        if captures.len() != params.len() {
            let names: Vec<String> = params
                .iter()
                .map(|p| format!("{}: {}", p.name, v.type_name(p.ty)))
                .collect();
            return Err(cerr(format!(
                "takes {} capture(s) ({}), {} given",
                params.len(),
                names.join(", "),
                captures.len()
            )));
        }
        let mut raw = Vec::with_capacity(captures.len());
        let mut refs = Vec::new();
        // The references are checked where no collection can move them.
        let _running = self.rt.running();
        for (i, (p, a)) in params.iter().zip(&captures).enumerate() {
            let want = v.type_name(p.ty);
            let bad = |found: String| {
                cerr(format!(
                    "capture {} (`{}`) must be {want}, found {found}",
                    i + 1,
                    p.name
                ))
            };
            let bits = match (p.ty, a) {
                (Type::I32, Arg::I32(x)) => u64::from(*x as u32),
                (Type::I64, Arg::I64(x)) => *x as u64,
                (Type::F32, Arg::F32(x)) => u64::from(x.to_bits()),
                (Type::F64, Arg::F64(x)) => x.to_bits(),
                (t, Arg::Ref(HeapRef { r, rt })) if t.is_ref() => {
                    if r.is_null() {
                        return Err(bad("null".into()));
                    }
                    if *rt != self.rt.inner.id {
                        return Err(bad("a reference from another runtime".into()));
                    }
                    let found = self.runtime_type(r.get())?;
                    if !self.is_instance(r.get(), t)? {
                        return Err(bad(found));
                    }
                    refs.push((i, r.clone()));
                    0
                }
                (_, a) => return Err(bad(arg_kind(a).into())),
            };
            raw.push(bits);
        }
        Ok(Closure {
            module: self.clone(),
            kernel: k,
            captures: raw,
            refs,
            dims,
            summed: Vec::new(),
        })
    }

    fn is_instance(&self, r: Ref, t: Type) -> Result<bool, OffloadError> {
        Ok(self
            .prog
            .header_is_instance(self.rt.inner.env.heap.header(r)?, t))
    }

    fn runtime_type(&self, r: Ref) -> Result<String, OffloadError> {
        Ok(format!(
            "`{}`",
            self.prog
                .header_type_name(self.rt.inner.env.heap.header(r)?)
        ))
    }

    /// A new zeroed instance of `class`.
    pub fn new_object(&self, class: &str) -> Result<Object, OffloadError> {
        let v = self.prog.verified();
        let c = self.class_id(class)?;
        if let Some(&a) = v.vtable(c).iter().find(|&&m| v.func(m).is_abstract()) {
            return Err(OffloadError::Lookup(format!(
                "cannot instantiate `{class}`: `{}` is abstract",
                v.func(a).name
            )));
        }
        let r = self.rt.alloc_rooted(Header::Object {
            class: self.prog.global_class(c),
            size: self.prog.layout.class_size[c.index()],
        })?;
        Ok(Object {
            r,
            class: c,
            module: self.clone(),
        })
    }

    /// The byte offset of field `name` of `o` now, and its type (call it
    /// under [`Runtime::hold`]).
    fn field_of(&self, o: &Object, name: &str) -> Result<(usize, Type), OffloadError> {
        let v = self.prog.verified();
        if o.module.rt.inner.id != self.rt.inner.id || !Arc::ptr_eq(&o.module.prog, &self.prog) {
            return Err(OffloadError::Handle(
                "the object belongs to another module".into(),
            ));
        }
        let f = v.lookup_field(o.class, name).ok_or_else(|| {
            OffloadError::Lookup(format!(
                "class `{}` has no field `{name}`",
                v.class(o.class).name
            ))
        })?;
        Ok((
            o.r.byte_offset() + self.prog.layout.field_offset[f.index()] as usize,
            v.field(f).ty,
        ))
    }

    /// Set a field of an object.
    pub fn set_field(
        &self,
        o: &Object,
        name: &str,
        value: impl Into<Arg>,
    ) -> Result<(), OffloadError> {
        self.rt.settle(None);
        let value = value.into();
        self.rt.hold(|heap| {
            let (off, ty) = self.field_of(o, name)?;
            match (ty, &value) {
                (Type::I32, Arg::I32(x)) => heap.store32(off, *x as u32)?,
                (Type::F32, Arg::F32(x)) => heap.store32(off, x.to_bits())?,
                (Type::I64, Arg::I64(x)) => heap.store64(off, *x as u64)?,
                (Type::F64, Arg::F64(x)) => heap.store64(off, x.to_bits())?,
                (t, Arg::Ref(HeapRef { r, rt }))
                    if t.is_ref()
                        && *rt == self.rt.inner.id
                        && (r.is_null() || self.is_instance(r.get(), t)?) =>
                {
                    heap.store32(off, r.get().0)?
                }
                (t, a) => {
                    return Err(OffloadError::Lookup(format!(
                        "field `{name}` has type {}, cannot store {}",
                        self.prog.verified().type_name(t),
                        arg_kind(a)
                    )));
                }
            }
            Ok(())
        })
    }

    /// Read a numeric field of an object.
    pub fn get_field<T: Element>(&self, o: &Object, name: &str) -> Result<T, OffloadError> {
        self.rt.settle(None);
        self.rt.hold(|heap| {
            let (off, ty) = self.field_of(o, name)?;
            if ty != T::ELEM.to_type() {
                return Err(OffloadError::Lookup(format!(
                    "field `{name}` has type {}, not {}",
                    self.prog.verified().type_name(ty),
                    self.prog.verified().type_name(T::ELEM.to_type())
                )));
            }
            Ok(T::from_bits(if kind_size(ty.kind()) == 8 {
                heap.load64(off)?
            } else {
                u64::from(heap.load32(off)?)
            }))
        })
    }
}

impl Module {
    /// The class named `class`, or an error naming the module and its
    /// nearest class name.
    fn class_id(&self, class: &str) -> Result<offload_ir::ClassId, OffloadError> {
        let v = self.prog.verified();
        v.class_named(class).ok_or_else(|| {
            let hint = offload_ir::nearest(class, v.classes.iter().map(|c| c.name.as_str()))
                .map_or(String::new(), |c| format!("; did you mean `{c}`?"));
            OffloadError::Lookup(format!(
                "module `{}` has no class `{class}`{hint}",
                self.name
            ))
        })
    }

    /// A new array of `len` null references to `class` (`class[]`).
    pub fn new_ref_array(&self, class: &str, len: usize) -> Result<RefArray, OffloadError> {
        let c = self.class_id(class)?;
        let len = u32::try_from(len)
            .ok()
            .filter(|&l| l <= i32::MAX as u32)
            .ok_or_else(|| {
                OffloadError::Handle(format!("array length {len} exceeds {}", i32::MAX))
            })?;
        let r = self.rt.alloc_rooted(Header::Array {
            elem: self.prog.global_elem(Elem::Class(c)),
            dims: 1,
            len,
        })?;
        Ok(RefArray {
            r,
            len,
            elem: c,
            module: self.clone(),
        })
    }

    /// The byte offset of element `i` of `a` now (call it under
    /// [`Runtime::hold`]).
    fn ref_slot(&self, a: &RefArray, i: usize) -> Result<usize, OffloadError> {
        if a.module.rt.inner.id != self.rt.inner.id || !Arc::ptr_eq(&a.module.prog, &self.prog) {
            return Err(OffloadError::Handle(
                "the array belongs to another module".into(),
            ));
        }
        if i >= a.len() {
            return Err(OffloadError::Handle(format!(
                "index {i} is out of bounds of an array of {}",
                a.len()
            )));
        }
        Ok(a.r.byte_offset() + 8 + i * 4)
    }

    /// Store a reference (null, or an instance of the element class) in
    /// element `i`.
    pub fn set_element(
        &self,
        a: &RefArray,
        i: usize,
        value: impl Into<Arg>,
    ) -> Result<(), OffloadError> {
        self.rt.settle(None);
        let value = value.into();
        self.rt.hold(|heap| {
            let off = self.ref_slot(a, i)?;
            match &value {
                Arg::Ref(HeapRef { r, rt })
                    if *rt == self.rt.inner.id
                        && (r.is_null() || self.is_instance(r.get(), Type::Class(a.elem))?) =>
                {
                    heap.store32(off, r.get().0)?;
                    Ok(())
                }
                Arg::Ref(h) if !h.is_null() => Err(OffloadError::Lookup(format!(
                    "cannot store a {} in an element of `{}[]`",
                    self.runtime_type(h.r.get())?,
                    a.elem_class()
                ))),
                v => Err(OffloadError::Lookup(format!(
                    "cannot store {} in an element of `{}[]`",
                    arg_kind(v),
                    a.elem_class()
                ))),
            }
        })
    }

    /// Element `i`: `None` for null, else a root of the object and the
    /// name of its runtime class.
    pub fn element(&self, a: &RefArray, i: usize) -> Result<Option<(Root, String)>, OffloadError> {
        self.rt.settle(None);
        self.rt.hold(|heap| {
            let off = self.ref_slot(a, i)?;
            let r = Ref(heap.load32(off)?);
            if r.is_null() {
                return Ok(None);
            }
            Ok(Some((
                self.rt.root(r),
                self.prog.header_type_name(heap.header(r)?),
            )))
        })
    }

    /// Read a reference field of an object, as a root of what it points
    /// at (null's root is null).
    pub fn get_ref_field(&self, o: &Object, name: &str) -> Result<Root, OffloadError> {
        self.rt.settle(None);
        self.rt.hold(|heap| {
            let (off, ty) = self.field_of(o, name)?;
            if !ty.is_ref() {
                return Err(OffloadError::Lookup(format!(
                    "field `{name}` has type {}, not a reference",
                    self.prog.verified().type_name(ty)
                )));
            }
            Ok(self.rt.root(Ref(heap.load32(off)?)))
        })
    }

    /// Every field of `o` (inherited ones first) with its type and value,
    /// as text: numbers as Rust prints them, references as `null` or
    /// `Type@offset`.
    pub fn fields(&self, o: &Object) -> Result<Vec<(String, String, String)>, OffloadError> {
        self.rt.settle(None);
        let v = self.prog.verified();
        let mut chain: Vec<ClassId> = v.ancestors(o.class).collect();
        chain.reverse();
        let _running = self.rt.running();
        let heap = &self.rt.inner.env.heap;
        let mut out = Vec::new();
        for c in chain {
            for &f in &v.class(c).fields {
                let fd = v.field(f);
                let (off, ty) = self.field_of(o, &fd.name)?;
                let text = match ty {
                    Type::I32 => (heap.load32(off)? as i32).to_string(),
                    Type::F32 => format!("{:?}", f32::from_bits(heap.load32(off)?)),
                    Type::I64 => (heap.load64(off)? as i64).to_string(),
                    Type::F64 => format!("{:?}", f64::from_bits(heap.load64(off)?)),
                    _ => {
                        let r = Ref(heap.load32(off)?);
                        if r.is_null() {
                            "null".to_string()
                        } else {
                            format!(
                                "{}@{:#x}",
                                self.runtime_type(r)?.trim_matches('`'),
                                r.byte_offset()
                            )
                        }
                    }
                };
                out.push((fd.name.clone(), v.type_name(ty), text));
            }
        }
        Ok(out)
    }

    /// A handle to the object `r` points at (found in a field or array
    /// element): an error unless it is an instance of one of this module's
    /// classes.
    pub fn object_at(&self, r: &Root) -> Result<Object, OffloadError> {
        let _running = self.rt.running();
        let h = self.rt.inner.env.heap.header(r.get())?;
        let r = r.get();
        match h {
            Header::Object { class, .. } => match self.prog.local_class(class) {
                Some(c) => Ok(Object {
                    r: self.rt.root(r),
                    class: c,
                    module: self.clone(),
                }),
                None => Err(OffloadError::Handle(format!(
                    "{} is an object of another module",
                    self.runtime_type(r)?
                ))),
            },
            _ => Err(OffloadError::Handle(format!(
                "{} is not an object",
                self.runtime_type(r)?
            ))),
        }
    }

    /// The runtime type of the object `r` points at, as the text form
    /// writes it (`None` for null).
    pub fn type_of(&self, r: &Root) -> Result<Option<String>, OffloadError> {
        self.rt.hold(|heap| {
            let r = r.get();
            if r.is_null() {
                return Ok(None);
            }
            Ok(Some(self.prog.header_type_name(heap.header(r)?)))
        })
    }
}

fn arg_kind(a: &Arg) -> &'static str {
    match a {
        Arg::I32(_) => "an i32",
        Arg::I64(_) => "an i64",
        Arg::F32(_) => "an f32",
        Arg::F64(_) => "an f64",
        Arg::Ref(_) => "a reference",
    }
}
