//! The CPU JIT: a Cranelift module per compiled kernel version
//! ([`CpuJit`], [`CompiledKernel`]), with the host's math, the vector
//! math and the allocation slow path in its symbol table.

use super::{math, rt, vmath};
use crate::{CompileOptions, JitError, Speculations};
use cranelift_jit::{JITBuilder, JITModule};
use offload_abi::cpu::{LaunchCtx, SlotFn};
use offload_deopt::DeoptMetadata;
use offload_ir::FuncId;
use offload_program::Program;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Cranelift's flags for a module with optimization level `opt` and
/// register allocator `regalloc`. Cranelift's IR verifier runs in debug
/// builds (every test), not in release builds, where it would double the
/// compile latency.
pub(crate) fn flags(
    opt: &'static str,
    regalloc: &'static str,
) -> [(&'static str, &'static str); 3] {
    let verify = if cfg!(debug_assertions) {
        "true"
    } else {
        "false"
    };
    [
        ("opt_level", opt),
        ("regalloc_algorithm", regalloc),
        ("enable_verifier", verify),
    ]
}

/// `isa` with `opt_level=none` and every other setting, shared and
/// target-specific, as it is: what lowers a function that was optimized
/// already (and then mended, [`super::ssa::remat_constants`]) without optimizing
/// it again. Every optimizing module has the same target, so it is made
/// once, from the first one asked for.
pub(crate) fn lowering_isa(
    isa: &dyn cranelift_codegen::isa::TargetIsa,
) -> Result<&'static cranelift_codegen::isa::OwnedTargetIsa, JitError> {
    use cranelift_codegen::settings::{self, Configurable};
    static ISA: std::sync::OnceLock<Result<cranelift_codegen::isa::OwnedTargetIsa, String>> =
        std::sync::OnceLock::new();
    // A setting's text is `name=value`, which is what `set` takes apart.
    fn copy(to: &mut dyn Configurable, v: settings::Value) -> Result<(), String> {
        let text = v.to_string();
        let (name, value) = text.split_once('=').unwrap_or((v.name, ""));
        to.set(name, value).map_err(|e| format!("{name}: {e}"))
    }
    ISA.get_or_init(|| {
        let mut fb = settings::builder();
        for v in isa.flags().iter() {
            copy(&mut fb, v)?;
        }
        fb.set("opt_level", "none").map_err(|e| e.to_string())?;
        let mut ib =
            cranelift_codegen::isa::lookup(isa.triple().clone()).map_err(|e| e.to_string())?;
        for v in isa.isa_flags() {
            copy(&mut ib, v)?;
        }
        ib.finish(settings::Flags::new(fb))
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| JitError::Host(format!("the host's code generator: {e}")))
}

/// A compiled kernel version.
pub struct CompiledKernel {
    /// The kernel.
    pub kernel: FuncId,
    /// Its version.
    pub version: u32,
    /// Its deopt metadata (sites, frame states, save layout).
    pub meta: DeoptMetadata,
    /// How long compilation took.
    pub compile_time: Duration,
    /// The quick tier (see [`CompileOptions::quick`]).
    pub quick: bool,
    /// The sites whose records the code can resume
    /// ([`offload_deopt::SiteMap::resumable`]) when entered with
    /// [`offload_abi::cpu::SlotWords::reenter`] (none: the kernel has no loop and does
    /// not allocate, or [`CompileOptions::no_reentry`] was set). The quick
    /// tier lands at the kernel's outermost loop headers only; the
    /// optimized tier at every re-entry point.
    pub resumes: std::collections::BTreeSet<offload_ir::SiteId>,
    entry: SlotFn,
    /// Owns the code; freed when the kernel version is dropped.
    module: Mutex<Option<JITModule>>,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("kernel", &self.kernel)
            .field("version", &self.version)
            .field("sites", &self.meta.sites.len())
            .field("compile_time", &self.compile_time)
            .field("quick", &self.quick)
            .finish()
    }
}

// SAFETY: the module is behind a mutex, and the entry point is plain code
// that may run on any thread.
unsafe impl Send for CompiledKernel {}
// SAFETY: as above.
unsafe impl Sync for CompiledKernel {}

impl CompiledKernel {
    /// Run slot `slot` of a launch: claim and run workitems until the range is
    /// exhausted or the control word stops it. Returns an `EXIT_*` code.
    ///
    /// # Safety
    ///
    /// `ctx` must describe a live launch of this kernel version: every pointer
    /// valid for the whole call (the heap committed over every object the
    /// kernel can reach, `captures` holding values that passed the closure's
    /// type check, the save area and the `never_ran`/`completed`/`records`
    /// arrays sized for at least `slot + 1` slots with this version's record
    /// width).
    pub unsafe fn run_slot(&self, ctx: &LaunchCtx, slot: usize) -> u32 {
        // SAFETY: the caller guarantees `ctx` (see above); the code stays
        // alive as long as `self` does.
        unsafe { (self.entry)(ctx, slot as u64) }
    }
}

impl Drop for CompiledKernel {
    fn drop(&mut self) {
        if let Some(m) = self
            .module
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            // SAFETY: the code can only be entered through `run_slot`, which
            // borrows `self`; with `self` being dropped no call is running or
            // can start.
            unsafe { m.free_memory() };
        }
    }
}

/// The CPU JIT.
#[derive(Debug, Default)]
pub struct CpuJit {
    lock: Mutex<()>,
}

impl CpuJit {
    /// A JIT for this machine.
    pub fn new() -> CpuJit {
        CpuJit::default()
    }

    /// Compile version `version` of kernel `k` of `prog`.
    pub fn compile(
        &self,
        prog: &Program,
        k: FuncId,
        version: u32,
    ) -> Result<CompiledKernel, JitError> {
        self.compile_with(prog, k, version, CompileOptions::default())
    }

    /// Compile with options (fault injection, polls; see
    /// [`CompileOptions`]).
    pub fn compile_with(
        &self,
        prog: &Program,
        k: FuncId,
        version: u32,
        opts: CompileOptions,
    ) -> Result<CompiledKernel, JitError> {
        self.compile_speculative(prog, k, version, opts, &Speculations::none())
    }

    /// The Cranelift IR of a kernel version's slot loop as
    /// [`CpuJit::compile_speculative`] would compile it, after Cranelift's
    /// optimizations (what is lowered to machine code), with its metadata;
    /// the code is thrown away.
    pub fn clif(
        &self,
        prog: &Program,
        k: FuncId,
        version: u32,
        opts: CompileOptions,
        spec: &Speculations,
    ) -> Result<(String, DeoptMetadata), JitError> {
        let _serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut module = Self::module(opts.quick)?;
        let name = format!("k{}_v{version}", k.0);
        let mut text = String::new();
        let (_, meta, _) = super::compile(
            &mut module,
            prog,
            k,
            version,
            &name,
            opts,
            spec,
            Some(&mut text),
        )?;
        Ok((text, meta))
    }

    /// A JIT module with our flags and the runtime's symbols: optimizing,
    /// or (`quick`) for the least compile time.
    pub(crate) fn module(quick: bool) -> Result<JITModule, JitError> {
        // Optimize (`opt_level=speed`: GVN, LICM, egraph rewrites; the
        // default is none) with the backtracking register allocator; the
        // quick tier does neither (see `flags`).
        let (opt, regalloc) = if quick {
            ("none", "single_pass")
        } else {
            ("speed", "backtracking")
        };
        let mut builder = JITBuilder::with_flags(
            &flags(opt, regalloc),
            cranelift_module::default_libcall_names(),
        )
        .map_err(|e| JitError::Host(e.to_string()))?;
        for (name, ptr) in math::symbols().into_iter().chain(vmath::symbols()) {
            builder.symbol(name, ptr);
        }
        builder.symbol("offload_alloc_slow", rt::offload_alloc_slow as *const u8);
        Ok(JITModule::new(builder))
    }

    /// Compile with options and speculations (see [`spec`](crate::spec)): the version's
    /// metadata records each speculation compiled in and the site whose
    /// exit its failing guard takes.
    pub fn compile_speculative(
        &self,
        prog: &Program,
        k: FuncId,
        version: u32,
        opts: CompileOptions,
        spec: &Speculations,
    ) -> Result<CompiledKernel, JitError> {
        let _serial = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let t0 = Instant::now();
        let mut module = Self::module(opts.quick)?;
        let name = format!("k{}_v{version}", k.0);
        let (id, meta, resumes) =
            super::compile(&mut module, prog, k, version, &name, opts, spec, None)?;
        module
            .finalize_definitions()
            .map_err(|e| JitError::Codegen(e.to_string()))?;
        let code = module.get_finalized_function(id);
        // SAFETY: `code` is the finalized code of a function declared with
        // the signature `(ptr, i64) -> i32`, which is `SlotFn`'s C ABI; the
        // module that owns the code is kept alive inside the returned value.
        let entry: SlotFn = unsafe { std::mem::transmute::<*const u8, SlotFn>(code) };
        Ok(CompiledKernel {
            kernel: k,
            version,
            meta,
            compile_time: t0.elapsed(),
            quick: opts.quick,
            resumes,
            entry,
            module: Mutex::new(Some(module)),
        })
    }
}

#[cfg(test)]
mod tests {
    use cranelift_module::Module;

    #[test]
    fn the_lowering_target_is_the_optimizing_modules_but_for_the_opt_level() {
        let module = super::CpuJit::module(false).expect("a JIT module");
        let isa = module.isa();
        let low = super::lowering_isa(isa).expect("made");
        let text = |vs: &mut dyn Iterator<Item = cranelift_codegen::settings::Value>| {
            vs.map(|v| v.to_string()).collect::<Vec<_>>()
        };
        let mine = text(&mut isa.flags().iter());
        let theirs = text(&mut low.flags().iter());
        let differ: Vec<_> = mine.iter().zip(&theirs).filter(|(a, b)| a != b).collect();
        assert_eq!(mine.len(), theirs.len());
        assert_eq!(
            differ,
            [(
                &"opt_level=speed".to_string(),
                &"opt_level=none".to_string()
            )]
        );
        assert!(mine.contains(&"is_pic=0".to_string()), "{mine:?}");
        assert_eq!(
            text(&mut isa.isa_flags().into_iter()),
            text(&mut low.isa_flags().into_iter())
        );
        assert_eq!(isa.triple(), low.triple());
    }
}
