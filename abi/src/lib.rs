//! `offload-abi`: the contract between offload's runtime and the code its
//! backends generate, defined once.
//!
//! Compiled code (Cranelift's for the CPU, PTX for the GPU) and the runtime
//! that launches it share memory whose layout both must agree on: the launch
//! context a slot receives, the words a slot leaves for the host between
//! entries, the exit codes a slot returns, the bits of the control word, the
//! place of a slot's save records in the save area, and the words of a
//! shared TLAB. Each is defined here once, as a `#[repr(C)]` type with its
//! field offsets derived by `offset_of!` or as a named constant, and every
//! emitter and the runtime read them from here:
//!
//! - [`control`]: the control word's bits;
//! - [`exit`]: a slot's exit codes;
//! - [`cpu`]: the CPU's launch context ([`cpu::LaunchCtx`]), slot words
//!   ([`cpu::SlotWords`]), range parts ([`cpu::Part`]) and their offsets;
//! - [`gpu`]: the GPU's launch context ([`gpu::DeviceCtx`]) and its offsets;
//! - [`pages`]: the page size and tags by which compiled code finds an
//!   object's class from its reference;
//! - [`record`]: which save record a slot writes (one formula, spelled by
//!   the host and by each emitter through [`record::Arith`]);
//! - [`reduce`]: the one tree in which a reduction combines its
//!   workitems' values, whatever device and partition computed them;
//! - [`tlab`]: a shared TLAB's words and the bit layout of its state and
//!   generation.
//!
//! ```
//! use offload_abi::{cpu, record, tlab};
//!
//! // Slot 3 of a launch with 4 records per slot writes its second record
//! // (n = 1) at index 13 of the save area.
//! assert_eq!(record::index(&mut record::Host, 3, 4, |_| 1), 13);
//! // Code generators read field offsets from here.
//! assert_eq!(cpu::offsets::HEAP_BASE, 0);
//! // A TLAB's state packs its top and end (heap words) in one word.
//! assert_eq!(tlab::unpack(tlab::pack(5, 9)), (5, 9));
//! ```

#![deny(missing_docs)]

pub mod control;
pub mod cpu;
pub mod exit;
pub mod gpu;
pub mod pages;
pub mod record;
pub mod reduce;
pub mod tlab;
