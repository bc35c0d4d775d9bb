//! What the process has asked of the virtual GPU, readable by a program
//! that loaded the shim through symbols of this library beside the CUDA
//! API:
//!
//! - `offload_vgpu_stats`: launches, PTX instructions and simulation time
//!   since the process started.
//! - `offload_vgpu_counters`: the cost model's counters
//!   (`offload_vgpu::cost`) summed over the launches finished since the
//!   last `offload_vgpu_counters_reset` (the atomic chain is the longest of
//!   any one launch), and the driver calls made since then, by name.
//!
//!   A memory instruction whose PTX line ends in a `// @count NAME` note
//!   also adds its warp-wide executions, its thread-level executions and
//!   its sectors to `count.NAME.instructions`, `count.NAME.lanes` and
//!   `count.NAME.sectors` (how offload's PTX marks the loads of a virtual
//!   call's dispatch).
//! - `offload_vgpu_stream_counters`: those noted counters of the launches
//!   one stream has finished, since it was created (never reset), so that
//!   a program running launches on several streams at once tells its
//!   launches apart (offload's report of a launch reads its dispatches so).
//!
//! Counted calls are the API calls a program makes; a call the shim makes
//! on another's behalf (`cuEventRecordWithFlags` answered by
//! `cuEventRecord`) counts once, under the name the program called.

use offload_vgpu::LaunchStats;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

static INSTRUCTIONS: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// The counters since the last reset, by name.
static SINCE_RESET: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

fn since_reset() -> MutexGuard<'static, BTreeMap<String, u64>> {
    SINCE_RESET.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    /// Whether this thread is inside a counted API call.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Counts one API call while alive; only the outermost of nested calls
/// is counted.
pub(crate) struct Call {
    outer: bool,
}

impl Call {
    pub(crate) fn enter(name: &'static str) -> Call {
        let outer = !IN_CALL.with(|c| c.replace(true));
        if outer {
            let mut m = since_reset();
            *m.entry(format!("call.{name}")).or_insert(0) += 1;
            *m.entry("driver_calls".into()).or_insert(0) += 1;
        }
        Call { outer }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if self.outer {
            IN_CALL.with(|c| c.set(false));
        }
    }
}

/// The lines of a module's `text` (1-based) that end in a `// @count
/// NAME` note, with the name.
pub(crate) fn notes(text: &str) -> std::collections::HashMap<u32, String> {
    text.lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let (_, note) = l.split_once("//")?;
            let name = note.trim().strip_prefix("@count ")?.trim();
            Some((i as u32 + 1, name.to_string()))
        })
        .collect()
}

/// The noted counters of a finished launch: per `// @count NAME` note of
/// its module (`notes`, by line), `count.NAME.instructions`, `.lanes` and
/// `.sectors`.
pub(crate) fn noted(
    stats: &LaunchStats,
    notes: &std::collections::HashMap<u32, String>,
) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in &stats.costs.by_line {
        if let Some(name) = notes.get(&l.line) {
            for (what, v) in [
                ("instructions", l.instructions),
                ("lanes", l.lanes),
                ("sectors", l.sectors),
            ] {
                *m.entry(format!("count.{name}.{what}")).or_insert(0) += v;
            }
        }
    }
    m
}

/// Adds the counters `from` to `into`, name by name.
pub(crate) fn add_into(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, v) in from {
        *into.entry(k.clone()).or_insert(0) += v;
    }
}

/// Adds a finished launch and its noted counters (`noted`).
pub(crate) fn add(stats: &LaunchStats, noted: &BTreeMap<String, u64>) {
    INSTRUCTIONS.fetch_add(stats.instructions, Ordering::Relaxed);
    NANOS.fetch_add(stats.wall.as_nanos() as u64, Ordering::Relaxed);
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
    let c = &stats.costs;
    let mut m = since_reset();
    for (k, v) in [
        ("launches", 1),
        ("instructions", stats.instructions),
        ("threads", stats.threads),
        ("mem_instructions", c.mem_instructions),
        ("sectors", c.sectors),
        ("atomics", c.atomics),
        ("strong_loads", c.strong_loads),
        ("sys_loads", c.sys_loads),
        ("fences", c.fences),
        ("sys_fences", c.sys_fences),
    ] {
        *m.entry(k.into()).or_insert(0) += v;
    }
    add_into(&mut m, noted);
    let chain = m.entry("atomic_chain".into()).or_insert(0);
    *chain = (*chain).max(c.atomic_chain);
}

/// Writes the launches, PTX instructions executed and nanoseconds spent
/// simulating them so far (any pointer may be null).
///
/// # Safety
///
/// Each non-null pointer must be valid for a `u64` write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_vgpu_stats(
    launches: *mut u64,
    instructions: *mut u64,
    nanos: *mut u64,
) {
    for (p, v) in [
        (launches, &LAUNCHES),
        (instructions, &INSTRUCTIONS),
        (nanos, &NANOS),
    ] {
        if !p.is_null() {
            // SAFETY: the caller passes a valid pointer or null.
            unsafe { p.write(v.load(Ordering::Relaxed)) };
        }
    }
}

/// Writes the counters since the last reset as lines `name value\n`
/// (names sorted) into `buf` when they fit in `cap` bytes, and returns
/// their length either way (call again with a larger buffer when it is
/// above `cap`).
///
/// # Safety
///
/// `buf` must be null (with `cap` 0) or valid for `cap` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_vgpu_counters(buf: *mut u8, cap: usize) -> usize {
    // SAFETY: the caller's contract is `write_lines`'s.
    unsafe { write_lines(&since_reset(), buf, cap) }
}

/// Writes `counters` as lines `name value\n` (names sorted) into `buf`
/// when they fit in `cap` bytes, and returns their length either way.
///
/// # Safety
///
/// `buf` must be null (with `cap` 0) or valid for `cap` bytes of writes.
unsafe fn write_lines(counters: &BTreeMap<String, u64>, buf: *mut u8, cap: usize) -> usize {
    let text: String = counters.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    if !buf.is_null() && text.len() <= cap {
        // SAFETY: the caller's buffer holds `cap` ≥ `text.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len()) };
    }
    text.len()
}

/// Writes the noted counters of the launches stream `stream` (a
/// `CUstream`; null for the default stream) has finished, as
/// `offload_vgpu_counters` writes its counters, and returns their length;
/// `usize::MAX` when there is no such stream (the default stream needs a
/// current context).
///
/// # Safety
///
/// `buf` must be null (with `cap` 0) or valid for `cap` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn offload_vgpu_stream_counters(
    stream: usize,
    buf: *mut u8,
    cap: usize,
) -> usize {
    // A created stream of any device; the default stream of the current
    // context's device.
    let st = if stream <= 2 {
        crate::device::current()
            .ok()
            .and_then(|dev| crate::state::state().stream(stream, dev))
    } else {
        crate::state::state().streams.get(&stream).cloned()
    };
    let Some(st) = st else {
        return usize::MAX;
    };
    // SAFETY: the caller's contract is `write_lines`'s.
    unsafe { write_lines(&crate::state::lock(&st.noted), buf, cap) }
}

/// Sets every counter of `offload_vgpu_counters` back to zero.
#[unsafe(no_mangle)]
pub extern "C" fn offload_vgpu_counters_reset() {
    since_reset().clear();
}

#[cfg(test)]
mod tests {
    #[test]
    fn noted_lines_are_found_by_number() {
        let text = ".entry k()\n{\n\tld.u32 %r1, [%rd1]; // @count dispatch.page\n\tld.u32 %r2, [%rd2]; // a comment\n\t// @count not.an.instruction\n}\n";
        let n = super::notes(text);
        assert_eq!(n.get(&3).map(String::as_str), Some("dispatch.page"));
        assert!(!n.contains_key(&4));
        assert_eq!(n.len(), 2, "{n:?}");
    }
}
