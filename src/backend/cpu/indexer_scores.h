// The lightning indexer's scores of one token in the CPU reference's operation order, shared by
// CpuOps::indexer_topk and the GPU tests that compare the device's scores with it bit for bit.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

// score[j] = sum over h in head order of (w[h] * weight_scale) * max(q[h] . keys[j], 0), each dot
// by cpu::dot, for j < visible; a NaN sum becomes -inf (MODEL.md §5.2).
void indexer_score_row(const float* q,     // [heads, dh] the token's queries
                       const float* w,     // [heads] its head weights
                       float weight_scale,
                       const float* keys,  // [visible, dh]
                       int64_t visible, int64_t heads, int64_t dh,
                       float* score);      // [visible]

}  // namespace dsv4::cpu
