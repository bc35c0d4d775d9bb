//! CUDA result codes, their names and messages. A launch failure's
//! message carries the simulator's diagnostic (kernel, PTX line, thread,
//! address), so that it reaches the user through cudarc's error text.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::{Mutex, OnceLock};

/// `CUresult`.
pub(crate) type CUresult = u32;

pub(crate) const SUCCESS: CUresult = 0;
pub(crate) const INVALID_VALUE: CUresult = 1;
pub(crate) const OUT_OF_MEMORY: CUresult = 2;
pub(crate) const NOT_INITIALIZED: CUresult = 3;
pub(crate) const INVALID_DEVICE: CUresult = 101;
pub(crate) const INVALID_CONTEXT: CUresult = 201;
pub(crate) const INVALID_PTX: CUresult = 218;
pub(crate) const INVALID_HANDLE: CUresult = 400;
pub(crate) const NOT_FOUND: CUresult = 500;
pub(crate) const NOT_READY: CUresult = 600;
pub(crate) const ILLEGAL_ADDRESS: CUresult = 700;
pub(crate) const LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
pub(crate) const LAUNCH_TIMEOUT: CUresult = 702;
pub(crate) const MISALIGNED_ADDRESS: CUresult = 716;
pub(crate) const LAUNCH_FAILED: CUresult = 719;
pub(crate) const NOT_SUPPORTED: CUresult = 801;
pub(crate) const UNKNOWN: CUresult = 999;

/// (code, name, message) of every code the shim returns.
const CODES: &[(CUresult, &str, &str)] = &[
    (SUCCESS, "CUDA_SUCCESS", "no error"),
    (
        INVALID_VALUE,
        "CUDA_ERROR_INVALID_VALUE",
        "invalid argument",
    ),
    (OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
    (
        NOT_INITIALIZED,
        "CUDA_ERROR_NOT_INITIALIZED",
        "initialization error",
    ),
    (
        INVALID_DEVICE,
        "CUDA_ERROR_INVALID_DEVICE",
        "invalid device ordinal",
    ),
    (
        INVALID_CONTEXT,
        "CUDA_ERROR_INVALID_CONTEXT",
        "invalid device context",
    ),
    (
        INVALID_PTX,
        "CUDA_ERROR_INVALID_PTX",
        "a PTX JIT compilation failed",
    ),
    (
        INVALID_HANDLE,
        "CUDA_ERROR_INVALID_HANDLE",
        "invalid resource handle",
    ),
    (NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"),
    (NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"),
    (
        ILLEGAL_ADDRESS,
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "an illegal memory access was encountered",
    ),
    (
        LAUNCH_OUT_OF_RESOURCES,
        "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
        "too many resources requested for launch",
    ),
    (
        LAUNCH_TIMEOUT,
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "the launch timed out and was terminated",
    ),
    (
        MISALIGNED_ADDRESS,
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "misaligned address",
    ),
    (
        LAUNCH_FAILED,
        "CUDA_ERROR_LAUNCH_FAILED",
        "unspecified launch failure",
    ),
    (
        NOT_SUPPORTED,
        "CUDA_ERROR_NOT_SUPPORTED",
        "operation not supported (by the offload virtual GPU)",
    ),
    (UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"),
];

fn strings() -> &'static Mutex<HashMap<CUresult, (&'static CStr, &'static CStr)>> {
    static S: OnceLock<Mutex<HashMap<CUresult, (&'static CStr, &'static CStr)>>> = OnceLock::new();
    S.get_or_init(|| {
        Mutex::new(
            CODES
                .iter()
                .map(|&(c, n, m)| (c, (leak(n.to_string()), leak(m.to_string()))))
                .collect(),
        )
    })
}

/// A string that lives for the rest of the process (the API hands out
/// `const char *` that callers may keep).
fn leak(s: String) -> &'static CStr {
    let c = CString::new(s.replace('\0', " ")).unwrap_or_default();
    Box::leak(c.into_boxed_c_str())
}

/// The name of `code`, if it is one the shim knows.
pub(crate) fn name(code: CUresult) -> Option<&'static CStr> {
    crate::state::lock(strings()).get(&code).map(|s| s.0)
}

/// The message of `code`, with the last diagnostic for it.
pub(crate) fn message(code: CUresult) -> Option<&'static CStr> {
    crate::state::lock(strings()).get(&code).map(|s| s.1)
}

/// Makes `code`'s message carry `detail` (the latest failure of that
/// kind).
pub(crate) fn set_detail(code: CUresult, detail: String) {
    let base = CODES.iter().find(|c| c.0 == code).map_or("error", |c| c.2);
    let mut s = crate::state::lock(strings());
    let name = s
        .get(&code)
        .map_or_else(|| leak(format!("{code}")), |x| x.0);
    s.insert(code, (name, leak(format!("{base}: {detail}"))));
}
