"""Named constants and API-name lists phaseprof's analysis relies on, in one place."""

from __future__ import annotations

SCHEMA_VERSION = "1.5"  # 1.1: optional "sol" section; 1.2: optional "verdicts" section; 1.3: sol routing, beats_floor, moe_layers; 1.4: module-view bucket "mlp" (dense feed-forward); 1.5: tool.reader (native | python)

#: Host API calls that put work on a GPU queue (kernel, graph, copy and set launches).
LAUNCH_APIS: frozenset[str] = frozenset({
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchKernelEx", "cuLaunchKernel", "cuLaunchKernelEx",
    "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cuGraphLaunch", "cudaMemcpyAsync", "cudaMemsetAsync",
    "cudaMemcpy", "cudaMemset", "cudaMemcpy2DAsync", "cuMemcpyAsync", "cuMemsetD8Async", "cuMemsetD32Async",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
    "hipGraphLaunch", "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpy", "hipMemset", "hipMemcpyWithStream",
    "hipLaunchCooperativeKernel",
})

#: Launch APIs that run a whole captured graph (replay) rather than one kernel.
GRAPH_LAUNCH_APIS: frozenset[str] = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})

#: Real device-memory allocations and frees (what the CUDA caching allocator avoids). Note that
#: ``torch.empty`` on a warm caching allocator makes an allocator event, not one of these calls.
DEVICE_MALLOC_APIS: frozenset[str] = frozenset({
    "cudaMalloc", "cudaMallocAsync", "cudaMallocManaged", "cudaMallocHost", "cudaHostAlloc",
    "cuMemAlloc", "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemCreate", "cuMemAllocHost", "cuMemAllocHost_v2",
    "hipMalloc", "hipMallocAsync", "hipHostMalloc", "hipExtMallocWithFlags", "hipMallocManaged",
})
DEVICE_FREE_APIS: frozenset[str] = frozenset({
    "cudaFree", "cudaFreeAsync", "cudaFreeHost", "cuMemFree", "cuMemFree_v2", "cuMemFreeAsync", "cuMemRelease",
    "hipFree", "hipFreeAsync", "hipHostFree",
})

#: Host calls that block until the GPU catches up.
SYNC_APIS: frozenset[str] = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuStreamSynchronize",
    "cuCtxSynchronize", "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize",
})

#: Top-kernel lists in the JSON keep this many entries per bucket.
TOP_KERNELS_PER_BUCKET = 10
#: Kernel names are shortened to this many characters in tables (JSON keeps them whole).
NAME_WIDTH = 80
#: Host time the profiler's Python stack recorder (``with_stack``) adds per Python frame it writes, low and high
#: end, in µs: measured on the committed H200 eager captures (``analysis/profiler_cost.py`` says how).
PYTHON_FRAME_COST_US: tuple[float, float] = (0.6, 1.7)
