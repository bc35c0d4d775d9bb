//! Kernels written in Rust code: what `kernel!` and `kernels!` expand to.
//!
//! ```
//! use offload::{Device, Runtime, kernel, par_offload};
//!
//! let rt = Runtime::builder().device(Device::Cpu).build()?;
//! let n = 1000;
//! let x = rt.array(&vec![1.0f32; n])?;
//! let y = rt.array(&(0..n).map(|i| i as f32).collect::<Vec<_>>())?;
//! let a = 2.0f32;
//! // The captures are the closure's free variables: `y`, `a` and `x`.
//! par_offload(0..n as i64, kernel!(move |i| y[i] = a * x[i] + y[i]))?;
//! assert_eq!(rt.read(&y)?[10], 12.0);
//! # Ok::<(), offload::OffloadError>(())
//! ```
//!
//! A whole module — functions and classes with the kernels — is
//! `kernels! { ... }`, compiled with the Rust program (an error in it is
//! a compile error):
//!
//! ```
//! use offload::{Device, Runtime, kernels, par_offload};
//!
//! let rt = Runtime::builder().device(Device::Cpu).build()?;
//! let m = kernels! {
//!     fn square(x: f64) -> f64 { x * x }
//!
//!     #[kernel]
//!     fn squares(i: i32, out: &mut [f64]) {
//!         out[i] = square(i as f64);
//!     }
//! }
//! .load(&rt)?;
//! let out = rt.new_array::<f64>(8)?;
//! par_offload(0..8, &m.closure("squares", [(&out).into()])?)?;
//! assert_eq!(rt.read(&out)?[3], 9.0);
//! # Ok::<(), offload::OffloadError>(())
//! ```
//!
//! A capture of a type no kernel takes does not compile:
//!
//! ```compile_fail,E0277
//! use offload::{Device, Runtime, kernel, par_offload};
//!
//! let rt = Runtime::builder().device(Device::Cpu).build()?;
//! let out = rt.new_array::<f32>(4)?;
//! let name = String::from("four");
//! par_offload(0..4, kernel!(move |i| out[i] = name))?;
//! # Ok::<(), offload::OffloadError>(())
//! ```
//!
//! A `kernel!` closure is a [`ClosureSite`] (its body's text, where it is,
//! the names it captures) and the captured values, each a [`Capture`]: a
//! number or a heap array. Its first launch on a runtime compiles the
//! body with the captures' types into a one-kernel module; later launches
//! with the same types reuse it. A `kernels!` block is a [`SourceModule`],
//! compiled when the Rust program is, and loaded once per runtime.

use crate::runtime::WeakModule;
use crate::{
    Arg, Array, Closure, Element, LaunchRange, LaunchReport, Module, OffloadError, Runtime,
};
use std::sync::Mutex;

/// A value a `kernel!` closure can capture: its type in the source
/// language, the argument it passes, and the runtime it belongs to (for
/// heap values). A capture of any other type is a compile error.
pub trait Capture {
    /// The captured value, ready for [`ClosureSite::bind`].
    fn capture(&self) -> Captured;
}

/// One captured value.
#[derive(Clone, Debug)]
pub struct Captured {
    /// Its type in the source language (`f32`, `&mut [f64]`).
    pub ty: String,
    /// The value passed to the kernel.
    pub arg: Arg,
    /// The runtime a heap value belongs to.
    pub runtime: Option<u64>,
    /// Whether the launch sums into it ([`Summed`]).
    pub summed: bool,
}

macro_rules! scalar_capture {
    ($($t:ty => $name:literal),*) => {$(
        impl Capture for $t {
            fn capture(&self) -> Captured {
                Captured { ty: $name.into(), arg: (*self).into(), runtime: None, summed: false }
            }
        }
    )*};
}
scalar_capture!(i32 => "i32", i64 => "i64", f32 => "f32", f64 => "f64");

impl Capture for bool {
    fn capture(&self) -> Captured {
        Captured {
            ty: "bool".into(),
            arg: Arg::I32(i32::from(*self)),
            runtime: None,
            summed: false,
        }
    }
}

impl<T: Element> Capture for Array<T> {
    fn capture(&self) -> Captured {
        let elem = match T::ELEM {
            offload_ir::Elem::I32 => "i32",
            offload_ir::Elem::I64 => "i64",
            offload_ir::Elem::F32 => "f32",
            _ => "f64",
        };
        let arg: Arg = self.into();
        let runtime = match &arg {
            Arg::Ref(h) => Some(h.runtime_id()),
            _ => None,
        };
        Captured {
            ty: format!("&mut [{elem}]"),
            arg,
            runtime,
            summed: false,
        }
    }
}

/// A `kernel!` capture of an integer array the launch sums into
/// ([`Closure::summed`]): each group of slots adds to a zeroed copy of it
/// with `atomic_add`, and the copies are added into it when the launch
/// ends. Made by [`Array::summed`].
///
/// ```
/// use offload::{Runtime, kernel, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let data = rt.array(&(0..4096).map(|i| i * 7).collect::<Vec<i32>>())?;
/// let counts = rt.new_array::<i32>(16)?;
/// let bins = counts.summed();
/// par_offload(0..4096, kernel!(move |i| {
///     atomic_add(&mut bins[data[i] % bins.len()], 1);
/// }))?;
/// assert_eq!(rt.read(&counts)?, vec![256; 16]);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Summed<'a, T: Element>(&'a Array<T>);

impl<T: Element> Array<T> {
    /// This array as a `kernel!` capture the launch sums into
    /// ([`Summed`]).
    pub fn summed(&self) -> Summed<'_, T> {
        Summed(self)
    }
}

impl<T: Element> Capture for Summed<'_, T> {
    fn capture(&self) -> Captured {
        Captured {
            summed: true,
            ..self.0.capture()
        }
    }
}

impl<C: Capture + ?Sized> Capture for &C {
    fn capture(&self) -> Captured {
        (**self).capture()
    }
}

/// A `kernel!` closure's code: its body's text as written, where it is,
/// its index and the names it captures; and the modules compiled from it,
/// one per runtime and capture types.
pub struct ClosureSite {
    body: &'static str,
    /// The whole invocation as written, `kernel!(...)`: shown in place of
    /// the generated lines when the body does not compile.
    call: &'static str,
    /// Where the invocation starts.
    call_at: (u32, u32),
    file: &'static str,
    line: u32,
    col: u32,
    index: &'static str,
    index_ty: &'static str,
    /// The closure's return type for a reducing kernel (`-> f32`), or
    /// empty.
    returns: &'static str,
    names: &'static [&'static str],
    /// Per runtime and capture types (not keeping the runtime alive).
    compiled: Mutex<Vec<(u64, Vec<String>, WeakModule)>>,
}

impl std::fmt::Debug for ClosureSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernel! at {}:{}:{}", self.file, self.line, self.col)
    }
}

impl ClosureSite {
    /// A site (what `kernel!` expands to): the body's text, file, line and
    /// column, the invocation's text, line and column, the index's name
    /// and type, the return type (empty for none) and the captures'
    /// names.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        body: &'static str,
        call: &'static str,
        call_at: (u32, u32),
        file: &'static str,
        line: u32,
        col: u32,
        index: &'static str,
        index_ty: &'static str,
        returns: &'static str,
        names: &'static [&'static str],
    ) -> Self {
        ClosureSite {
            body,
            call,
            call_at,
            file,
            line,
            col,
            index,
            index_ty,
            returns,
            names,
            compiled: Mutex::new(Vec::new()),
        }
    }

    /// The kernel's source for these capture types: the body stands at
    /// its own line and column, so errors point at the user's lines.
    pub fn source(&self, types: &[String]) -> String {
        let params: Vec<String> = self
            .names
            .iter()
            .zip(types)
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        let head = format!(
            "#[kernel] fn {}({}: {}{}{}){} {{",
            self.kernel_name(),
            self.index,
            self.index_ty,
            if params.is_empty() { "" } else { ", " },
            params.join(", "),
            if self.returns.is_empty() {
                String::new()
            } else {
                format!(" -> {}", self.returns)
            }
        );
        let pad = "\n".repeat(self.line.saturating_sub(2) as usize);
        let indent = " ".repeat(self.col.saturating_sub(1) as usize);
        let sep = if self.line >= 2 { "\n" } else { " " };
        format!("{pad}{head}{sep}{indent}{}\n}}\n", self.body)
    }

    /// The closure over `captures` (in the order of the site's names),
    /// compiling the body on the first launch with these types.
    pub fn bind(&self, captures: Vec<Captured>) -> Result<Closure, OffloadError> {
        let setup =
            |m: String| OffloadError::Setup(format!("kernel! at {}:{}: {m}", self.file, self.line));
        let Some(rt_id) = captures.iter().find_map(|c| c.runtime) else {
            return Err(setup(
                "the closure captures no heap array, so it has nowhere to write its results (and no runtime to run on)".into(),
            ));
        };
        if captures
            .iter()
            .any(|c| c.runtime.is_some_and(|r| r != rt_id))
        {
            return Err(setup(
                "the closure captures arrays of two different runtimes".into(),
            ));
        }
        let rt =
            Runtime::by_id(rt_id).ok_or_else(|| setup("its arrays' runtime is gone".into()))?;
        let types: Vec<String> = captures.iter().map(|c| c.ty.clone()).collect();
        let module = {
            let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
            // Runtimes dropped since take their modules with them.
            compiled.retain(|(_, _, m)| !m.is_dead());
            match compiled
                .iter()
                .find(|(r, t, _)| *r == rt_id && *t == types)
                .and_then(|(_, _, m)| m.upgrade())
            {
                Some(m) => m,
                None => {
                    let src = self.source(&types);
                    let m = rt
                        .load_source(self.file, &src)
                        .map_err(|e| self.not_compiled(e, &src))?;
                    compiled.push((rt_id, types, m.downgrade()));
                    m
                }
            }
        };
        let summed: Vec<&str> = captures
            .iter()
            .zip(self.names)
            .filter(|(c, _)| c.summed)
            .map(|(_, n)| *n)
            .collect();
        let mut closure =
            module.closure(&self.kernel_name(), captures.into_iter().map(|c| c.arg))?;
        for name in summed {
            closure = closure.summed(name)?;
        }
        Ok(closure)
    }

    /// A body that did not compile, as the user wrote it: the error names
    /// the invocation, and its lines are shown from `kernel!` on (the
    /// generated source has spaces where the invocation's head is, and a
    /// generated signature on the line before).
    fn not_compiled(&self, e: OffloadError, generated: &str) -> OffloadError {
        let OffloadError::Load {
            mut diagnostics, ..
        } = e
        else {
            return e;
        };
        let (line, col) = self.call_at;
        let mut shown: Vec<String> = generated.lines().map(str::to_string).collect();
        for (k, text) in self.call.lines().enumerate() {
            let at = line as usize - 1 + k;
            if at >= shown.len() {
                break;
            }
            shown[at] = if k == 0 {
                format!("{}{text}", " ".repeat(col.saturating_sub(1) as usize))
            } else {
                text.to_string()
            };
        }
        let shown = shown.join("\n") + "\n";
        for d in &mut diagnostics.0 {
            d.span.start = same_place(d.span.start, generated, &shown);
            d.span.end = same_place(d.span.end, generated, &shown);
        }
        OffloadError::Load {
            name: format!("kernel! at {}:{line}:{col}", self.file),
            rendered: crate::diagnostics::render_all(&diagnostics.0, &shown),
            diagnostics,
        }
    }

    /// The kernel's name in reports and traces: `closure_at_LINE` (its
    /// line in the Rust file).
    pub fn kernel_name(&self) -> String {
        format!("closure_at_{}", self.line)
    }
}

/// Byte offset `at` of `from` as the same line and byte of the line in
/// `to` (the end of that line when it is shorter).
fn same_place(at: u32, from: &str, to: &str) -> u32 {
    let at = (at as usize).min(from.len());
    let line = from[..at].matches('\n').count();
    let in_line = at - from[..at].rfind('\n').map_or(0, |n| n + 1);
    let start: usize = to.split_inclusive('\n').take(line).map(str::len).sum();
    let len = to[start..].find('\n').unwrap_or(to.len() - start);
    let mut x = start + in_line.min(len);
    while !to.is_char_boundary(x) {
        x -= 1;
    }
    x as u32
}

/// A `kernels! { ... }` block: a whole source module, compiled when the
/// Rust program is, loaded once per runtime by [`SourceModule::load`].
pub struct SourceModule {
    text: &'static str,
    file: &'static str,
    line: u32,
    /// Per runtime (not keeping it alive).
    loaded: Mutex<Vec<(u64, WeakModule)>>,
}

impl std::fmt::Debug for SourceModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernels! at {}:{}", self.file, self.line)
    }
}

impl SourceModule {
    /// A module (what `kernels!` expands to).
    pub const fn new(text: &'static str, file: &'static str, line: u32) -> Self {
        SourceModule {
            text,
            file,
            line,
            loaded: Mutex::new(Vec::new()),
        }
    }

    /// The module's source text.
    pub fn text(&self) -> &'static str {
        self.text
    }

    /// The module on `rt` (loaded on the first call for each runtime).
    pub fn load(&self, rt: &Runtime) -> Result<Module, OffloadError> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|(_, m)| !m.is_dead());
        if let Some(m) = loaded
            .iter()
            .find(|(id, _)| *id == rt.id())
            .and_then(|(_, m)| m.upgrade())
        {
            return Ok(m);
        }
        // The text starts on the invocation's line: pad so that lines
        // match the Rust file's.
        let pad = "\n".repeat(self.line.saturating_sub(1) as usize);
        let m = rt.load_source(self.file, &format!("{pad}{}", self.text))?;
        loaded.push((rt.id(), m.downgrade()));
        Ok(m)
    }
}

/// What [`crate::par_offload`] launches: a [`Closure`], or what
/// `kernel!` gives (the closure, or why it could not be made).
pub trait Launchable {
    /// Run over `range` on the closure's runtime.
    fn launch(self, range: LaunchRange) -> Result<LaunchReport, OffloadError>;
}

/// Run `closure` for every workitem of `range` on its runtime's device:
/// a [`Closure`] (`&saxpy`), or a `kernel!` closure.
pub fn par_offload(
    range: impl Into<LaunchRange>,
    closure: impl Launchable,
) -> Result<LaunchReport, OffloadError> {
    closure.launch(range.into())
}

impl Launchable for &Closure {
    fn launch(self, range: LaunchRange) -> Result<LaunchReport, OffloadError> {
        self.module.rt.par_offload(range, self)
    }
}

impl Launchable for Closure {
    fn launch(self, range: LaunchRange) -> Result<LaunchReport, OffloadError> {
        (&self).launch(range)
    }
}

impl<L: Launchable> Launchable for Result<L, OffloadError> {
    fn launch(self, range: LaunchRange) -> Result<LaunchReport, OffloadError> {
        self?.launch(range)
    }
}
