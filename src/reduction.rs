//! The launch side of reductions shared by every device: a kernel's value
//! type, and the join of the combine tree's nodes into a launch's
//! [`Reduction`] (`offload_abi::reduce`; the API is `runtime/reduce.rs`).

use crate::error::OffloadError;
use crate::report::Reduction;
use offload_abi::reduce::{Combine, Scalar};

/// The [`Scalar`] of a bytecode type, if it is a number.
pub(crate) fn scalar_of(t: offload_ir::Type) -> Option<Scalar> {
    match t {
        offload_ir::Type::I32 => Some(Scalar::I32),
        offload_ir::Type::I64 => Some(Scalar::I64),
        offload_ir::Type::F32 => Some(Scalar::F32),
        offload_ir::Type::F64 => Some(Scalar::F64),
        _ => None,
    }
}

/// The [`Reduction`] of a launch of `len` workitems that all ran, from the
/// complete nodes its executors handed on (in any order); an error if they
/// do not tile the range once (a runtime bug, reported rather than
/// returned as a wrong value).
pub(crate) fn joined(
    (ty, combine): (Scalar, Combine),
    len: u64,
    nodes: Vec<offload_abi::reduce::Node>,
) -> Result<Reduction, OffloadError> {
    let joined = nodes.len() as u64;
    let bits = offload_abi::reduce::join(len, ty, combine, nodes)
        .map_err(|why| OffloadError::Setup(format!("a reduction's values: {why}")))?;
    Ok(Reduction {
        combine,
        ty,
        bits,
        joined,
    })
}
