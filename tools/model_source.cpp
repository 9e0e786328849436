// --model / --load-format / --dummy-seed / --dummy-share-layers and loading the model they name.
#include "tools/model_source.h"

#include <filesystem>
#include <string>

#include "config/model_config.h"
#include "config/presets.h"
#include "core/error.h"
#include "tools/progress.h"

namespace dsv4::tools {

void add_model_options(CLI::App* cmd, ModelSource& source) {
  cmd->add_option("--model", source.model,
                  "Model folder (config.json + safetensors); with --load-format dummy also a preset name "
                  "(dsv4 make-model --help lists them)")
      ->required();
  cmd->add_option_function<std::string>(
         "--load-format",
         [&source](const std::string& name) { source.format = name == "dummy" ? LoadFormat::kDummy : LoadFormat::kSafetensors; },
         "safetensors: read the checkpoint; dummy: random weights made by the backend, nothing read but the "
         "configuration (for speed runs)")
      ->check(CLI::IsMember({"safetensors", "dummy"}))
      ->default_str("safetensors");
  cmd->add_option("--dummy-seed", source.dummy_seed, "Seed of the dummy weights")->default_str("0");
  cmd->add_flag("--dummy-share-layers", source.dummy_share_layers,
                "With --load-format dummy: main layers of one kind (SWA, CSA, HCA; hash or score routed) share one "
                "set of weights, so V4-Flash fits one H200 for speed runs (each set is still far larger than L2, "
                "so every layer streams its weights from memory); the outputs are those of another model");
}

ModelConfig model_config_of(const std::string& model) {
  const std::filesystem::path dir(model);
  if (std::filesystem::is_directory(dir)) return load_model_config(dir / "config.json");
  try {
    return preset_config(model);
  } catch (const UsageError& e) {
    throw UsageError("--model " + model + " is neither a model folder nor a preset: " + e.what());
  }
}

Model load_model(Ops& ops, const ModelSource& source, const ExpertShare& share) {
  std::string what = source.format == LoadFormat::kSafetensors ? "loading weights" : "making dummy weights";
  if (!share.all()) what += " (rank " + std::to_string(share.rank) + " of " + std::to_string(share.ranks) + ")";
  ProgressLine line(what);
  const LoadProgressFn progress = [&](const LoadProgress& p) {
    line.report(p.tensors_done, p.tensors_total, p.bytes_done, p.bytes_total);
  };
  if (source.format == LoadFormat::kSafetensors) {
    if (source.dummy_share_layers) throw UsageError("--dummy-share-layers needs --load-format dummy");
    return Model::load(ops, source.model, progress, share);
  }
  return Model::dummy(ops, model_config_of(source.model), source.dummy_seed, source.dummy_share_layers, progress, share);
}

}  // namespace dsv4::tools
