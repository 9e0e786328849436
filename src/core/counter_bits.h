// The counter-based random bits behind make-model's synthetic weights (loader/CounterRng) and the
// dummy weights made on a device (core/dummy_random.h): the bits at a counter depend only on
// (seed, tensor name, counter), and host and device compute them identically.
//   key       = mix(seed ^ mix(fnv1a64(name)))
//   bits(k)   = mix(key + (k + 1) * 0x9E3779B97F4A7C15)   (splitmix64's step and finaliser "mix")
#pragma once

#include <cstdint>
#include <string_view>

#include "core/numeric.h"

namespace dsv4 {

// splitmix64's output function (Steele, Lea, Flood 2014).
DSV4_HD uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The key of the stream of tensor `name` under `seed`.
inline uint64_t counter_key(uint64_t seed, std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return splitmix64_mix(seed ^ splitmix64_mix(h));
}

// 64 random bits at `counter` of the stream `key`.
DSV4_HD uint64_t counter_bits(uint64_t key, uint64_t counter) {
  return splitmix64_mix(key + (counter + 1) * 0x9E3779B97F4A7C15ull);  // splitmix64's increment
}

}  // namespace dsv4
