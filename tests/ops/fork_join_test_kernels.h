// Small single-thread kernels for the ForkJoin tests: a slow write (to tell whether later work
// waited for it), an add, a flag that one stream sets and another waits for (to see whether two
// streams really run at once).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::testing {

// Busy-waits about `cycles` clock cycles, then *out = value.
void slow_write(int* out, int value, int64_t cycles, cudaStream_t stream);

// *out = *a + *b + add (b may be nullptr: 0).
void add_ints(const int* a, const int* b, int add, int* out, cudaStream_t stream);

// *flag = 1 (a volatile store, seen by a kernel spinning on another stream).
void set_flag(int* flag, cudaStream_t stream);

// Spins until *flag != 0 or about `max_cycles` cycles have passed; *saw = 1 if the flag was seen.
void wait_for_flag(const int* flag, int* saw, int64_t max_cycles, cudaStream_t stream);

}  // namespace dsv4::testing
