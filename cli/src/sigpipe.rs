//! Writing to a closed pipe ends the process quietly, as it does for other
//! Unix tools (`offload demo | head`), instead of panicking in `println!`.
//!
//! Rust programs start with `SIGPIPE` ignored, so a write to a pipe whose
//! reader has gone fails with `EPIPE`, and `println!` panics on it. The
//! default disposition makes the kernel end the process on that write.

/// Restore the default `SIGPIPE` disposition. Call first thing in `main`,
/// before any thread starts.
#[cfg(unix)]
pub fn default_disposition() {
    // SAFETY: `signal` with `SIG_DFL` installs no handler (no code runs in
    // signal context); it is called at the start of `main`, before any
    // other thread exists that could race on the process's dispositions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Elsewhere there is no `SIGPIPE`.
#[cfg(not(unix))]
pub fn default_disposition() {}
