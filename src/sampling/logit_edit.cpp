// apply_logit_edits: logit_edit.h's edits on the host. Compiled with -ffp-contract=off
// (CMakeLists.txt): edited_logit's multiply and subtract must not be fused, as on the device.
#include "sampling/logit_edit.h"

namespace dsv4 {

void apply_logit_edits(float* x, int64_t cols, const LogitEdit* edits, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float& v = x[static_cast<int64_t>(edits[i].row) * cols + edits[i].id];
    v = edited_logit(v, edits[i]);
  }
}

}  // namespace dsv4
