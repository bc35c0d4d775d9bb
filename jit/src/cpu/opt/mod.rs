//! The CPU backend's optimizations: analyses over a kernel's bytecode that
//! let the CPU lowering ([`crate::cpu`]) leave checks out where they cannot
//! fail and run several workitems per control-word check. None of them
//! changes what a kernel computes or where it deopts, and none changes the
//! deopt metadata: a check left out is one that cannot fail.
//!
//! - [`indexed`]: array accesses indexed by the workitem number into
//!   arrays the kernel never reassigns, which a chunk inside every such
//!   array runs without bounds checks.
//! - [`loops`]: loop predication (after C2's): innermost counted loops
//!   whose accesses are checked once where the loop is entered.
//! - [`vector`]: unrolling small straight-line kernels and running them
//!   as SIMD bodies, a lane per workitem.
//! - [`lockstep`]: kernels with loops whose branches are the same for
//!   every workitem, run as SIMD bodies too, like a GPU warp.

pub(crate) mod indexed;
pub(crate) mod lane_call;
pub(crate) mod lanes;
pub(crate) mod lockstep;
pub(crate) mod loops;
pub(crate) mod vector;

pub(crate) use indexed::{workitem_indexed, workitem_tests};
pub(crate) use lockstep::{LKind, Lockstep, lockstep};
pub(crate) use loops::{Inv, PredicatedLoop, loop_predicates, loop_unroll};
pub(crate) use vector::{UNROLL, VECTORS_PER_GROUP, unroll_factor, vectorizable};

/// The instructions both operand walks ([`workitem_indexed`] and
/// [`loop_predicates`]) treat alike: `dup`, `pop` and `swap` move what is
/// known of the entries; an array load or store hands the stack to `access`
/// with its array and index on top (a stored value already popped), which
/// pops them, and a load then pushes `other`. Returns false, touching
/// nothing, for any other instruction.
fn shared_step<T: Clone>(
    stack: &mut Vec<T>,
    inst: offload_ir::Inst,
    other: T,
    access: impl FnOnce(&mut Vec<T>),
) -> bool {
    use offload_ir::Inst;
    match inst {
        Inst::Dup => {
            let s = stack.last().cloned().unwrap_or(other);
            stack.push(s);
        }
        Inst::Pop => {
            stack.pop();
        }
        Inst::Swap => {
            let n = stack.len();
            if n >= 2 {
                stack.swap(n - 1, n - 2);
            }
        }
        Inst::I32ALoad | Inst::I64ALoad | Inst::F32ALoad | Inst::F64ALoad | Inst::RefALoad => {
            access(stack);
            stack.push(other);
        }
        Inst::I32AStore | Inst::I64AStore | Inst::F32AStore | Inst::F64AStore | Inst::RefAStore => {
            stack.pop();
            access(stack);
        }
        _ => return false,
    }
    true
}

/// `dup`, `pop` and `swap` on the abstract operand stack of the SIMD
/// analyses ([`vectorizable`], [`lockstep`]), which reject a kernel whose
/// stack is short: `Some(true)` done, `Some(false)` too few entries, `None`
/// for any other instruction (nothing touched).
pub(crate) fn shuffle<T: Copy>(stack: &mut Vec<T>, inst: offload_ir::Inst) -> Option<bool> {
    use offload_ir::Inst;
    let n = stack.len();
    Some(match inst {
        Inst::Dup if n >= 1 => {
            stack.push(stack[n - 1]);
            true
        }
        Inst::Pop if n >= 1 => {
            stack.pop();
            true
        }
        Inst::Swap if n >= 2 => {
            stack.swap(n - 1, n - 2);
            true
        }
        Inst::Dup | Inst::Pop | Inst::Swap => false,
        _ => return None,
    })
}

/// How many operand-stack entries below the top an instruction leaves as
/// they were, going from `depth` entries to `after`: all but its operands
/// (by its opcode's effect), or where that depends on the instruction (a
/// call), those below both depths and one more.
fn kept_below(inst: offload_ir::Inst, depth: usize, after: usize) -> usize {
    match inst.opcode().effect() {
        offload_ir::Effect::Fixed { pops, .. } => depth.saturating_sub(pops.len()),
        offload_ir::Effect::Special(_) => depth.min(after).saturating_sub(1),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    /// The text of example kernel `name`.
    pub(crate) fn example(name: &str) -> String {
        std::fs::read_to_string(format!(
            "{}/../examples/kernels/{name}",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap()
    }
}
