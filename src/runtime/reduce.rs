//! Reductions: a kernel that returns a number per workitem, and launches
//! that combine those numbers into one ([`Runtime::par_reduce`]).
//!
//! The combine order is one fixed binary tree over the range's positions
//! ([`offload_abi::reduce`]), so a float result is bit for bit the same on
//! every run, every device, every worker count and every pattern of deopts;
//! what changes it is the values and the range's length (the same values
//! over `0..n` and `1..n + 1` give the same result; another `n`, another
//! tree).

use super::*;
use crate::reduction::scalar_of;
pub use offload_abi::reduce::{Combine, Scalar};

/// A type a reduction yields: a kernel's numeric return type.
pub trait Reducible: Copy + Send + Sync + 'static {
    /// Its [`Scalar`] type.
    const SCALAR: Scalar;
    /// The value of raw bits (an `i32` or `f32` in the low 32 bits).
    fn from_bits(bits: u64) -> Self;
}

impl Reducible for i32 {
    const SCALAR: Scalar = Scalar::I32;
    fn from_bits(bits: u64) -> Self {
        bits as u32 as i32
    }
}

impl Reducible for i64 {
    const SCALAR: Scalar = Scalar::I64;
    fn from_bits(bits: u64) -> Self {
        bits as i64
    }
}

impl Reducible for f32 {
    const SCALAR: Scalar = Scalar::F32;
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
}

impl Reducible for f64 {
    const SCALAR: Scalar = Scalar::F64;
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
}

/// The result of a reducing launch: the combined value and the launch's
/// report (whose [`LaunchReport::reduction`] says how it was combined).
#[derive(Clone, Debug)]
pub struct Reduced<T> {
    /// The workitems' values, combined.
    pub value: T,
    /// The launch.
    pub report: LaunchReport,
}

/// An error unless `reduce` is given exactly when `closure`'s kernel
/// returns a value.
pub(super) fn check(closure: &Closure, reduce: Option<Combine>) -> Result<(), OffloadError> {
    let problem = match (closure.returns(), reduce) {
        (Some(ty), None) => format!(
            "it returns `{}` for a reduction: launch it with `par_reduce` (the REPL's `reduce`) to combine the values",
            ty.name()
        ),
        (None, Some(c)) => format!(
            "it returns nothing, so there is nothing to combine with `{}`: a reducing kernel returns a number",
            c.name()
        ),
        _ => return Ok(()),
    };
    Err(OffloadError::Capture {
        kernel: closure.kernel_name().to_string(),
        problem,
    })
}

impl Closure {
    /// What the kernel returns for a reduction, if it is a reducing kernel.
    pub fn returns(&self) -> Option<Scalar> {
        scalar_of(self.module.prog.verified().func(self.kernel).ret?)
    }
}

impl Runtime {
    /// Run `closure` for every workitem in `range` and combine the values
    /// its kernel returns with `combine`: the sum, the minimum or the
    /// maximum, in one fixed tree over the range (the result is bit for bit
    /// the same on every run and every device; see the module docs of
    /// [`offload_abi::reduce`]). An empty range gives the combine's
    /// identity ([`Combine::Sum`]: 0; [`Combine::Min`]: the largest
    /// value; [`Combine::Max`]: the smallest).
    ///
    /// ```
    /// use offload::{Combine, Runtime};
    ///
    /// let rt = Runtime::builder().workers(2).build()?;
    /// let m = rt.load_source("dot.ofk", "
    ///     #[kernel]
    ///     fn dot(i: i64, x: &[f32], y: &[f32]) -> f32 { x[i] * y[i] }
    /// ")?;
    /// let x = rt.array(&[1.0f32, 2.0, 3.0])?;
    /// let y = rt.array(&[4.0f32, 5.0, 6.0])?;
    /// let dot = m.closure("dot", [(&x).into(), (&y).into()])?;
    /// assert_eq!(rt.par_reduce::<f32>(0..3, &dot, Combine::Sum)?.value, 32.0);
    /// assert_eq!(rt.par_reduce::<f32>(0..3, &dot, Combine::Max)?.value, 18.0);
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    ///
    /// The kernel must return a number of type `T`; a kernel that returns
    /// nothing, or another type, is an error naming it.
    pub fn par_reduce<T: Reducible>(
        &self,
        range: impl Into<LaunchRange>,
        closure: &Closure,
        combine: Combine,
    ) -> Result<Reduced<T>, OffloadError> {
        self.owns(closure)?;
        check_type::<T>(closure)?;
        reduced(self.launch_in_order(
            range.into(),
            closure,
            Some(combine),
            self.inner.env.settings.deadline,
        )?)
    }
}

/// An error unless `closure`'s kernel returns a `T` (or nothing: the
/// launch says so then).
pub(super) fn check_type<T: Reducible>(closure: &Closure) -> Result<(), OffloadError> {
    match closure.returns().filter(|&ty| ty != T::SCALAR) {
        Some(ty) => Err(OffloadError::Capture {
            kernel: closure.kernel_name().to_string(),
            problem: format!(
                "it returns `{}`, not the `{}` the reduction asks for",
                ty.name(),
                T::SCALAR.name()
            ),
        }),
        None => Ok(()),
    }
}

/// The value a reducing launch's report holds, typed.
pub(super) fn reduced<T: Reducible>(report: LaunchReport) -> Result<Reduced<T>, OffloadError> {
    let bits = report
        .reduction
        .map(|r| r.bits)
        .ok_or_else(|| OffloadError::Setup("the reducing launch combined no value".into()))?;
    Ok(Reduced {
        value: T::from_bits(bits),
        report,
    })
}
