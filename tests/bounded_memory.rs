//! Bounded bookkeeping, measured: a launch over 10^9 workitems whose first
//! thousand deopt allocates no more than a launch over 10^6 (a counting
//! global allocator, not a timer). The save area, the never-ran ranges and
//! the replay state are O(slots × records per slot), never O(range).

use offload::{Device, Runtime, par_offload};
use offload_jit::Injection;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(l.size() as u64, Ordering::Relaxed);
        let live = LIVE.fetch_add(l.size() as u64, Ordering::Relaxed) + l.size() as u64;
        PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's layout goes to `System` as is.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as u64, Ordering::Relaxed);
        // SAFETY: `p` came from `System.alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Workitems below 1000 bump `out[0]`; the bump is forced to deopt, so
/// exactly the first thousand workitems deopt and are replayed.
const FIRST: &str = "kernel first(i: i64, out: i64[]) {\n    load i\n    i64.const 1000\n    i64.lt\n    br_unless done\n    load out\n    i32.const 0\n    i64.const 1\n    i64.array_atomic_add\n    pop\n  done:\n    ret\n}\n";

/// (bytes allocated, peak live bytes above the start) by one launch.
fn measure(n: i64) -> (u64, u64, offload::LaunchReport) {
    let rt = Runtime::builder()
        .workers(2)
        .device(Device::Cpu)
        .inject(Injection {
            site_bci: 7,
            modulus: 1,
            remainder: 0,
            reason: None,
        })
        .build()
        .unwrap();
    let m = rt.load("first.obc", FIRST).unwrap();
    let out = rt.new_array::<i64>(1).unwrap();
    let c = m.closure("first", [(&out).into()]).unwrap();
    par_offload(0..10, &c).unwrap(); // compile outside the measurement
    // The optimized tier compiles on a background thread, whose allocations
    // the counter would see; let it finish first.
    rt.finish_compiles();
    rt.write(&out, 0, &[0]).unwrap();
    let (a0, l0) = (
        ALLOCATED.load(Ordering::SeqCst),
        LIVE.load(Ordering::SeqCst),
    );
    PEAK.store(l0, Ordering::SeqCst);
    let r = par_offload(0..n, &c).unwrap();
    let allocated = ALLOCATED.load(Ordering::SeqCst) - a0;
    let peak = PEAK.load(Ordering::SeqCst) - l0;
    assert_eq!(rt.read(&out).unwrap(), [1000], "{r}");
    assert!(r.fallback.is_none(), "{r}");
    assert_eq!((r.replayed, r.completed), (1000, n as u64), "{r}");
    (allocated, peak, r)
}

#[test]
fn a_billion_workitems_cost_what_a_million_do() {
    let (small_alloc, small_peak, _) = measure(1_000_000);
    let (big_alloc, big_peak, r) = measure(1_000_000_000);
    eprintln!(
        "10^6: {small_alloc} B allocated, peak {small_peak} B; 10^9: {big_alloc} B, peak {big_peak} B; {r}"
    );
    // Same bookkeeping whatever the range (a little slack for the report's
    // strings and the deopt map).
    assert!(
        big_alloc <= small_alloc + 16 * 1024,
        "10^9 workitems allocated {big_alloc} B, 10^6 allocated {small_alloc} B"
    );
    assert!(
        big_peak <= small_peak + 16 * 1024,
        "{big_peak} vs {small_peak}"
    );
    // And it is small in absolute terms: the save area (2 slots × 1024
    // records) and friends.
    assert!(big_peak < 1 << 20, "peak {big_peak} B");
}
