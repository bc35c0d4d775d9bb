//! The virtual-dispatch workloads (`examples/kernels/raycast.ofk`,
//! `particles.ofk`) against their native Rust references (trait objects),
//! bit for bit, on every CPU tier and the interpreter, with dispatch by
//! address on and off.

use offload::{Device, Runtime};
use offload_testkit::scenes;

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
fn the_ray_caster_sees_what_rust_sees() {
    let specs = scenes::scene(300, 7);
    for (device, by_address, tiered) in [
        (Device::Cpu, true, true),
        (Device::Cpu, true, false),
        (Device::Cpu, false, false),
        (Device::Interpreter, true, true),
    ] {
        let rt = runtime(device, by_address, tiered);
        let (w, h) = if device == Device::Interpreter {
            (12, 10)
        } else {
            (48, 40)
        };
        let rep = scenes::check_raycast(&rt, w, h, &specs)
            .unwrap_or_else(|e| panic!("{device:?}, by address {by_address}: {e}"));
        assert_eq!(rep.completed, (w * h) as u64, "{rep}");
    }
}

#[test]
fn particles_move_as_rust_moves_them() {
    let specs = scenes::population(5000, 11);
    for (device, by_address, tiered) in [
        (Device::Cpu, true, true),
        (Device::Cpu, true, false),
        (Device::Cpu, false, false),
        (Device::Interpreter, true, true),
    ] {
        let rt = runtime(device, by_address, tiered);
        let rep = scenes::check_particles(&rt, &specs, 20, 0.01)
            .unwrap_or_else(|e| panic!("{device:?}, by address {by_address}: {e}"));
        assert_eq!(rep.completed, 5000, "{rep}");
        // Each class's particles on pages of their own.
        let st = rt.heap().page_stats().unwrap();
        let classes = st
            .kinds
            .iter()
            .filter(|k| offload_abi::pages::names_class(k.tag))
            .count();
        assert_eq!(classes, 6, "{st:?}");
    }
}
