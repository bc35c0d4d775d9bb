//! The errors of the public API.

use crate::report::LaunchReport;
use offload_host_interp::Exception;
use offload_ir::ExceptionKind;
use std::collections::BTreeMap;
use std::fmt;

/// Workitems threw exceptions. Every other workitem completed.
///
/// ```
/// use offload::{OffloadError, Runtime, ir::ExceptionKind, kernel, par_offload};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let v = rt.new_array::<i32>(8)?;
/// // Workitems 5, 6 and 7 index past the end.
/// match par_offload(0..8, kernel!(move |i| v[i + 3] = 1)) {
///     Err(OffloadError::Exceptions(e)) => {
///         assert_eq!(e.count, 3);
///         assert_eq!(e.workitems, [5, 6, 7]);
///         assert_eq!(e.first.kind, ExceptionKind::IndexOutOfBounds);
///         assert_eq!(e.report.completed, 5); // every other workitem ran
///         println!("{e}"); // the first in full, with its trace
///     }
///     other => panic!("expected exceptions, got {other:?}"),
/// }
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Debug, Clone)]
pub struct KernelExceptions {
    /// The exception of the lowest-numbered workitem that threw, in full.
    pub first: Exception,
    /// How many workitems threw.
    pub count: u64,
    /// How many threw each kind.
    pub by_kind: BTreeMap<ExceptionKind, u64>,
    /// The lowest-numbered workitems that threw, in order (at most
    /// [`KernelExceptions::LISTED`]).
    pub workitems: Vec<i64>,
    /// What ran.
    pub report: LaunchReport,
}

fn interrupted_text(r: &LaunchReport) -> String {
    format!(
        "launch of `{}` over {}..{} {}: {} completed, {} threw, {} stopped part-way, {} not started",
        r.kernel,
        r.range.start,
        r.range.end,
        match r.deadline {
            Some(d) => format!(
                "stopped at its deadline ({})",
                crate::diagnostics::duration_text(d)
            ),
            None => "interrupted".to_string(),
        },
        r.completed,
        r.threw,
        r.abandoned,
        r.not_started()
    )
}

impl KernelExceptions {
    /// How many workitem numbers are listed.
    pub const LISTED: usize = 16;
}

impl fmt::Display for KernelExceptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A 2-D or 3-D launch's workitems by their indices.
        let mut first = self.first.to_string();
        if let Some(w) = self.first.workitem
            && self.report.shape.is_some()
        {
            first = first.replacen(
                &format!(" in workitem {w}"),
                &format!(" in workitem {}", self.report.workitem_name(w)),
                1,
            );
        }
        write!(
            f,
            "{} workitem(s) of `{}` threw; the first: {first}",
            self.count, self.report.kernel
        )?;
        if self.count > 1 {
            let kinds: Vec<String> = self
                .by_kind
                .iter()
                .map(|(k, n)| format!("{} {}", n, k.name()))
                .collect();
            let shown: Vec<String> = self
                .workitems
                .iter()
                .map(|&w| self.report.workitem_name(w))
                .collect();
            write!(
                f,
                "\n  and {} more ({}); workitems {}{}",
                self.count - 1,
                kinds.join(", "),
                shown.join(", "),
                if self.count as usize > self.workitems.len() {
                    ", …"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

/// An error of the offload API. Its `Display` is the whole message a user
/// should see (a source error with its lines, exceptions with the first
/// one's trace).
///
/// ```
/// use offload::{OffloadError, Runtime};
///
/// let rt = Runtime::builder().workers(2).build()?;
/// let e = rt.load_source("bad.ofk", "#[kernel] fn k(i: i32, x: &mut [f32]) { x[i] = y; }");
/// let Err(OffloadError::Load { name, diagnostics, .. }) = e else { panic!() };
/// assert_eq!(name, "bad.ofk");
/// assert_eq!(diagnostics.0[0].span.line, 1);
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The module did not parse or verify; the text shows each problem with
    /// its source line and a caret.
    #[error("{name} does not load:\n{rendered}")]
    Load {
        /// The module's name.
        name: String,
        /// The problems.
        diagnostics: offload_ir::Diagnostics,
        /// The problems rendered against the source.
        rendered: String,
    },
    /// No such kernel in the module.
    #[error(
        "module `{module}` has no kernel `{kernel}` (kernels: {available}){}",
        nearest.as_ref().map_or(String::new(), |n| format!("; did you mean `{n}`?"))
    )]
    NoSuchKernel {
        /// Module name.
        module: String,
        /// Requested kernel.
        kernel: String,
        /// The kernel whose name is nearest to the one requested, if one
        /// is near.
        nearest: Option<String>,
        /// The kernels there are.
        available: String,
    },
    /// A capture does not fit the kernel's signature.
    #[error("kernel `{kernel}`: {problem}")]
    Capture {
        /// Kernel name.
        kernel: String,
        /// What is wrong, naming the parameter.
        problem: String,
    },
    /// A class or field was not found, or a field has another type.
    #[error("{0}")]
    Lookup(String),
    /// A handle from another runtime, or out of its object's bounds.
    #[error("{0}")]
    Handle(String),
    /// The range is empty in the wrong direction.
    #[error("bad range {start}..{end}: the start is after the end")]
    Range {
        /// Start.
        start: i64,
        /// End.
        end: i64,
    },
    /// The kernel narrows its workitem index to `i32` (a source kernel
    /// with `i: i32`, or bytecode that converts it with `i64.to_i32`), and
    /// the range does not fit: its workitems would wrap and alias.
    #[error(
        "kernel `{kernel}` takes its workitem index as an i32, and the range {start}..{end} does not fit in i32 (declare the index `i: i64` to launch over it)"
    )]
    IndexRange {
        /// The kernel.
        kernel: String,
        /// Start.
        start: i64,
        /// End.
        end: i64,
    },
    /// Workitems threw.
    #[error("{0}")]
    Exceptions(Box<KernelExceptions>),
    /// The launch was interrupted ([`crate::Runtime::interrupt`]): the report
    /// says how many workitems completed, how many were stopped part-way
    /// ([`LaunchReport::abandoned`]) and how many never started.
    #[error("{}", interrupted_text(.0))]
    Interrupted(Box<LaunchReport>),
    /// The heap could not be created or an allocation failed.
    #[error("heap: {0}")]
    Heap(#[from] offload_heap::HeapError),
    /// A setting of the [`crate::RuntimeBuilder`] is out of range or
    /// unknown.
    #[error("runtime setup: {problem}")]
    Config {
        /// The builder's method.
        setting: &'static str,
        /// What is wrong with the value.
        problem: String,
    },
    /// Strict mode refused a fallback ([`crate::RuntimeBuilder::strict`]).
    #[error("strict mode: {what}: {why}")]
    Strict {
        /// What would have fallen back: the CUDA device, or a kernel on it.
        what: String,
        /// Why it could not run as asked.
        why: String,
    },
    /// The runtime is not on the CUDA device (a GPU-only operation).
    #[error("the runtime is not on the CUDA device")]
    NoGpu,
    /// A CUDA driver call failed.
    #[error("CUDA {operation}: {message}")]
    Cuda {
        /// What was being done: `launch`, `heap image`, `save area`…
        operation: &'static str,
        /// The driver's error, by name and description.
        message: String,
    },
    /// A kernel cannot be compiled for a device (asked of the code views:
    /// a launch falls back instead).
    #[error("kernel `{kernel}` cannot be compiled for the {} device: {source}", device.name())]
    NotCompiled {
        /// The kernel.
        kernel: String,
        /// The device.
        device: crate::device::Device,
        /// Why.
        source: offload_jit::JitError,
    },
    /// A save record could not be read back (its site or values do not
    /// match the kernel version's metadata).
    #[error("corrupt save area: {0}")]
    CorruptSaveArea(#[from] offload_deopt::DeoptError),
    /// A deoptimized workitem could not be resumed from its record.
    #[error("cannot resume workitem {workitem}: {source}")]
    Resume {
        /// The workitem.
        workitem: i64,
        /// Why.
        source: Box<offload_host_interp::ResumeError>,
    },
    /// A safepoint's operation ([`crate::Runtime::safepoint`]) asked its
    /// own runtime for something that needs the workers the safepoint
    /// stopped (a launch, a collection): refused, where it would wait
    /// forever. Do it after the safepoint returns.
    #[error(
        "{what} cannot run inside a safepoint operation of the same runtime: the workers it needs are stopped until the operation returns (do it after `Runtime::safepoint` returns)"
    )]
    InSafepoint {
        /// What was asked.
        what: &'static str,
    },
    /// The runtime could not be set up, or a resource (threads, a device
    /// eden, class ids) ran out; the text says which.
    #[error("runtime setup: {0}")]
    Setup(String),
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}
