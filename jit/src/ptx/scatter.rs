//! The scatter kernel: a helper the CUDA device launches beside the
//! kernels it compiles. Thread `i` of `n` stores the 64-bit word
//! `list[2i + 1]` at byte `list[2i]` of the heap image: after a launch,
//! the filler headers over the unused rest of each TLAB go where the
//! objects are, into the image on the device (the heap stays there;
//! `offload_heap::resident`).

use super::{PTX_TARGET, PTX_VERSION};

/// The scatter kernel's entry name.
pub const SCATTER_ENTRY: &str = "offload_scatter";

/// The scatter kernel's PTX module: `(u64 image, u64 list, u32 n)`.
pub fn scatter_kernel() -> String {
    format!(
        "\
.version {PTX_VERSION}
.target {PTX_TARGET}
.address_size 64
.visible .entry {SCATTER_ENTRY}(.param .u64 p_heap, .param .u64 p_list, .param .u32 p_n)
{{
    .reg .b64 %rd<6>;
    .reg .b32 %r<6>;
    .reg .pred %p;
    ld.param.u64 %rd1, [p_heap];
    ld.param.u64 %rd2, [p_list];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra $done;
    mul.wide.u32 %rd3, %r5, 16;
    add.u64 %rd3, %rd2, %rd3;
    ld.global.u64 %rd4, [%rd3];
    ld.global.u64 %rd5, [%rd3+8];
    add.u64 %rd4, %rd4, %rd1;
    st.global.u64 [%rd4], %rd5;
$done:
    ret;
}}
"
    )
}
