// Codes a kernel writes into the backend's fault word when it finds bad input that only the
// device can see (an id out of range): fault[0] = the code (the first fault wins), fault[1] = the
// offending value. The host reads them at its next synchronisation and throws.
#pragma once

#include <cstdint>

namespace dsv4::kernels {

enum FaultCode : int32_t {
  kFaultNone = 0,
  kFaultExpertId = 1,  // moe: a routed expert id outside the layer's experts
  kFaultTokenId = 2,   // embed: a token id outside the vocabulary
};

}  // namespace dsv4::kernels
