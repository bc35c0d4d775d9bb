//! Host-side handles: the values passed to kernels ([`Arg`]), typed
//! arrays ([`Array`]), objects and arrays of references, and copying
//! arrays into and out of the heap.

use super::*;

/// A value passed to a kernel: a number, or a reference to an array or
/// object of the runtime's heap. Numbers and handles convert with
/// `.into()`.
///
/// ```
/// use offload::{Arg, Runtime};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let y = rt.new_array::<f32>(4)?;
/// let args: [Arg; 3] = [2.0f32.into(), 7i64.into(), (&y).into()];
/// assert_eq!(args[0], Arg::F32(2.0));
/// assert_eq!(args[1], Arg::I64(7));
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`.
    F32(f32),
    /// An `f64`.
    F64(f64),
    /// A heap reference, with the runtime it belongs to.
    Ref(HeapRef),
}

/// A reference to an object of one runtime's heap, as an [`Arg`]: made
/// only by offload (from an [`Array`], an [`Object`], a [`RefArray`] or
/// [`crate::Runtime::null`]), so it always names the runtime whose heap
/// holds its object — a caller can neither build one from a number nor
/// move one to another runtime (the runtime checks the name wherever a
/// reference enters a launch or the heap). It keeps the object alive and
/// follows it when a collection moves it.
///
/// Relabelling one runtime's reference as another's does not compile
/// (the fields are private):
///
/// ```compile_fail,E0451
/// use offload::{Arg, HeapRef, Runtime};
/// let (a, b) = (Runtime::new().unwrap(), Runtime::new().unwrap());
/// let x = a.new_array::<i32>(4).unwrap();
/// let Arg::Ref(h) = Arg::from(&x) else { unreachable!() };
/// let forged = Arg::Ref(HeapRef { r: h.root().clone(), rt: b.id() });
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct HeapRef {
    /// The reference, as a root.
    pub(crate) r: Root,
    /// The owning runtime's id.
    pub(crate) rt: u64,
}

impl HeapRef {
    /// Whether it is null.
    pub fn is_null(&self) -> bool {
        self.r.is_null()
    }

    /// The byte offset of the object's header in its heap now (changes
    /// when a collection moves it): for display.
    pub fn byte_offset(&self) -> usize {
        self.r.byte_offset()
    }

    /// The root that holds the object (what it refers to now).
    pub fn root(&self) -> &Root {
        &self.r
    }

    /// The id of the runtime whose heap holds the object
    /// ([`crate::Runtime::id`]).
    pub fn runtime_id(&self) -> u64 {
        self.rt
    }
}

impl From<i32> for Arg {
    fn from(v: i32) -> Arg {
        Arg::I32(v)
    }
}
impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::I64(v)
    }
}
impl From<f32> for Arg {
    fn from(v: f32) -> Arg {
        Arg::F32(v)
    }
}
impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::F64(v)
    }
}

/// A numeric array element type that Rust slices can be copied from and to.
pub trait Element: Copy + Send + Sync + 'static {
    /// The bytecode element type.
    const ELEM: Elem;
    /// Raw bits as stored.
    fn to_bits(self) -> u64;
    /// From raw bits.
    fn from_bits(b: u64) -> Self;
}

impl Element for i32 {
    const ELEM: Elem = Elem::I32;
    fn to_bits(self) -> u64 {
        u64::from(self as u32)
    }
    fn from_bits(b: u64) -> Self {
        b as u32 as i32
    }
}
impl Element for i64 {
    const ELEM: Elem = Elem::I64;
    fn to_bits(self) -> u64 {
        self as u64
    }
    fn from_bits(b: u64) -> Self {
        b as i64
    }
}
impl Element for f32 {
    const ELEM: Elem = Elem::F32;
    fn to_bits(self) -> u64 {
        u64::from(f32::to_bits(self))
    }
    fn from_bits(b: u64) -> Self {
        f32::from_bits(b as u32)
    }
}
impl Element for f64 {
    const ELEM: Elem = Elem::F64;
    fn to_bits(self) -> u64 {
        f64::to_bits(self)
    }
    fn from_bits(b: u64) -> Self {
        f64::from_bits(b)
    }
}

/// A handle to an array of `T` in a runtime's heap. It keeps the array
/// alive, and stays valid when a collection moves it; clones share it.
/// `T` is `i32`, `i64`, `f32` or `f64` ([`Element`]).
///
/// ```
/// use offload::Runtime;
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let a = rt.array(&[1.5f64, 2.5])?;       // from a slice
/// let z = rt.new_array::<i64>(3)?;          // zeroed
/// assert_eq!((a.len(), z.len()), (2, 3));
/// rt.collect()?;                            // may move it; the handle follows
/// assert_eq!(rt.read(&a)?, [1.5, 2.5]);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Debug)]
pub struct Array<T: Element> {
    r: Root,
    len: u32,
    rt: u64,
    _t: PhantomData<T>,
}

impl<T: Element> Clone for Array<T> {
    fn clone(&self) -> Self {
        Array {
            r: self.r.clone(),
            len: self.len,
            rt: self.rt,
            _t: PhantomData,
        }
    }
}

impl<T: Element> Array<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The heap reference now (valid until the next collection).
    pub fn as_ref(&self) -> Ref {
        self.r.get()
    }
}

impl<T: Element> From<&Array<T>> for Arg {
    fn from(a: &Array<T>) -> Arg {
        Arg::Ref(HeapRef {
            r: a.r.clone(),
            rt: a.rt,
        })
    }
}
impl<T: Element> From<Array<T>> for Arg {
    fn from(a: Array<T>) -> Arg {
        Arg::Ref(HeapRef { r: a.r, rt: a.rt })
    }
}

/// A handle to an object of one of a module's classes. It keeps the
/// object alive, and stays valid when a collection moves it.
///
/// ```
/// use offload::Runtime;
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = rt.load_source("p.ofk", "struct Point { x: f64, y: f64 }")?;
/// let p = m.new_object("Point")?;
/// m.set_field(&p, "x", 1.5f64)?;
/// assert_eq!(m.get_field::<f64>(&p, "x")?, 1.5);
/// assert_eq!(p.class_name(), "Point");
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Object {
    pub(crate) r: Root,
    pub(crate) class: ClassId,
    pub(crate) module: Module,
}

impl Object {
    /// The heap reference now (valid until the next collection).
    pub fn as_ref(&self) -> Ref {
        self.r.get()
    }
    /// The class name.
    pub fn class_name(&self) -> &str {
        &self.module.prog.verified().class(self.class).name
    }
    /// The module whose class it is an instance of.
    pub fn module(&self) -> &Module {
        &self.module
    }
}

impl From<&Object> for Arg {
    fn from(o: &Object) -> Arg {
        Arg::Ref(HeapRef {
            r: o.r.clone(),
            rt: o.module.rt.inner.id,
        })
    }
}

/// A handle to a one-dimensional array of references to one of a module's
/// classes (`Shape[]`): its elements are null or instances of the class or
/// its subclasses. It keeps the array alive, and stays valid when a
/// collection moves it. A kernel takes it as `&[Option<Shape>]`.
///
/// ```
/// use offload::Runtime;
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let m = rt.load_source("p.ofk", "struct Point { x: f64 }")?;
/// let ps = m.new_ref_array("Point", 3)?;   // three nulls
/// let p = m.new_object("Point")?;
/// m.set_element(&ps, 1, &p)?;
/// assert!(m.element(&ps, 0)?.is_none());
/// assert_eq!(m.element(&ps, 1)?.map(|(_, class)| class), Some("Point".to_string()));
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Debug)]
pub struct RefArray {
    pub(crate) r: Root,
    pub(crate) len: u32,
    pub(crate) elem: ClassId,
    pub(crate) module: Module,
}

impl RefArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether it has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The heap reference now (valid until the next collection).
    pub fn as_ref(&self) -> Ref {
        self.r.get()
    }
    /// The element class.
    pub fn elem_class(&self) -> &str {
        &self.module.prog.verified().class(self.elem).name
    }
    /// The module of the element class.
    pub fn module(&self) -> &Module {
        &self.module
    }
}

impl From<&RefArray> for Arg {
    fn from(a: &RefArray) -> Arg {
        Arg::Ref(HeapRef {
            r: a.r.clone(),
            rt: a.module.rt.inner.id,
        })
    }
}

impl Runtime {
    /// A new array holding a copy of `data`.
    pub fn array<T: Element>(&self, data: &[T]) -> Result<Array<T>, OffloadError> {
        let a = self.new_array::<T>(data.len())?;
        self.write(&a, 0, data)?;
        Ok(a)
    }

    /// A new zeroed array of `len` elements.
    pub fn new_array<T: Element>(&self, len: usize) -> Result<Array<T>, OffloadError> {
        let len = u32::try_from(len)
            .ok()
            .filter(|&l| l <= i32::MAX as u32)
            .ok_or_else(|| {
                OffloadError::Handle(format!("array length {len} exceeds {}", i32::MAX))
            })?;
        let r = self.alloc_rooted(Header::Array {
            elem: T::ELEM,
            dims: 1,
            len,
        })?;
        Ok(Array {
            r,
            len,
            rt: self.inner.id,
            _t: PhantomData,
        })
    }

    fn check<T: Element>(&self, a: &Array<T>) -> Result<(), OffloadError> {
        if a.rt != self.inner.id {
            return Err(OffloadError::Handle(
                "the array belongs to another runtime".into(),
            ));
        }
        Ok(())
    }

    /// Check that `a` is ours and `[at, at + n)` lies inside it; return the
    /// byte offset of element `at` and the element size (valid until the
    /// next collection: call it under [`Runtime::hold`]).
    fn span<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        n: usize,
        what: &str,
    ) -> Result<(usize, usize), OffloadError> {
        self.check(a)?;
        if at.checked_add(n).is_none_or(|e| e > a.len()) {
            return Err(OffloadError::Handle(format!(
                "{what} {n} elements at {at} overflows an array of {}",
                a.len()
            )));
        }
        let size = kind_size(array_elem_kind(T::ELEM, 1)) as usize;
        Ok((a.r.byte_offset() + 8 + at * size, size))
    }

    /// Copy `data` into `a` starting at element `at` (after the launches
    /// in flight that may touch `a` have ended: [`Runtime::launch`]).
    pub fn write<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        data: &[T],
    ) -> Result<(), OffloadError> {
        self.settle(Some(a.r.identity()));
        self.hold(|heap| {
            let (base, size) = self.span(a, at, data.len(), "writing")?;
            // What a GPU wrote there comes back in one copy per run of
            // chunks, not one per chunk as the stores below would.
            heap.fetch(base, data.len() * size)?;
            for (i, &x) in data.iter().enumerate() {
                if size == 8 {
                    heap.store64(base + i * 8, x.to_bits())?;
                } else {
                    heap.store32(base + i * 4, x.to_bits() as u32)?;
                }
            }
            Ok(())
        })
    }

    /// Copy the whole array out.
    pub fn read<T: Element>(&self, a: &Array<T>) -> Result<Vec<T>, OffloadError> {
        let mut out = vec![T::from_bits(0); a.len()];
        self.read_into(a, 0, &mut out)?;
        Ok(out)
    }

    /// Copy `out.len()` elements starting at `at` into `out` (after the
    /// launches in flight that may touch `a` have ended:
    /// [`Runtime::launch`]).
    pub fn read_into<T: Element>(
        &self,
        a: &Array<T>,
        at: usize,
        out: &mut [T],
    ) -> Result<(), OffloadError> {
        self.settle(Some(a.r.identity()));
        self.hold(|heap| {
            let (base, size) = self.span(a, at, out.len(), "reading")?;
            heap.fetch(base, out.len() * size)?;
            for (i, slot) in out.iter_mut().enumerate() {
                *slot = T::from_bits(if size == 8 {
                    heap.load64(base + i * 8)?
                } else {
                    u64::from(heap.load32(base + i * 4)?)
                });
            }
            Ok(())
        })
    }
}
