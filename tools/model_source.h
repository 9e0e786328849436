// Where a command's model comes from: `--model DIR` (config.json + safetensors), or with
// `--load-format dummy` random weights of the configuration's geometry made by the backend (for
// speed and memory runs at full size, without a checkpoint).
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "ops/ops.h"

namespace dsv4::tools {

enum class LoadFormat { kSafetensors, kDummy };

struct ModelSource {
  std::string model;   // a model folder; with dummy weights also a preset name
  LoadFormat format = LoadFormat::kSafetensors;
  uint64_t dummy_seed = 0;
  bool dummy_share_layers = false;  // main layers of one kind share one set of dummy weights
};

// Adds --model (required), --load-format safetensors|dummy, --dummy-seed and
// --dummy-share-layers to `cmd`.
void add_model_options(CLI::App* cmd, ModelSource& source);

// The configuration of MODEL: MODEL/config.json when MODEL is a folder, else the preset of that name.
ModelConfig model_config_of(const std::string& model);

// The model on `ops`, with `share`'s routed experts. Dummy weights take the configuration from
// model_config_of(MODEL); the safetensors files are not read. UsageError for --dummy-share-layers
// without dummy weights.
Model load_model(Ops& ops, const ModelSource& source, const ExpertShare& share = {});

}  // namespace dsv4::tools
