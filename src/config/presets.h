// Named model geometries for `dsv4 make-model`: the small test configs of MODEL.md §13 (with the
// real vocabulary, so the DeepSeek tokenizer fits) and the full V4-Flash / V4-Pro of §1.1.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.h"

namespace dsv4 {

struct PresetInfo {
  std::string name;
  std::string description;  // one line, for --help
};

// Every preset, in the order --help lists them.
const std::vector<PresetInfo>& model_presets();

// The validated configuration of a preset; UsageError naming the known presets otherwise.
ModelConfig preset_config(std::string_view name);

}  // namespace dsv4
