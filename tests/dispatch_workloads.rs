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

#[test]
fn placing_the_workloads_objects_by_class_wastes_at_most_a_tenth_of_the_heap() {
    // The scenes `offload bench` measures (2,000 shapes of six classes;
    // 2,000 particles of six classes, the bench's smallest population):
    // what the pages' unused rests cost, before and after a collection.
    for (base, specs) in [
        ("Shape", scenes::scene(2000, 21)),
        ("Particle", scenes::population(2000, 23)),
    ] {
        let rt = runtime(Device::Cpu, true, true);
        let file = if base == "Shape" {
            "raycast.obc"
        } else {
            "particles.obc"
        };
        let m = rt
            .load(file, offload_testkit::kernels::example(file))
            .unwrap();
        let (_array, _objects) = scenes::make_objects(&m, base, &specs).unwrap();
        for when in ["placed", "collected"] {
            if when == "collected" {
                rt.collect().unwrap();
            }
            let ps = rt.heap().page_stats().unwrap();
            let used = rt.heap().used();
            assert_eq!(16 + ps.object_bytes() + ps.filler_bytes(), used);
            assert!(
                ps.filler_bytes() * 10 <= used,
                "{base}, {when}: {} of {used} bytes unused",
                ps.filler_bytes()
            );
            // Every class (six) and the arrays have pages of their own.
            assert_eq!(ps.kinds.len(), 7, "{base}, {when}: {ps:?}");
        }
    }
}
