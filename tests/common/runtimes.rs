//! Runtimes the CPU device tests compare: the CPU device (tiered, or
//! optimized only) and the interpreter.

#![allow(dead_code)]

use offload::{Device, Runtime};

pub fn cpu(workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .build()
        .unwrap()
}

pub fn interpreter(workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .device(Device::Interpreter)
        .build()
        .unwrap()
}

/// A CPU runtime that compiles only the optimized tier, so a kernel's first
/// launch runs it.
pub fn optimized(workers: usize) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .tiered(false)
        .build()
        .unwrap()
}

/// [`optimized`], with deopts injected as `inj` says.
pub fn injected(workers: usize, inj: offload::jit::Injection) -> Runtime {
    Runtime::builder()
        .workers(workers)
        .device(Device::Cpu)
        .tiered(false)
        .inject(inj)
        .build()
        .unwrap()
}
