// Splits a row range into fixed chunks of `grain` rows for the thread pool. The chunking only
// decides who computes a row, never how, so results do not depend on it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.h"

namespace dsv4::cpu {

template <typename Fn>
void parallel_rows(ThreadPool& pool, int64_t rows, int64_t grain, Fn&& fn) {
  const int64_t chunks = (rows + grain - 1) / grain;
  pool.parallel_for(chunks, [&](int64_t c) { fn(c * grain, std::min(rows, (c + 1) * grain)); });
}

}  // namespace dsv4::cpu
