//! Every other driver function cudarc 0.19 can look up: each returns
//! `CUDA_ERROR_NOT_SUPPORTED`, so a call the virtual GPU does not model is
//! an error the caller sees, never a missing symbol (cudarc panics on
//! those) or a crash. The stubs take no parameters: under the C calling
//! convention the caller's arguments are simply not read.
//!
//! The list is cudarc's `driver::sys` function names (CUDA 12.9 bindings)
//! less the ones implemented in this crate; a test checks that it still
//! covers cudarc's list.

use crate::err::{CUresult, NOT_SUPPORTED};

macro_rules! not_supported {
    ($($name:ident)*) => {
        $(
            #[unsafe(no_mangle)]
            extern "C" fn $name() -> CUresult {
                NOT_SUPPORTED
            }
        )*
        /// The names of the stubs.
        #[cfg(test)]
        pub(crate) const NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

not_supported! {
    cuArray3DCreate_v2 cuArray3DGetDescriptor_v2 cuArrayCreate_v2 cuArrayDestroy
    cuArrayGetDescriptor_v2 cuArrayGetMemoryRequirements cuArrayGetPlane
    cuArrayGetSparseProperties cuCoredumpDeregisterCompleteCallback
    cuCoredumpDeregisterStartCallback cuCoredumpGetAttribute cuCoredumpGetAttributeGlobal
    cuCoredumpRegisterCompleteCallback cuCoredumpRegisterStartCallback cuCoredumpSetAttribute
    cuCoredumpSetAttributeGlobal cuCtxAttach cuCtxCreate_v2 cuCtxCreate_v3 cuCtxCreate_v4
    cuCtxDestroy_v2 cuCtxDetach cuCtxDisablePeerAccess cuCtxEnablePeerAccess cuCtxFromGreenCtx
    cuCtxGetApiVersion cuCtxGetCacheConfig cuCtxGetDevResource cuCtxGetDevice_v2
    cuCtxGetExecAffinity cuCtxGetId cuCtxGetLimit cuCtxGetSharedMemConfig cuCtxRecordEvent
    cuCtxResetPersistingL2Cache cuCtxSetCacheConfig cuCtxSetFlags cuCtxSetLimit
    cuCtxSetSharedMemConfig cuCtxSynchronize_v2 cuCtxWaitEvent cuDestroyExternalMemory
    cuDestroyExternalSemaphore cuDevResourceGenerateDesc cuDevSmResourceSplit
    cuDevSmResourceSplitByCount cuDeviceCanAccessPeer cuDeviceComputeCapability
    cuDeviceGetByPCIBusId cuDeviceGetCliqueCount cuDeviceGetCliqueInfo cuDeviceGetDefaultMemPool
    cuDeviceGetDevResource cuDeviceGetExecAffinitySupport cuDeviceGetFabricClusterUuid
    cuDeviceGetGraphMemAttribute cuDeviceGetHostAtomicCapabilities cuDeviceGetLuid
    cuDeviceGetMemPool cuDeviceGetP2PAtomicCapabilities cuDeviceGetP2PAttribute
    cuDeviceGetPCIBusId cuDeviceGetProperties cuDeviceGetTexture1DLinearMaxWidth
    cuDeviceGraphMemTrim cuDevicePrimaryCtxReset_v2 cuDeviceRegisterAsyncNotification
    cuDeviceSetGraphMemAttribute cuDeviceSetMemPool cuDeviceUnregisterAsyncNotification
    cuEventElapsedTime cuEventElapsedTime_v2 cuExternalMemoryGetMappedBuffer
    cuExternalMemoryGetMappedMipmappedArray cuFlushGPUDirectRDMAWrites cuFuncGetModule
    cuFuncGetName cuFuncGetParamCount cuFuncGetParamInfo cuFuncIsLoaded cuFuncLoad
    cuFuncSetBlockShape cuFuncSetSharedMemConfig cuFuncSetSharedSize cuGetExportTable
    cuGetProcAddress cuGetProcAddress_v2 cuGraphAddBatchMemOpNode cuGraphAddChildGraphNode
    cuGraphAddDependencies cuGraphAddDependencies_v2 cuGraphAddEmptyNode
    cuGraphAddEventRecordNode cuGraphAddEventWaitNode cuGraphAddExternalSemaphoresSignalNode
    cuGraphAddExternalSemaphoresWaitNode cuGraphAddHostNode cuGraphAddKernelNode
    cuGraphAddKernelNode_v2 cuGraphAddMemAllocNode cuGraphAddMemFreeNode cuGraphAddMemcpyNode
    cuGraphAddMemsetNode cuGraphAddNode cuGraphAddNode_v2 cuGraphAddNode_v3
    cuGraphBatchMemOpNodeGetParams cuGraphBatchMemOpNodeSetParams cuGraphChildGraphNodeGetGraph
    cuGraphClone cuGraphConditionalHandleCreate cuGraphCreate cuGraphDebugDotPrint
    cuGraphDestroy cuGraphDestroyNode cuGraphEventRecordNodeGetEvent
    cuGraphEventRecordNodeSetEvent cuGraphEventWaitNodeGetEvent cuGraphEventWaitNodeSetEvent
    cuGraphExecBatchMemOpNodeSetParams cuGraphExecChildGraphNodeSetParams cuGraphExecDestroy
    cuGraphExecEventRecordNodeSetEvent cuGraphExecEventWaitNodeSetEvent
    cuGraphExecExternalSemaphoresSignalNodeSetParams
    cuGraphExecExternalSemaphoresWaitNodeSetParams cuGraphExecGetFlags cuGraphExecGetId
    cuGraphExecHostNodeSetParams cuGraphExecKernelNodeSetParams
    cuGraphExecKernelNodeSetParams_v2 cuGraphExecMemcpyNodeSetParams
    cuGraphExecMemsetNodeSetParams cuGraphExecNodeSetParams cuGraphExecUpdate
    cuGraphExecUpdate_v2 cuGraphExternalSemaphoresSignalNodeGetParams
    cuGraphExternalSemaphoresSignalNodeSetParams cuGraphExternalSemaphoresWaitNodeGetParams
    cuGraphExternalSemaphoresWaitNodeSetParams cuGraphGetEdges cuGraphGetEdges_v2 cuGraphGetId
    cuGraphGetNodes cuGraphGetRootNodes cuGraphHostNodeGetParams cuGraphHostNodeSetParams
    cuGraphInstantiateWithFlags cuGraphInstantiateWithParams cuGraphInstantiate_v2
    cuGraphKernelNodeCopyAttributes cuGraphKernelNodeGetAttribute cuGraphKernelNodeGetParams
    cuGraphKernelNodeGetParams_v2 cuGraphKernelNodeSetAttribute cuGraphKernelNodeSetParams
    cuGraphKernelNodeSetParams_v2 cuGraphLaunch cuGraphMemAllocNodeGetParams
    cuGraphMemFreeNodeGetParams cuGraphMemcpyNodeGetParams cuGraphMemcpyNodeSetParams
    cuGraphMemsetNodeGetParams cuGraphMemsetNodeSetParams cuGraphNodeFindInClone
    cuGraphNodeGetContainingGraph cuGraphNodeGetDependencies cuGraphNodeGetDependencies_v2
    cuGraphNodeGetDependentNodes cuGraphNodeGetDependentNodes_v2 cuGraphNodeGetEnabled
    cuGraphNodeGetLocalId cuGraphNodeGetParams cuGraphNodeGetToolsId cuGraphNodeGetType
    cuGraphNodeSetEnabled cuGraphNodeSetParams cuGraphNodeSetParams_v2 cuGraphReleaseUserObject
    cuGraphRemoveDependencies cuGraphRemoveDependencies_v2 cuGraphRetainUserObject cuGraphUpload
    cuGraphicsMapResources cuGraphicsResourceGetMappedMipmappedArray
    cuGraphicsResourceGetMappedPointer_v2 cuGraphicsResourceSetMapFlags_v2
    cuGraphicsSubResourceGetMappedArray cuGraphicsUnmapResources cuGraphicsUnregisterResource
    cuGreenCtxCreate cuGreenCtxDestroy cuGreenCtxGetDevResource cuGreenCtxGetId
    cuGreenCtxRecordEvent cuGreenCtxStreamCreate cuGreenCtxWaitEvent cuImportExternalMemory
    cuImportExternalSemaphore cuIpcCloseMemHandle cuIpcGetEventHandle cuIpcGetMemHandle
    cuIpcOpenEventHandle cuIpcOpenMemHandle_v2 cuKernelGetAttribute cuKernelGetFunction
    cuKernelGetLibrary cuKernelGetName cuKernelGetParamCount cuKernelGetParamInfo
    cuKernelSetAttribute cuKernelSetCacheConfig cuLaunch cuLaunchCooperativeKernel
    cuLaunchCooperativeKernelMultiDevice cuLaunchGrid cuLaunchGridAsync cuLaunchHostFunc
    cuLaunchHostFunc_v2 cuLaunchKernelEx cuLibraryEnumerateKernels cuLibraryGetGlobal
    cuLibraryGetKernel cuLibraryGetKernelCount cuLibraryGetManaged cuLibraryGetModule
    cuLibraryGetUnifiedFunction cuLibraryLoadData cuLibraryLoadFromFile cuLibraryUnload
    cuLinkAddData_v2 cuLinkAddFile_v2 cuLinkComplete cuLinkCreate_v2 cuLinkDestroy
    cuLogicalEndpointAddDevice cuLogicalEndpointBindAddr cuLogicalEndpointBindMem
    cuLogicalEndpointCreate cuLogicalEndpointDestroy cuLogicalEndpointExport
    cuLogicalEndpointGetLimits cuLogicalEndpointIdRelease cuLogicalEndpointIdReserve
    cuLogicalEndpointImport cuLogicalEndpointQuery cuLogicalEndpointUnbind cuLogsCurrent
    cuLogsDumpToFile cuLogsDumpToMemory cuLogsRegisterCallback cuLogsUnregisterCallback
    cuMemAddressFree cuMemAddressReserve cuMemAdvise cuMemAdvise_v2 cuMemAllocFromPoolAsync
    cuMemAllocManaged cuMemAllocPitch_v2 cuMemBatchDecompressAsync cuMemCreate
    cuMemDiscardAndPrefetchBatchAsync cuMemDiscardBatchAsync cuMemExportToShareableHandle
    cuMemGetAccess cuMemGetAddressRange_v2 cuMemGetAllocationGranularity
    cuMemGetAllocationPropertiesFromHandle cuMemGetDefaultMemPool cuMemGetHandleForAddressRange
    cuMemGetLocationInfo cuMemGetMemPool cuMemHostGetFlags cuMemHostRegister_v2
    cuMemHostUnregister cuMemImportFromShareableHandle cuMemMap cuMemMapArrayAsync
    cuMemPoolCreate cuMemPoolDestroy cuMemPoolExportPointer cuMemPoolExportToShareableHandle
    cuMemPoolGetAccess cuMemPoolGetAttribute cuMemPoolImportFromShareableHandle
    cuMemPoolImportPointer cuMemPoolSetAccess cuMemPoolSetAttribute cuMemPoolTrimTo
    cuMemPrefetchAsync cuMemPrefetchAsync_v2 cuMemPrefetchBatchAsync cuMemRangeGetAttribute
    cuMemRangeGetAttributes cuMemRelease cuMemRetainAllocationHandle cuMemSetAccess
    cuMemSetMemPool cuMemUnmap cuMemcpy cuMemcpy2DAsync_v2 cuMemcpy2DUnaligned_v2 cuMemcpy2D_v2
    cuMemcpy3DAsync_v2 cuMemcpy3DBatchAsync cuMemcpy3DBatchAsync_v2 cuMemcpy3DPeer
    cuMemcpy3DPeerAsync cuMemcpy3DWithAttributesAsync cuMemcpy3D_v2 cuMemcpyAsync
    cuMemcpyAtoA_v2 cuMemcpyAtoD_v2 cuMemcpyAtoHAsync_v2 cuMemcpyAtoH_v2 cuMemcpyBatchAsync
    cuMemcpyBatchAsync_v2 cuMemcpyDtoA_v2 cuMemcpyHtoAAsync_v2 cuMemcpyHtoA_v2 cuMemcpyPeer
    cuMemcpyPeerAsync cuMemcpyWithAttributesAsync cuMemsetD16Async cuMemsetD16_v2
    cuMemsetD2D16Async cuMemsetD2D16_v2 cuMemsetD2D32Async cuMemsetD2D32_v2 cuMemsetD2D8Async
    cuMemsetD2D8_v2 cuMipmappedArrayCreate cuMipmappedArrayDestroy cuMipmappedArrayGetLevel
    cuMipmappedArrayGetMemoryRequirements cuMipmappedArrayGetSparseProperties
    cuModuleEnumerateFunctions cuModuleGetFunctionCount cuModuleGetLoadingMode
    cuModuleGetSurfRef cuModuleGetTexRef cuModuleLoad cuModuleLoadFatBinary cuMulticastAddDevice
    cuMulticastBindAddr cuMulticastBindAddr_v2 cuMulticastBindMem cuMulticastBindMem_v2
    cuMulticastCreate cuMulticastGetGranularity cuMulticastUnbind
    cuOccupancyAvailableDynamicSMemPerBlock cuOccupancyMaxActiveClusters
    cuOccupancyMaxPotentialBlockSize cuOccupancyMaxPotentialBlockSizeWithFlags
    cuOccupancyMaxPotentialClusterSize cuParamSetSize cuParamSetTexRef cuParamSetf cuParamSeti
    cuParamSetv cuPointerGetAttribute cuPointerGetAttributes cuPointerSetAttribute
    cuProfilerInitialize cuProfilerStart cuProfilerStop cuSignalExternalSemaphoresAsync
    cuStreamAddCallback cuStreamAttachMemAsync cuStreamBatchMemOp cuStreamBatchMemOp_v2
    cuStreamBeginCaptureToCig cuStreamBeginCaptureToGraph cuStreamBeginCapture_v2
    cuStreamBeginRecaptureToGraph cuStreamCopyAttributes cuStreamEndCapture
    cuStreamEndCaptureToCig cuStreamGetAttribute cuStreamGetCaptureInfo
    cuStreamGetCaptureInfo_v2 cuStreamGetCaptureInfo_v3 cuStreamGetCtx cuStreamGetCtx_v2
    cuStreamGetDevResource cuStreamGetDevice cuStreamGetFlags cuStreamGetGreenCtx cuStreamGetId
    cuStreamGetPriority cuStreamIsCapturing cuStreamSetAttribute
    cuStreamUpdateCaptureDependencies cuStreamUpdateCaptureDependencies_v2 cuStreamWaitValue32
    cuStreamWaitValue32_v2 cuStreamWaitValue64 cuStreamWaitValue64_v2 cuStreamWriteValue32
    cuStreamWriteValue32_v2 cuStreamWriteValue64 cuStreamWriteValue64_v2 cuSurfObjectCreate
    cuSurfObjectDestroy cuSurfObjectGetResourceDesc cuSurfRefGetArray cuSurfRefSetArray
    cuTensorMapEncodeIm2col cuTensorMapEncodeIm2colWide cuTensorMapEncodeTiled
    cuTensorMapReplaceAddress cuTexObjectCreate cuTexObjectDestroy cuTexObjectGetResourceDesc
    cuTexObjectGetResourceViewDesc cuTexObjectGetTextureDesc cuTexRefCreate cuTexRefDestroy
    cuTexRefGetAddressMode cuTexRefGetAddress_v2 cuTexRefGetArray cuTexRefGetBorderColor
    cuTexRefGetFilterMode cuTexRefGetFlags cuTexRefGetFormat cuTexRefGetMaxAnisotropy
    cuTexRefGetMipmapFilterMode cuTexRefGetMipmapLevelBias cuTexRefGetMipmapLevelClamp
    cuTexRefGetMipmappedArray cuTexRefSetAddress2D_v3 cuTexRefSetAddressMode
    cuTexRefSetAddress_v2 cuTexRefSetArray cuTexRefSetBorderColor cuTexRefSetFilterMode
    cuTexRefSetFlags cuTexRefSetFormat cuTexRefSetMaxAnisotropy cuTexRefSetMipmapFilterMode
    cuTexRefSetMipmapLevelBias cuTexRefSetMipmapLevelClamp cuTexRefSetMipmappedArray
    cuThreadExchangeStreamCaptureMode cuUserObjectCreate cuUserObjectRelease cuUserObjectRetain
    cuWaitExternalSemaphoresAsync culib
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stubs_are_distinct_and_refuse() {
        let mut names = NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NAMES.len(), "a stub is listed twice");
        assert!(NAMES.iter().all(|n| n.starts_with("cu")));
        assert_eq!(cuGraphCreate(), NOT_SUPPORTED);
        assert_eq!(cuCtxSetLimit(), NOT_SUPPORTED);
    }
}
