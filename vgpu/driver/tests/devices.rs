//! Several virtual devices (`OFFLOAD_VGPU_DEVICES`): each with its own
//! primary context, memory, modules, streams and sticky error; a kernel
//! reaches its own device's memory and mapped host memory, and faults on
//! another device's. Calls the driver's C functions as cudarc would.
//!
//! A test of its own process (`harness = false`): the driver reads its
//! settings once, and the device count must be set before.

use std::ffi::{c_int, c_uint, c_void};

// Link the driver (its C functions are the symbols declared below).
use offload_vgpu_driver as _;

type CUresult = c_int;
type Handle = usize;

const SUCCESS: CUresult = 0;
const INVALID_DEVICE: CUresult = 101;
const INVALID_CONTEXT: CUresult = 201;
const INVALID_HANDLE: CUresult = 400;
const ILLEGAL_ADDRESS: CUresult = 700;

unsafe extern "C" {
    fn cuInit(flags: c_uint) -> CUresult;
    fn cuDeviceGetCount(n: *mut c_int) -> CUresult;
    fn cuDeviceGet(dev: *mut c_int, ordinal: c_int) -> CUresult;
    fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> CUresult;
    fn cuDevicePrimaryCtxRetain(pctx: *mut Handle, dev: c_int) -> CUresult;
    fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> CUresult;
    fn cuCtxSetCurrent(ctx: Handle) -> CUresult;
    fn cuCtxGetDevice(dev: *mut c_int) -> CUresult;
    fn cuCtxSynchronize() -> CUresult;
    fn cuMemAlloc_v2(p: *mut u64, bytes: usize) -> CUresult;
    fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult;
    fn cuMemHostAlloc(pp: *mut *mut c_void, bytes: usize, flags: c_uint) -> CUresult;
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> CUresult;
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> CUresult;
    fn cuModuleLoadData(m: *mut Handle, image: *const c_void) -> CUresult;
    fn cuModuleGetFunction(f: *mut Handle, m: Handle, name: *const std::ffi::c_char) -> CUresult;
    fn cuStreamCreate(h: *mut Handle, flags: c_uint) -> CUresult;
    fn cuStreamSynchronize(h: Handle) -> CUresult;
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchKernel(
        f: Handle,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared: c_uint,
        stream: Handle,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CUresult;
}

/// `store(p, v)`: one thread writes `v` to `*p`.
const PTX: &str = "
.version 7.0
.target sm_70
.address_size 64
.visible .entry store(.param .u64 p, .param .u32 v)
{
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [p];
    ld.param.u32 %r1, [v];
    st.global.u32 [%rd1], %r1;
    ret;
}
\0";

/// Calls a driver function and checks its result.
macro_rules! ok {
    ($e:expr) => {{
        // SAFETY: each call passes valid out-pointers and live handles.
        let r = unsafe { $e };
        assert_eq!(r, SUCCESS, "{}", stringify!($e));
    }};
}

/// A driver call's result.
macro_rules! call {
    ($e:expr) => {{
        // SAFETY: as in `ok!`.
        unsafe { $e }
    }};
}

/// The primary context of `dev`, made current.
fn bind(dev: c_int) -> Handle {
    let mut ctx = 0;
    ok!(cuDevicePrimaryCtxRetain(&mut ctx, dev));
    ok!(cuCtxSetCurrent(ctx));
    ctx
}

/// The `store` function of a module loaded in the current context.
fn store_fn() -> Handle {
    let (mut m, mut f) = (0, 0);
    ok!(cuModuleLoadData(&mut m, PTX.as_ptr().cast()));
    ok!(cuModuleGetFunction(&mut f, m, c"store".as_ptr()));
    f
}

/// Launches `store(p, v)` on `stream` in the current context; the
/// launch's result and then the stream's.
fn store(f: Handle, stream: Handle, p: u64, v: u32) -> (CUresult, CUresult) {
    let (mut p, mut v) = (p, v);
    let mut params = [(&raw mut p).cast::<c_void>(), (&raw mut v).cast::<c_void>()];
    let launched = call!(cuLaunchKernel(
        f,
        1,
        1,
        1,
        1,
        1,
        1,
        0,
        stream,
        params.as_mut_ptr(),
        std::ptr::null_mut()
    ));
    (launched, call!(cuStreamSynchronize(stream)))
}

fn read_u32(p: u64) -> u32 {
    let mut v = 0u32;
    ok!(cuMemcpyDtoH_v2((&raw mut v).cast(), p, 4));
    v
}

fn used() -> usize {
    let (mut free, mut total) = (0, 0);
    ok!(cuMemGetInfo_v2(&mut free, &mut total));
    total - free
}

fn devices_are_counted_and_named_apart() {
    let mut n = 0;
    ok!(cuDeviceGetCount(&mut n));
    assert_eq!(n, 3);
    let mut d = -1;
    ok!(cuDeviceGet(&mut d, 2));
    assert_eq!(d, 2);
    assert_eq!(call!(cuDeviceGet(&mut d, 3)), INVALID_DEVICE);
    let mut ids = Vec::new();
    for dev in 0..3 {
        let mut id = [0u8; 16];
        ok!(cuDeviceGetUuid(&mut id, dev));
        ids.push(id);
    }
    ids.dedup();
    assert_eq!(ids.len(), 3, "UUIDs differ");
}

fn contexts_memory_and_launches_are_per_device() {
    let c0 = bind(0);
    let f0 = store_fn();
    let (mut a0, mut s0) = (0, 0);
    ok!(cuMemAlloc_v2(&mut a0, 1 << 20));
    ok!(cuStreamCreate(&mut s0, 0));
    assert_eq!(used(), 1 << 20);
    let c1 = bind(1);
    assert_ne!(c0, c1);
    let mut dev = -1;
    ok!(cuCtxGetDevice(&mut dev));
    assert_eq!(dev, 1);
    // Device 0's allocation is not device 1's memory.
    assert_eq!(used(), 0);
    let f1 = store_fn();
    let (mut a1, mut s1) = (0, 0);
    ok!(cuMemAlloc_v2(&mut a1, 4096));
    ok!(cuStreamCreate(&mut s1, 0));
    // Device 1's kernel writes device 1's memory...
    assert_eq!(store(f1, s1, a1, 41), (SUCCESS, SUCCESS));
    assert_eq!(read_u32(a1), 41);
    // ... and mapped host memory, as device 0's does.
    let mut host: *mut c_void = std::ptr::null_mut();
    ok!(cuMemHostAlloc(&mut host, 64, 0));
    assert_eq!(store(f1, s1, host as u64, 7), (SUCCESS, SUCCESS));
    // A function of device 0's module is no function on device 1, nor is
    // device 0's stream a stream there.
    assert_eq!(store(f0, s1, a1, 1).0, INVALID_HANDLE);
    assert_eq!(store(f1, s0, a1, 1).0, INVALID_HANDLE);
    // A copy may name another device's memory (unified addressing).
    let v = 9u32;
    ok!(cuMemcpyHtoD_v2(a0, (&raw const v).cast(), 4));
    // Device 1's kernel faults on device 0's memory: device 1's error is
    // sticky, device 0 goes on.
    let (launched, synced) = store(f1, s1, a0, 5);
    assert_eq!(launched, SUCCESS);
    assert_eq!(synced, ILLEGAL_ADDRESS);
    assert_eq!(call!(cuCtxSynchronize()), ILLEGAL_ADDRESS);
    bind(0);
    assert_eq!(call!(cuCtxSynchronize()), SUCCESS);
    assert_eq!(store(f0, s0, host as u64, 8), (SUCCESS, SUCCESS));
    assert_eq!(read_u32(a0), 9, "device 1's faulting store never landed");
    // SAFETY: a mapped host allocation of 64 bytes, no launch running.
    assert_eq!(unsafe { host.cast::<u32>().read() }, 8);
    // Device 1's context goes (its memory, modules and error with it);
    // device 0's stays.
    ok!(cuDevicePrimaryCtxRelease_v2(1));
    assert_eq!(call!(cuCtxSetCurrent(c1)), INVALID_CONTEXT);
    let c1 = bind(1);
    assert_eq!(call!(cuCtxSynchronize()), SUCCESS, "the sticky error went");
    assert_eq!(used(), 0);
    assert_ne!(c1, 0);
    bind(0);
    assert_eq!(used(), 1 << 20);
    assert_eq!(read_u32(a0), 9);
}

fn main() {
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("OFFLOAD_VGPU_DEVICES", "3") };
    ok!(cuInit(0));
    devices_are_counted_and_named_apart();
    contexts_memory_and_launches_are_per_device();
    println!("devices: 2 checks passed");
}
