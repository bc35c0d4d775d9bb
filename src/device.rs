//! Where kernels run: the [`Device`] a runtime or a launch names (the
//! devices themselves sit behind `executor.rs`).

/// Where kernels run.
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
