//! Virtual calls and class tests that find the receiver's class from the
//! page it lies on (`offload_heap::pages`): objects the host made (on pages
//! of their class) and objects a kernel made (on pages of their class too,
//! from a TLAB per kind) dispatch alike, on every CPU tier and the
//! interpreter, with dispatch by address on and off, and after a collection
//! has moved them.

use offload::{Device, Runtime};

#[path = "common/dispatch.rs"]
mod dispatch;

fn runtime(device: Device, by_address: bool, tiered: bool) -> Runtime {
    Runtime::builder()
        .device(device)
        .workers(2)
        .tiered(tiered)
        .dispatch_by_address(by_address)
        .build()
        .unwrap()
}

#[test]
fn host_and_kernel_objects_dispatch_alike_on_the_cpu() {
    for by_address in [true, false] {
        for tiered in [true, false] {
            let rt = runtime(Device::Cpu, by_address, tiered);
            let what = format!("cpu, by address {by_address}, tiered {tiered}");
            dispatch::check(&rt, 3000, &what);
        }
    }
}

#[test]
fn a_launch_allocates_on_pages_of_each_kind() {
    for tiered in [true, false] {
        let rt = runtime(Device::Cpu, true, tiered);
        dispatch::check_kinds(&rt, 3000, &format!("cpu, tiered {tiered}"));
    }
    let rt = runtime(Device::Interpreter, true, true);
    dispatch::check_kinds(&rt, 3000, "interpreter");
}

#[test]
fn host_and_kernel_objects_dispatch_alike_on_the_interpreter() {
    dispatch::check(
        &runtime(Device::Interpreter, true, true),
        3000,
        "interpreter",
    );
}
