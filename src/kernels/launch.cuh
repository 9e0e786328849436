// Kernel launches with programmatic dependent launch (PDL, Hopper): a kernel launched this way
// may be scheduled while the kernel before it on the stream is still finishing, so in a decode
// step of thousands of small kernels (a CUDA graph) the launch latency of one hides behind the
// tail of the other. The dependent kernel must not touch memory before the grids it depends on
// are done: every kernel of ours begins with pdl_wait(), which waits for them (and is a no-op for
// a kernel launched without PDL), then lets the next kernel be scheduled.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda_check.h"

namespace dsv4::kernels {

// The first statement of every kernel: wait for the grids this one depends on (their writes are
// then visible), then allow the kernel after this one to be scheduled.
__device__ __forceinline__ void pdl_wait() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute, in thread block clusters
// of cluster_x blocks along x where cluster_x > 1 (grid.x a multiple of it); checks the launch.
template <typename... Params, typename... Args>
void launch_pdl_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster_x;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster_x > 1 ? 2 : 1;
  DSV4_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute; checks the launch.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  launch_pdl_clustered(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace dsv4::kernels
