//! The tooling behind `offload bench`: what it needs of a runtime.

use offload::{Device, Runtime};

#[test]
fn the_cuda_c_baselines_need_the_cuda_device() {
    let rt = Runtime::builder().device(Device::Cpu).build().unwrap();
    let e = offload_cli::tools::cuda_c::CudaC::for_runtime(&rt).unwrap_err();
    assert!(e.to_string().contains("not on the CUDA device"), "{e}");
}
