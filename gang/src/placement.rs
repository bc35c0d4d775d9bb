//! Keeping a helper off its caller's core.
//!
//! A helper woken from a park is placed by the kernel, which may put it on
//! the core of the thread that woke it — the caller, about to run slot 0
//! in compiled code that never yields. The helper then waits for the
//! caller's whole slot, the launch runs on one core, and since neither
//! thread sleeps again while launches follow each other, the two stay
//! together until the load balancer moves one, tens of milliseconds later
//! (saxpy over 2^20 elements: 115–130 µs per launch instead of 65, seen on
//! 2 cores). So the caller says where it runs, yields once after waking its
//! helpers (a helper placed beside it runs now), and a helper that finds
//! itself on the caller's core moves away: it narrows its CPU mask to
//! exclude that core (the kernel migrates it at once) and widens it back.

/// The core the calling thread runs on, if the system says.
pub(crate) fn current_cpu() -> Option<usize> {
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        // SAFETY: sched_getcpu has no preconditions.
        let c = unsafe { libc::sched_getcpu() };
        usize::try_from(c).ok()
    }
    #[cfg(not(all(target_os = "linux", not(loom))))]
    {
        None
    }
}

/// Move the calling thread off core `cpu`, keeping its CPU mask as it was
/// (other cores allowed; nothing happens where the mask has no other).
/// Says whether it moved.
pub(crate) fn leave_cpu(cpu: usize) -> bool {
    #[cfg(all(target_os = "linux", not(loom)))]
    {
        use std::mem::{size_of, zeroed};
        // SAFETY: a cpu_set_t is plain bits; zero is the empty set.
        let mut mask: libc::cpu_set_t = unsafe { zeroed() };
        // SAFETY: `mask` is a valid cpu_set_t of the size passed; pid 0 is
        // the calling thread.
        if unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut mask) } != 0 {
            return false;
        }
        if cpu >= libc::CPU_SETSIZE as usize {
            return false;
        }
        let mut without = mask;
        // SAFETY: `cpu` is below CPU_SETSIZE, the masks are valid
        // cpu_set_t values of the size passed, and pid 0 is this thread.
        unsafe {
            if !libc::CPU_ISSET(cpu, &mask) {
                return false;
            }
            libc::CPU_CLR(cpu, &mut without);
            if libc::CPU_COUNT(&without) == 0 {
                return false;
            }
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &without) != 0 {
                return false;
            }
            // Back to the mask it had: it stays where the kernel moved it
            // until its next wake-up.
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &mask);
        }
        true
    }
    #[cfg(not(all(target_os = "linux", not(loom))))]
    {
        let _ = cpu;
        false
    }
}

#[cfg(all(test, target_os = "linux", not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_thread_leaves_the_core_it_was_on_and_keeps_its_mask() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let before = current_cpu().expect("linux says");
        let moved = leave_cpu(before);
        if n > 1 {
            assert!(moved);
            assert_ne!(current_cpu(), Some(before), "migrated at once");
            // The mask is whole again: it may go back.
            // SAFETY: as in `leave_cpu`.
            let mut mask: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: as in `leave_cpu`.
            let rc = unsafe {
                libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut mask)
            };
            assert_eq!(rc, 0);
            // SAFETY: `before` is a core this thread ran on: below
            // CPU_SETSIZE.
            assert!(unsafe { libc::CPU_ISSET(before, &mask) });
        }
        assert!(!leave_cpu(usize::MAX), "no such core");
    }
}
