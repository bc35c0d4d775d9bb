//! Looking at the code of a loaded module: the bytecode with the verifier's
//! types and the shared analyses, the Cranelift IR of the CPU device, the PTX
//! of the CUDA device, and the deopt metadata (sites, frame-state maps,
//! speculations) a compiled version carries.
//!
//! Kernels are shown as the runtime would compile them now: the current
//! version and speculations of the kernel (from its launches so far), with
//! the runtime's compile options (fault injection included).

use crate::adaptive::KernelInfo;
use crate::error::OffloadError;
use crate::runtime::Module;
use offload_deopt::DeoptMetadata;
use offload_ir::{FuncId, type_name};
use offload_jit::Speculations;
use std::fmt::Write;

impl Module {
    /// The function `name` (`name` or `Class.method`) with the verifier's
    /// types: its blocks and back-edges, each instruction with the locals
    /// live into it, and its deopt sites with their typed frame states.
    pub fn bytecode(&self, name: &str) -> Result<String, OffloadError> {
        let v = self.prog.verified();
        let f = v.func_named(name).ok_or_else(|| {
            OffloadError::Lookup(format!("module `{}` has no function `{name}`", self.name))
        })?;
        Ok(offload_ir::analysis::dump(v, f))
    }

    /// The Cranelift IR of `kernel`'s slot loop on the CPU device, after
    /// Cranelift's optimizations.
    pub fn cranelift_ir(&self, kernel: &str) -> Result<String, OffloadError> {
        let (k, version, spec) = self.current(kernel)?;
        let (text, _) = self
            .rt
            .cpu_jit()
            .clif(&self.prog, k, version, self.rt.settings().compile, &spec)
            .map_err(|e| cannot(kernel, crate::Device::Cpu, e))?;
        Ok(text)
    }

    /// The PTX of `kernel` on the CUDA device (sm_70 and newer).
    pub fn ptx(&self, kernel: &str) -> Result<String, OffloadError> {
        let (k, version, spec) = self.current(kernel)?;
        let p = offload_jit::ptx::compile_speculative(
            &self.prog,
            k,
            version,
            self.rt.settings().compile,
            &spec,
        )
        .map_err(|e| cannot(kernel, crate::Device::Cuda, e))?;
        Ok(p.text)
    }

    /// The deopt metadata of `kernel`'s current compiled version: the save
    /// record layout, every site with its bytecode index, reasons, frames
    /// and where each live value sits in the record, and the speculations.
    pub fn deopt_metadata(&self, kernel: &str) -> Result<String, OffloadError> {
        let (k, version, spec) = self.current(kernel)?;
        let (_, meta) = self
            .rt
            .cpu_jit()
            .clif(&self.prog, k, version, self.rt.settings().compile, &spec)
            .map_err(|e| cannot(kernel, crate::Device::Cpu, e))?;
        Ok(self.metadata_text(&meta))
    }

    /// What the runtime knows about `kernel` of this module (see
    /// [`crate::Runtime::kernel_info`]); `None` before its first launch.
    pub fn kernel_info(&self, kernel: &str) -> Result<Option<KernelInfo>, OffloadError> {
        let k = self.kernel_id(kernel)?;
        let Some(st) = self.rt.existing_kernel_state(self.id, k) else {
            return Ok(None);
        };
        let st = st.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Some(st.info(self.rt.settings())))
    }

    /// The kernel, its current version and speculations.
    fn current(&self, kernel: &str) -> Result<(FuncId, u32, Speculations), OffloadError> {
        let k = self.kernel_id(kernel)?;
        let (version, spec) = match self.rt.existing_kernel_state(self.id, k) {
            Some(st) => {
                let st = st.lock().unwrap_or_else(|e| e.into_inner());
                let ver = st.current_version();
                (ver.number, ver.spec.clone())
            }
            None => (0, Speculations::none()),
        };
        Ok((k, version, spec))
    }

    fn metadata_text(&self, meta: &DeoptMetadata) -> String {
        let v = self.prog.verified();
        let m = v.module();
        let fname = |f: FuncId| v.func(f).name.clone();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "kernel {} version {}: {} sites, {} words per save record ({} header + values)",
            fname(meta.kernel),
            meta.version,
            meta.sites.len(),
            meta.layout.record_words,
            offload_deopt::SaveLayout::HEADER_WORDS
        );
        for s in &meta.sites {
            let reasons: Vec<&str> = s.reasons.iter().map(|r| r.name()).collect();
            let _ = writeln!(out, "  site {} @{} [{}]", s.id.0, s.bci, reasons.join(", "));
            let mut slots = s.frame_slots().peekable();
            for (i, fr) in s.frames.iter().enumerate() {
                let f = v.func(fr.func);
                let vals: Vec<String> = std::iter::from_fn(|| slots.next_if(|(fi, _)| *fi == i))
                    .map(|(_, sl)| {
                        let what = match sl.value {
                            offload_ir::analysis::Value::Local(l) => {
                                f.locals[l.index()].name.clone()
                            }
                            offload_ir::analysis::Value::Stack(k) => format!("s{k}"),
                        };
                        format!("{what}: {} @w{}", type_name(m, sl.ty), sl.word)
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "    frame {} @{}: {}",
                    fname(fr.func),
                    fr.bci,
                    if vals.is_empty() {
                        "(nothing live)".to_string()
                    } else {
                        vals.join(", ")
                    }
                );
            }
        }
        if meta.speculations.is_empty() {
            let _ = writeln!(out, "  no speculations");
        }
        for r in &meta.speculations {
            let _ = writeln!(
                out,
                "  speculation in {} @{} guarded by site {}: {}",
                fname(r.spec.func),
                r.spec.bci,
                r.site.0,
                r.spec
            );
        }
        out
    }
}

fn cannot(kernel: &str, device: crate::Device, source: offload_jit::JitError) -> OffloadError {
    OffloadError::NotCompiled {
        kernel: kernel.to_string(),
        device,
        source,
    }
}
