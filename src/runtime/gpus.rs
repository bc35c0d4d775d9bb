//! The runtime's GPUs as its API shows them: which it uses, a handle whose
//! launches run on one of them, their descriptions and handles, and the
//! load time of a kernel on the first.

use super::Runtime;
use crate::cuda::Gpu;
use crate::error::OffloadError;
use crate::runtime::Closure;

impl Runtime {
    /// Compile the closure's kernel to PTX and load it on the GPU (cached
    /// by kernel version); returns how long the driver's `load_module`
    /// took. An error when the device is not CUDA or the kernel cannot run
    /// on it.
    pub fn gpu_load_time(&self, closure: &Closure) -> Result<std::time::Duration, OffloadError> {
        let gpu = self.inner.gpus.first().ok_or_else(|| OffloadError::NoGpu)?;
        let plan = self
            .kernel_state(closure)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .plan(&self.inner.env.settings);
        let captures = self.hold(|_| closure.capture_cells());
        crate::cuda::load_time(
            &self.inner.env,
            gpu,
            closure.call(&captures, None, None),
            &plan.version,
        )
        .map_err(OffloadError::Setup)
    }

    /// The CUDA context and stream of the runtime's first GPU (`None`
    /// unless the device is CUDA), for tools that run kernels of their own
    /// beside offload's.
    pub fn gpu_handles(&self) -> Option<crate::GpuHandles> {
        self.inner.gpus.first().map(Gpu::handles)
    }

    /// The GPU, described (`None` unless the device is CUDA); several,
    /// each with its number (`GPU 0: …; GPU 1: …`).
    pub fn gpu(&self) -> Option<String> {
        (!self.inner.gpus.is_empty()).then(|| crate::cuda::describe_all(&self.inner.gpus))
    }

    /// The driver's numbers of the GPUs the runtime uses (empty unless the
    /// device is CUDA).
    pub fn gpu_ordinals(&self) -> Vec<usize> {
        self.inner.gpus.iter().map(|g| g.ordinal).collect()
    }

    /// This runtime, with its launches on GPU `ordinal` (the driver's
    /// number, one of [`Runtime::gpu_ordinals`]) instead of the GPU with
    /// the fewest launches running: everything else — heap, modules,
    /// arrays, closures, launches in flight — is shared with `self`.
    /// Launches made through other handles are placed as before.
    ///
    /// ```
    /// use offload::{Device, Runtime, kernel};
    ///
    /// let rt = Runtime::builder().build()?;
    /// if rt.device() == Device::Cuda {
    ///     let first = rt.on_gpu(rt.gpu_ordinals()[0])?;
    ///     let v = rt.new_array::<f32>(4)?;
    ///     first.par_offload(0..4, &kernel!(move |i| v[i] = 1.0)?)?;
    ///     assert_eq!(rt.read(&v)?, [1.0; 4]);
    /// } else {
    ///     assert!(rt.on_gpu(0).is_err());
    /// }
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    pub fn on_gpu(&self, ordinal: usize) -> Result<Runtime, OffloadError> {
        match self.inner.gpus.iter().position(|g| g.ordinal == ordinal) {
            Some(k) => Ok(Runtime {
                inner: self.inner.clone(),
                pinned: Some(k),
            }),
            None => Err(OffloadError::Config {
                setting: "gpu",
                problem: if self.inner.gpus.is_empty() {
                    format!("GPU {ordinal} asked for; the runtime has no GPU")
                } else {
                    format!(
                        "GPU {ordinal} is not one of the runtime's (it uses {})",
                        self.gpu_ordinals()
                            .iter()
                            .map(|k| k.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                },
            }),
        }
    }

    /// Whether the runtime's GPU is offload's virtual GPU (the PTX
    /// simulator's driver shim, `vgpu/driver`), not hardware.
    pub fn gpu_is_virtual(&self) -> bool {
        self.inner.gpus.iter().any(crate::cuda::Gpu::is_virtual)
    }
}
