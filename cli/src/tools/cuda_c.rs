//! The CUDA C baselines of the GPU benchmarks: `benches/cuda/baselines.cu`,
//! compiled by NVRTC (`scripts/cuda-baselines`) into the checked-in
//! `baselines.ptx`, loaded through the same driver and timed the same way as
//! offload's launches (upload once, then the median of synchronized kernel
//! runs). Only the benchmarks use it.

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, LaunchConfig, PushKernelArg, sys,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The baselines' PTX (NVRTC output for compute_70, `.version` lowered to 6.3).
pub const PTX: &str = include_str!("../../../benches/cuda/baselines.ptx");
/// Their source, whose hash the PTX header records.
pub const SOURCE: &str = include_str!("../../../benches/cuda/baselines.cu");

/// Device heap for the `malloc` baseline.
const MALLOC_HEAP: usize = 512 << 20;
const BLOCK: u32 = 256;

/// One kernel argument after the leading workitem count.
#[derive(Clone, Debug)]
pub enum Arg {
    /// A 32-bit integer.
    I32(i32),
    /// A float.
    F32(f32),
    /// An array of floats (copied to the device, and back after the run).
    F32s(Vec<f32>),
    /// An array of doubles.
    F64s(Vec<f64>),
    /// An array of 32-bit integers.
    I32s(Vec<i32>),
}

enum Dev {
    Scalar,
    F32(CudaSlice<f32>),
    F64(CudaSlice<f64>),
    I32(CudaSlice<i32>),
}

/// The loaded baselines.
pub struct CudaC {
    stream: Arc<CudaStream>,
    sms: u32,
    module: Arc<CudaModule>,
    /// The PTX the module was loaded from.
    ptx: String,
}

impl std::fmt::Debug for CudaC {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaC")
            .field("sms", &self.sms)
            .finish_non_exhaustive()
    }
}

impl CudaC {
    /// The baselines loaded on `rt`'s GPU (an error unless the runtime's
    /// device is CUDA).
    pub fn for_runtime(rt: &offload::Runtime) -> Result<CudaC, offload::OffloadError> {
        let gpu = rt.gpu_handles().ok_or(offload::OffloadError::NoGpu)?;
        CudaC::load(&gpu, rt.gpu_is_virtual()).map_err(offload::OffloadError::Setup)
    }

    /// Loads the baselines' module (after sizing the device `malloc`
    /// heap); on the virtual GPU, the ones it can run ([`without_malloc`]).
    fn load(gpu: &offload::GpuHandles, virtual_gpu: bool) -> Result<CudaC, String> {
        let ctx: &Arc<CudaContext> = &gpu.context;
        ctx.bind_to_thread()
            .map_err(|e| format!("CUDA: {}", offload::cuda_error_text(&e)))?;
        let ptx = if virtual_gpu {
            without_malloc(PTX)
        } else {
            // SAFETY: sets a context limit of the current context before
            // any kernel that uses `malloc` is loaded; no pointers are
            // involved.
            unsafe { sys::cuCtxSetLimit(sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE, MALLOC_HEAP) }
                .result()
                .map_err(|e| format!("CUDA malloc heap limit: {}", offload::cuda_error_text(&e)))?;
            PTX.to_string()
        };
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_src(ptx.clone()))
            .map_err(|e| {
                format!(
                    "the CUDA driver rejected the CUDA C baselines: {}",
                    offload::cuda_error_text(&e)
                )
            })?;
        Ok(CudaC {
            stream: gpu.stream.clone(),
            sms: gpu.sms,
            module,
            ptx,
        })
    }

    /// The PTX the baselines were loaded from (all of `PTX`, or on the
    /// virtual GPU [`without_malloc`]'s part of it).
    pub fn ptx(&self) -> &str {
        &self.ptx
    }

    fn function(&self, name: &str) -> Result<CudaFunction, String> {
        self.module
            .load_function(name)
            .map_err(|e| format!("CUDA C baseline `{name}`: {}", offload::cuda_error_text(&e)))
    }

    /// Runs `kernel(n, args...)` once on fresh copies of `args` (whose arrays
    /// then hold the results), then `reps` more times for the median time.
    pub fn run(
        &self,
        kernel: &str,
        n: i64,
        args: &mut [Arg],
        reps: usize,
    ) -> Result<Duration, String> {
        let p = self.prepare(kernel, args)?;
        let mut times = Vec::with_capacity(reps + 1);
        for _ in 0..=reps {
            let t = Instant::now();
            p.launch(n, args)?;
            times.push(t.elapsed());
            if times.len() == 1 {
                p.download(args)?;
            }
        }
        let mut timed = times.split_off(1);
        timed.sort();
        Ok(timed.get(timed.len() / 2).copied().unwrap_or(times[0]))
    }

    /// `kernel` with its arrays uploaded from `args`, ready to launch.
    pub fn prepare(&self, kernel: &str, args: &[Arg]) -> Result<Prepared, String> {
        let f = self.function(kernel)?;
        let s = &self.stream;
        let err = |what: &'static str| {
            move |e: cudarc::driver::DriverError| {
                format!("CUDA C {kernel}: {what}: {}", offload::cuda_error_text(&e))
            }
        };
        let mut dev = Vec::with_capacity(args.len());
        for a in args {
            dev.push(match a {
                Arg::I32(_) | Arg::F32(_) => Dev::Scalar,
                Arg::F32s(v) => Dev::F32(s.clone_htod(v).map_err(err("upload"))?),
                Arg::F64s(v) => Dev::F64(s.clone_htod(v).map_err(err("upload"))?),
                Arg::I32s(v) => Dev::I32(s.clone_htod(v).map_err(err("upload"))?),
            });
        }
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
            .map_err(err("occupancy"))?
            .max(1);
        let cfg = LaunchConfig {
            grid_dim: (self.sms * per_sm, 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        Ok(Prepared {
            kernel: kernel.to_string(),
            f,
            stream: s.clone(),
            dev,
            cfg,
        })
    }
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

/// A baseline kernel with its device buffers ([`CudaC::prepare`]).
pub struct Prepared {
    kernel: String,
    f: CudaFunction,
    stream: Arc<CudaStream>,
    dev: Vec<Dev>,
    cfg: LaunchConfig,
}

impl Prepared {
    fn err(&self, what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
        move |e| {
            format!(
                "CUDA C {}: {what}: {}",
                self.kernel,
                offload::cuda_error_text(&e)
            )
        }
    }

    /// One launch over `0..n` and a synchronize (a warm launch: what the
    /// benchmarks time and count). `args` must be the ones prepared.
    pub fn launch(&self, n: i64, args: &[Arg]) -> Result<(), String> {
        let mut b = self.stream.launch_builder(&self.f);
        b.arg(&n);
        for (a, d) in args.iter().zip(&self.dev) {
            match (a, d) {
                (Arg::I32(v), _) => b.arg(v),
                (Arg::F32(v), _) => b.arg(v),
                (_, Dev::F32(d)) => b.arg(d),
                (_, Dev::F64(d)) => b.arg(d),
                (_, Dev::I32(d)) => b.arg(d),
                (_, Dev::Scalar) => unreachable!("arrays have buffers"),
            };
        }
        // SAFETY: the argument list matches the kernel's signature in
        // baselines.cu (checked by the benchmark that names it); the
        // buffers outlive the synchronize below.
        unsafe { b.launch(self.cfg) }.map_err(self.err("launch"))?;
        self.stream.synchronize().map_err(self.err("kernel"))
    }

    /// Copies the arrays back into `args`.
    pub fn download(&self, args: &mut [Arg]) -> Result<(), String> {
        let s = &self.stream;
        for (a, d) in args.iter_mut().zip(&self.dev) {
            match (a, d) {
                (Arg::F32s(v), Dev::F32(d)) => {
                    *v = s.clone_dtoh(d).map_err(self.err("download"))?
                }
                (Arg::F64s(v), Dev::F64(d)) => {
                    *v = s.clone_dtoh(d).map_err(self.err("download"))?
                }
                (Arg::I32s(v), Dev::I32(d)) => {
                    *v = s.clone_dtoh(d).map_err(self.err("download"))?
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The baselines without the kernels that call device `malloc` (and the
/// `malloc`/`free` declarations): what the virtual GPU can load, which has
/// no device `malloc` and no `.param` calls.
pub fn without_malloc(ptx: &str) -> String {
    let mut out = String::new();
    let mut lines = ptx.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with(".extern .func") {
            for l in lines.by_ref() {
                if l.trim() == ";" {
                    break;
                }
            }
            continue;
        }
        if l.starts_with(".visible .entry") {
            let mut body = vec![l];
            for l in lines.by_ref() {
                body.push(l);
                if l == "}" {
                    break;
                }
            }
            if !body.iter().any(|l| l.trim_start().starts_with("call")) {
                for l in body {
                    out.push_str(l);
                    out.push('\n');
                }
            }
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checked_in_ptx_is_generated_from_the_source() {
        use sha2::{Digest, Sha256};
        use std::fmt::Write as _;
        // The PTX header records the source's SHA-256; editing baselines.cu
        // without running scripts/cuda-baselines fails here.
        let want = PTX
            .lines()
            .find_map(|l| l.strip_prefix("// source sha256: "))
            .expect("header");
        let digest = Sha256::digest(SOURCE.as_bytes());
        let mut hex = String::new();
        for b in digest {
            let _ = write!(hex, "{b:02x}");
        }
        assert_eq!(
            hex, want,
            "benches/cuda/baselines.ptx is stale: run scripts/cuda-baselines"
        );
        for k in [
            "saxpy",
            "mandelbrot",
            "nbody",
            "matmul",
            "histogram",
            "blackscholes",
            "alloc_vectors",
        ] {
            assert!(PTX.contains(&format!(".entry {k}(")), "{k}");
        }
    }

    #[test]
    fn the_virtual_gpu_runs_every_baseline_but_the_malloc_one() {
        let v = without_malloc(PTX);
        for k in [
            "saxpy",
            "mandelbrot",
            "nbody",
            "matmul",
            "histogram",
            "blackscholes",
        ] {
            assert!(v.contains(&format!(".entry {k}(")), "{k}");
        }
        assert!(!v.contains(".entry alloc_vectors") && !v.contains(".extern"));
        let m = offload_vgpu::parse(&v).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.func_index("blackscholes").is_some());
    }
}
