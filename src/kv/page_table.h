// Where a paged cache keeps entry j (ops.h PagedCache, model/cache_pool.h): row j % page_rows of
// page table[j / page_rows] of its pool. One function for host and device code, so the CPU
// reference and every kernel agree on which entries exist and where.
#pragma once

#include <cstdint>

#include "core/numeric.h"

namespace dsv4 {

// A sequence's block table into a pool of num_pages pages of page_rows rows, as kernels and the
// CPU backend read it.
struct PageTable {
  const int32_t* pages = nullptr;  // [size] page ids (backend memory); -1: a page not given yet
  int64_t size = 0;
  int64_t page_rows = 0;
  int64_t num_pages = 0;
};

// The pool row (page * page_rows + row within the page) holding entry j, or -1 where the entry
// has no row: j < 0, its page past the table, a -1 page, or a page id outside the pool. Nothing
// outside the table is read, so a short table or padded rows never read out of bounds.
// Entries and page sizes below 2^32 (all of them in practice) take 32-bit unsigned division, a
// few instructions where a 64-bit one is a call of dozens on the GPU: the kernels look an entry
// up for every row they copy (the indexer's score kernel 9 times a key, docs/PERF.md session 40).
DSV4_HD int64_t pool_row(const PageTable& t, int64_t j) {
  if (j < 0 || t.page_rows <= 0) return -1;
  int64_t index, row;
  if (j <= UINT32_MAX && t.page_rows <= UINT32_MAX) {
    const auto j32 = static_cast<uint32_t>(j), rows32 = static_cast<uint32_t>(t.page_rows);
    index = j32 / rows32;
    row = j32 - static_cast<uint32_t>(index) * rows32;
  } else {
    index = j / t.page_rows;
    row = j % t.page_rows;
  }
  if (index >= t.size) return -1;
  const int64_t page = t.pages[index];
  if (page < 0 || page >= t.num_pages) return -1;
  return page * t.page_rows + row;
}

}  // namespace dsv4
