// Moving rows between token order and expert order for the routed experts: gathering each
// expert's input rows, and summing every token's expert outputs (in slot order) plus the shared
// expert's output.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/float_ptr.h"

namespace dsv4::kernels {

struct GatherRowsParams {
  const void* src = nullptr;        // [src rows, row_bytes]
  const int32_t* index = nullptr;   // [rows] source row of each output row
  void* dst = nullptr;              // [rows, row_bytes]
  int64_t rows = 0;
  int64_t row_bytes = 0;            // a multiple of 2
};

void gather_rows(const GatherRowsParams& p, cudaStream_t stream);

struct CombineExpertsParams {
  FloatPtr expert_out;              // [T*k, D] the experts' outputs in expert order
  // [T, k] row of expert_out holding (token, slot); < 0: none. Null: row t k + s (the rows in
  // token order already, Ops::moe_combine's).
  const int32_t* row_of = nullptr;
  FloatPtr shared;                  // [T, D], or null data for none
  MutFloatPtr out;                  // [T, D] = sum over slots in order, then + shared, in fp32
  int64_t tokens = 0;
  int64_t k = 0;
  int64_t dim = 0;
};

void combine_experts(const CombineExpertsParams& p, cudaStream_t stream);

}  // namespace dsv4::kernels
