// `dsv4 make-model`: writes a checkpoint of a preset geometry in the released DeepSeek-V4 format
// (config.json, sharded safetensors with an index, the tokenizer files) with deterministic random
// weights, for tests and benchmarks.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "config/presets.h"
#include "core/error.h"
#include "loader/synthetic_checkpoint.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace dsv4::tools {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json"};

struct MakeModelOptions {
  std::string preset;
  fs::path out;
  uint64_t seed = 0;
  bool force = false;
  fs::path tokenizer_dir = DSV4_TOKENIZER_DIR;
  bool tokenizer_given = false;
  uint64_t max_shard_mib = 0;
};

// Files an earlier make-model run writes into a folder (and so the ones --force replaces).
bool is_make_model_output(const std::string& name) {
  if (name == "config.json" || name == "config.json.partial") return true;
  if (name.starts_with("model.safetensors.index.json")) return true;
  if (name.starts_with("model-") && name.find(".safetensors") != std::string::npos) return true;
  for (const char* t : kTokenizerFiles)
    if (name == t) return true;
  return false;
}

// Refuses a non-empty folder unless --force, which removes earlier make-model output only.
void prepare_out_dir(const fs::path& out, bool force) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw UsageError(out.string() + ": exists and is not a folder");
  bool empty = true;
  for (const fs::directory_entry& e : fs::directory_iterator(out)) {
    empty = false;
    if (force && is_make_model_output(e.path().filename().string())) fs::remove(e.path());
  }
  if (!empty && !force)
    throw UsageError(out.string() + ": folder is not empty; pass --force to replace an earlier model");
}

// The nearest existing folder at or above `p`, for asking the file system about free space.
fs::path existing_ancestor(fs::path p) {
  p = fs::absolute(p);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  return p;
}

void write_file_atomically(const fs::path& path, const std::string& text) {
  fs::path partial = path;
  partial += ".partial";
  {
    std::ofstream f(partial, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw IoError(partial.string() + ": cannot write");
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) throw IoError(path.string() + ": cannot rename from " + partial.string() + ": " + ec.message());
}

// Copies tokenizer.json (+ tokenizer_config.json when present) into `out`. Returns false when the
// default folder has no tokenizer (scripts/setup.sh not run); a folder given explicitly must have one.
bool copy_tokenizer(const MakeModelOptions& o) {
  if (!fs::exists(o.tokenizer_dir / "tokenizer.json")) {
    if (o.tokenizer_given)
      throw UsageError(o.tokenizer_dir.string() + ": no tokenizer.json in the --tokenizer folder");
    return false;
  }
  for (const char* name : kTokenizerFiles) {
    const fs::path from = o.tokenizer_dir / name;
    if (!fs::exists(from)) continue;
    std::error_code ec;
    fs::copy_file(from, o.out / name, fs::copy_options::overwrite_existing, ec);
    if (ec) throw IoError(from.string() + ": cannot copy to " + o.out.string() + ": " + ec.message());
  }
  return true;
}

void make_model(const MakeModelOptions& o) {
  const ModelConfig cfg = preset_config(o.preset);
  prepare_out_dir(o.out, o.force);
  const uint64_t needed = synthetic_checkpoint_disk_bytes(cfg);
  const fs::path probe = existing_ancestor(o.out);
  check_disk_space(needed, fs::space(probe).available, o.out);
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) throw IoError(o.out.string() + ": cannot create folder: " + ec.message());

  const Clock::time_point start = Clock::now();
  ProgressLine line("make-model");
  SyntheticCheckpointOptions options;
  options.seed = o.seed;
  options.max_shard_bytes = o.max_shard_mib << 20;
  options.progress = [&](const WriteProgress& p) {
    line.report(p.tensors_done, p.tensors_total, p.bytes_done, p.bytes_total);
  };
  const SyntheticCheckpointSummary summary = write_synthetic_checkpoint(cfg, o.out, options);
  const bool tokenizer = copy_tokenizer(o);
  // config.json last: a folder with config.json is a complete model.
  write_file_atomically(o.out / "config.json", cfg.to_json().dump(2) + "\n");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("wrote %s: preset %s, seed %llu, %zu tensors, %s in %zu shards, %.1f s\n",
              o.out.string().c_str(), o.preset.c_str(), static_cast<unsigned long long>(o.seed),
              summary.tensors, megabytes(summary.bytes).c_str(), summary.shards, seconds);
  if (!tokenizer)
    std::fprintf(stderr, "make-model: note: no tokenizer copied (%s/tokenizer.json is absent; "
                 "scripts/setup.sh fetches it)\n", o.tokenizer_dir.string().c_str());
}

}  // namespace

void add_make_model_command(CLI::App& app) {
  auto o = std::make_shared<MakeModelOptions>();
  std::string presets;
  for (const PresetInfo& p : model_presets()) presets += "\n  " + p.name + ": " + p.description;
  CLI::App* cmd = app.add_subcommand(
      "make-model", "Write a random-weight checkpoint of a preset geometry in the released format");
  cmd->add_option("--preset", o->preset, "Model geometry:" + presets)->required();
  cmd->add_option("--out", o->out, "Output folder (created; must be empty unless --force)")->required();
  cmd->add_option("--seed", o->seed, "Random seed; the same seed writes identical files")
      ->capture_default_str();
  cmd->add_flag("--force", o->force, "Replace an earlier make-model output in --out");
  cmd->add_option("--tokenizer", o->tokenizer_dir,
                  "Folder whose tokenizer.json and tokenizer_config.json are copied into --out "
                  "(default: the one scripts/setup.sh fetches; skipped with a note when absent)")
      ->capture_default_str()
      ->each([o](const std::string&) { o->tokenizer_given = true; });
  cmd->add_option("--max-shard-mib", o->max_shard_mib,
                  "Largest shard in MiB (default: total/16, between 16 MiB and 5 GiB)");
  cmd->footer(
      "Writes config.json, model-*-of-*.safetensors and model.safetensors.index.json (FP8 e4m3 "
      "linears with e8m0 128x128 scales, MXFP4 experts with e8m0 per-32 scales, bf16/fp32 "
      "elsewhere) and the tokenizer files. config.json is written last, so a folder without it is "
      "incomplete. Full-size presets are refused when the disk cannot hold them.");
  cmd->callback([o] { make_model(*o); });
}

}  // namespace dsv4::tools
