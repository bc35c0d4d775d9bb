//! Arrays a launch sums into: a histogram as a reduction of small arrays
//! ([`Closure::summed`]).
//!
//! A kernel that counts into a few bins with `atomic_add` makes every
//! workitem update the same few words: on the GPU the atomics on one
//! address are paid one after another, on the CPU the cores pass the
//! words' cache line around. A launch that *sums into* such an array gives
//! each group of slots — a CPU slot, a GPU block — a zeroed copy of it
//! (its row of the copies table: `offload_abi::cpu::LaunchCtx::copies`,
//! `offload_abi::gpu::DeviceCtx::copies`); the kernel's atomics go to its
//! group's copy, where only the group's own workitems meet, and when the
//! launch ends the copies are added into the array. Workitems the host
//! runs (never-ran ranges, the interpreter device) add into the array
//! itself; a deopted workitem resumed by the interpreter goes on adding
//! into the copy its frame holds. Every update lands once, in the array
//! or in a copy added to it once.
//!
//! This is the same as updating the array directly only when the kernel
//! does nothing else with it ([`offload_ir::summed`] checks: `atomic_add`
//! to its elements, its length), and the sum is exact whatever the copies
//! and the order they are added in only for integers (wrapping), so only
//! `i32[]` and `i64[]` arrays can be summed into.
//!
//! **How many copies.** A launch makes one copy of each summed array per
//! CPU slot — with a GPU, one per block its multiprocessors run at once
//! (`sms × 2048 / 256`) if that is more, but no more than one per 4,096
//! workitems: a group of slots takes copy `group % copies`. On the CPU
//! each slot so has a copy of its own, and runs one workitem at a time:
//! its compiled code adds with a plain load, add and store
//! ([`offload_jit::CompileOptions::private_sums`]; the interpreter,
//! replaying a slot's deopted workitems between its runs, adds
//! atomically). A GPU block's threads share their copy and add to it
//! atomically. The copies are heap arrays, made at the launch and garbage
//! after it; they are launch roots while it runs (a collection moves them
//! and updates the table).

use super::*;
use offload_ir::summed::NotSummable;

/// Workitems per GPU block's copy of a summed array, at least: a short
/// launch makes fewer copies than the GPU runs blocks (never fewer than
/// the CPU's slots).
const WORKITEMS_PER_COPY: u64 = 4096;

impl Closure {
    /// The closure with its capture `name` (an `i32[]` or `i64[]` array the
    /// kernel only `atomic_add`s to) *summed into*: each launch gives each
    /// group of slots a zeroed copy to add to, and adds the copies into the
    /// array when it ends, so that workitems of different groups never
    /// update the same word (see the module docs; a histogram's bins).
    /// The result is the array's old contents plus every workitem's
    /// additions, exactly as with atomics on the array itself.
    ///
    /// ```
    /// use offload::{Runtime, par_offload};
    ///
    /// let rt = Runtime::builder().workers(2).build()?;
    /// let m = rt.load_source("hist.ofk", "
    ///     #[kernel]
    ///     fn hist(i: i64, data: &[i32], bins: &mut [i32]) {
    ///         atomic_add(&mut bins[data[i] % bins.len()], 1);
    ///     }
    /// ")?;
    /// let data = rt.array(&(0..10_000).collect::<Vec<i32>>())?;
    /// let bins = rt.new_array::<i32>(10)?;
    /// let hist = m.closure("hist", [(&data).into(), (&bins).into()])?.summed("bins")?;
    /// par_offload(0..10_000, &hist)?;
    /// assert_eq!(rt.read(&bins)?, vec![1000; 10]);
    /// # Ok::<(), offload::OffloadError>(())
    /// ```
    ///
    /// An error names the capture when there is none of that name, or when
    /// the kernel uses the array otherwise (reads or stores an element,
    /// passes it on), or it is not an array of integers.
    pub fn summed(mut self, name: &str) -> Result<Closure, OffloadError> {
        let v = self.module.prog.verified();
        let f = v.func(self.kernel);
        let cerr = |problem: String| OffloadError::Capture {
            kernel: f.name.clone(),
            problem,
        };
        let Some(p) = (1..f.param_count).find(|&p| f.locals[p as usize].name == name) else {
            let names: Vec<&str> = f.params()[1..].iter().map(|p| p.name.as_str()).collect();
            return Err(cerr(format!(
                "it has no capture `{name}` to sum into (its captures: {})",
                names.join(", ")
            )));
        };
        if let Err(NotSummable { at, what }) = offload_ir::summed::check(v, self.kernel, p) {
            let place = at
                .and_then(|b| f.debug.inst_spans.get(b as usize))
                .map(|s| format!(" at line {}:{}", s.line, s.col))
                .unwrap_or_default();
            let why = if at.is_some() {
                format!("the kernel {what}{place}, and may only `atomic_add` to its elements")
            } else {
                format!(
                    "it {what}: only integer sums are exact whatever the order the copies are added in"
                )
            };
            return Err(cerr(format!(
                "capture `{name}` cannot be summed into: {why}"
            )));
        }
        let capture = p as usize - 1;
        if !self.summed.contains(&capture) {
            self.summed.push(capture);
        }
        Ok(self)
    }

    /// The captures a launch sums into (by capture index).
    pub fn summed_captures(&self) -> &[usize] {
        &self.summed
    }
}

/// A launch's copies table and the copies it holds.
pub(super) struct Copies {
    /// `rows` rows of one raw slot per summable parameter of the kernel
    /// (the launch's roots while it runs: every cell is a reference).
    pub(super) cells: Box<[AtomicU64]>,
    pub(super) rows: usize,
    /// The kernel's summable parameters (by local index): a row's columns.
    summable: Vec<u32>,
    /// Per summed capture: its column, its capture index, and its copies'
    /// roots (one per row).
    summed: Vec<(usize, usize, Vec<Root>)>,
    /// Arrays kept between the copies ([`spacer`]).
    _spacers: Vec<Root>,
}

/// An array of 256 bytes of `copy`'s element type, allocated after each
/// copy and kept for the launch: two slots' copies never share a pair of
/// cache lines (side by side, a slot's busiest bins and the end of the
/// copy before it did, and the histogram ran 2.5x slower in about half the
/// launches), also after a collection slides them (objects of one type
/// stay in order).
fn spacer(copy: Header) -> Header {
    match copy {
        Header::Array { elem, dims, .. } => Header::Array {
            elem,
            dims,
            len: if elem == Elem::I64 { 32 } else { 64 },
        },
        other => other,
    }
}

impl Copies {
    /// Fill the table from the copies and the launch's `captures` (read
    /// where no collection can run: the table is then a root of the
    /// launch).
    pub(super) fn fill(&self, captures: &[AtomicU64]) {
        let per_row = self.summable.len();
        for (j, &p) in self.summable.iter().enumerate() {
            let summed = self.summed.iter().find(|(col, ..)| *col == j);
            for r in 0..self.rows {
                let raw = match summed {
                    Some((_, _, copies)) => u64::from(copies[r].get().0),
                    None => captures[p as usize - 1].load(Ordering::Acquire),
                };
                self.cells[r * per_row + j].store(raw, Ordering::Release);
            }
        }
    }

    /// The table as a launch passes it to its devices.
    pub(super) fn table(&self) -> crate::env::CopyTable<'_> {
        crate::env::CopyTable {
            cells: &self.cells,
            rows: self.rows,
            private_sums: self
                .summed
                .iter()
                .fold(0, |m, (_, c, _)| m | 1u64 << (c + 1)),
        }
    }

    /// Add every copy into its array (after the launch, whatever its
    /// outcome: what its workitems added is in the copies).
    pub(super) fn add_into(&self, rt: &Runtime, closure: &Closure) -> Result<(), OffloadError> {
        for (_, c, copies) in &self.summed {
            let Some((_, array)) = closure.refs.iter().find(|(i, _)| i == c) else {
                continue;
            };
            rt.hold(|heap| add_copies(heap, array, copies))?;
        }
        Ok(())
    }
}

/// `array[k] += copy[k]` for every copy (wrapping), the copies read and
/// the array written through the host's view of the heap (what a GPU
/// wrote comes back first; the array's chunks go to the GPU before the
/// next launch that reads them).
fn add_copies(heap: &Heap, array: &Root, copies: &[Root]) -> Result<(), OffloadError> {
    let a = array.get();
    let Header::Array { elem, len, .. } = heap.header(a)? else {
        return Err(OffloadError::Setup(
            "a summed capture is not an array".into(),
        ));
    };
    let (len, wide) = (len as usize, elem == Elem::I64);
    let size = if wide { 8 } else { 4 };
    let mut sum = vec![0u64; len];
    for copy in copies {
        let base = copy.get().byte_offset() + 8;
        heap.fetch(base, len * size)?;
        for (k, s) in sum.iter_mut().enumerate() {
            *s = s.wrapping_add(if wide {
                heap.load64(base + k * 8)?
            } else {
                u64::from(heap.load32(base + k * 4)?)
            });
        }
    }
    let base = a.byte_offset() + 8;
    heap.fetch(base, len * size)?;
    for (k, s) in sum.into_iter().enumerate().filter(|(_, s)| *s != 0) {
        if wide {
            heap.store64(base + k * 8, heap.load64(base + k * 8)?.wrapping_add(s))?;
        } else {
            let old = heap.load32(base + k * 4)?;
            heap.store32(base + k * 4, old.wrapping_add(s as u32))?;
        }
    }
    Ok(())
}

impl Runtime {
    /// The copies table of a launch of `closure` over `n` workitems (none
    /// for a kernel no launch can sum into): copies of the arrays it sums
    /// into, and the captures of its other summable parameters. Call it
    /// where a collection may run (it allocates), and [`Copies::fill`] it
    /// where none can.
    pub(super) fn copies(&self, closure: &Closure, n: u64) -> Result<Option<Copies>, OffloadError> {
        let summable = closure
            .module
            .prog
            .analysis(closure.kernel)
            .map(|a| a.summable.clone())
            .unwrap_or_default();
        if summable.is_empty() {
            return Ok(None);
        }
        // The interpreter device adds to the arrays themselves (its
        // workers' atomics): no copies to make.
        let sums: &[usize] = if self.inner.env.settings.device == Device::Interpreter {
            &[]
        } else {
            &closure.summed
        };
        let rows = if sums.is_empty() {
            1
        } else {
            // A row per CPU slot, so that each adds to its copy without
            // atomics; on a GPU a row per block that runs at once, fewer
            // for a short launch.
            let gpu = self
                .inner
                .gpus
                .iter()
                .map(|g| g.copy_rows())
                .max()
                .unwrap_or(1);
            let gpu = (n / WORKITEMS_PER_COPY).clamp(1, gpu as u64) as usize;
            self.inner.env.workers.max(gpu)
        };
        let mut summed = Vec::new();
        let mut spacers = Vec::new();
        // (Parameter bits: `CompileOptions::private_sums`.)
        if sums.iter().any(|&c| c + 1 >= 64) {
            return Err(OffloadError::Capture {
                kernel: closure.kernel_name().to_string(),
                problem: "only its first 63 captures can be summed into".into(),
            });
        }
        for &c in sums {
            let col = summable
                .iter()
                .position(|&p| p as usize == c + 1)
                .ok_or_else(|| OffloadError::Setup("a summed capture is not summable".into()))?;
            let (_, root) =
                closure.refs.iter().find(|(i, _)| *i == c).ok_or_else(|| {
                    OffloadError::Setup("a summed capture is not an array".into())
                })?;
            let header = self.hold(|heap| heap.header(root.get()))?;
            let mut copies = Vec::with_capacity(rows);
            for _ in 0..rows {
                copies.push(self.alloc_rooted(header)?);
                spacers.push(self.alloc_rooted(spacer(header))?);
            }
            summed.push((col, c, copies));
        }
        Ok(Some(Copies {
            cells: (0..rows * summable.len())
                .map(|_| AtomicU64::new(0))
                .collect(),
            rows,
            summable,
            summed,
            _spacers: spacers,
        }))
    }
}
