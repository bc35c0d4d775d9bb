//! Where kernels run: the [`Device`] a runtime or a launch names (the
//! devices themselves sit behind `executor.rs`).

/// Where kernels run.
///
/// ```
/// use offload::{Device, Runtime};
///
/// // The interpreter runs every kernel: the reference the others match.
/// let rt = Runtime::builder().device(Device::Interpreter).workers(2).build()?;
/// assert_eq!(rt.device().name(), "interp");
/// // `Runtime::new` picks CUDA when a GPU is usable, else the CPU device,
/// // and says why it fell back.
/// let rt = Runtime::new()?;
/// if rt.device() != Device::Cuda {
///     println!("{}", rt.fallback().unwrap_or("no GPU asked for"));
/// }
/// # Ok::<(), offload::OffloadError>(())
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host interpreter on every core (the reference semantics).
    Interpreter,
    /// Native code from the Cranelift JIT on every core, with deopt into the
    /// interpreter. Kernels the JIT does not compile yet run on the
    /// interpreter, and the launch report says why.
    Cpu,
    /// An NVIDIA GPU (sm_70 or newer) through the CUDA driver, with deopt
    /// into the interpreter. Kernels the PTX backend does not compile run
    /// on the CPU device, and the launch report says why (an error in
    /// strict mode).
    Cuda,
}

impl Device {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Device::Interpreter => "interp",
            Device::Cpu => "cpu",
            Device::Cuda => "cuda",
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "interp" | "interpreter" => Ok(Device::Interpreter),
            "cpu" => Ok(Device::Cpu),
            "cuda" | "gpu" => Ok(Device::Cuda),
            other => Err(format!(
                "unknown device `{other}` (available: cuda, cpu, interp)"
            )),
        }
    }
}
