// `dsv4 inspect`: the configuration summary and layer kinds of a checkpoint (or a lone
// config.json), its tensors per dtype, and a check of every expected tensor's presence, shape and
// dtype. Missing or mis-shaped tensors make the command fail.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "config/model_config.h"
#include "core/error.h"
#include "loader/safetensors.h"
#include "loader/weights.h"
#include "tools/commands.h"

namespace dsv4::tools {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kListedInText = 20;  // names listed per category in the text report

struct InspectOptions {
  fs::path path;
  bool json = false;
};

struct DTypeTotals {
  size_t tensors = 0;
  uint64_t bytes = 0;
};

// What was found at the path: the config, and for a checkpoint folder its tensors.
struct Inspection {
  fs::path config_path;
  std::unique_ptr<ModelConfig> cfg;
  std::unique_ptr<Checkpoint> ckpt;
  std::map<std::string, DTypeTotals> per_dtype;  // by safetensors dtype name
  uint64_t bytes = 0;
  size_t files = 0;
  CheckpointCheck check;
};

Inspection inspect_path(const fs::path& path) {
  Inspection in;
  const bool folder = fs::is_directory(path);
  in.config_path = folder ? path / "config.json" : path;
  if (!fs::exists(in.config_path))
    throw IoError(in.config_path.string() + ": no config.json (inspect takes a checkpoint folder "
                  "or a config.json file)");
  in.cfg = std::make_unique<ModelConfig>(load_model_config(in.config_path));
  if (!folder) return in;
  in.ckpt = std::make_unique<Checkpoint>(path);
  std::set<fs::path> files;
  for (const std::string& name : in.ckpt->tensor_names()) {
    const TensorInfo& info = in.ckpt->info(name);
    DTypeTotals& t = in.per_dtype[std::string(safetensors_name(info.dtype).value_or("?"))];
    ++t.tensors;
    t.bytes += info.end - info.begin;
    in.bytes += info.end - info.begin;
    files.insert(in.ckpt->file_of(name));
  }
  in.files = files.size();
  in.check = check_checkpoint(*in.cfg, *in.ckpt);
  return in;
}

std::vector<std::string> kind_names(const ModelConfig& cfg, int64_t first, int64_t count) {
  std::vector<std::string> out;
  for (int64_t l = first; l < first + count; ++l) out.emplace_back(layer_kind_name(cfg.layer_kind(l)));
  return out;
}

std::string expert_dtype_name(ExpertDType t) { return t == ExpertDType::kFp4 ? "fp4" : "fp8"; }

json spec_json(DType dtype, const Shape& shape) {
  return {{"dtype", std::string(safetensors_name(dtype).value_or(dtype_name(dtype)))}, {"shape", shape}};
}

json to_json(const Inspection& in) {
  const ModelConfig& c = *in.cfg;
  json j = {
      {"config", in.config_path.string()},
      {"num_hidden_layers", c.num_layers()},
      {"layer_kinds", kind_names(c, 0, c.num_layers())},
      {"mtp_layers", c.num_mtp_layers()},
      {"mtp_layer_kinds", kind_names(c, c.num_layers(), c.num_mtp_layers())},
      {"num_hash_layers", c->num_hash_layers},
      {"hidden_size", c->hidden_size},
      {"vocab_size", c->vocab_size},
      {"n_routed_experts", c->n_routed_experts},
      {"expert_dtype", expert_dtype_name(c->expert_dtype)},
      {"expected_tensor_count", expected_tensors(c).size()},
      {"expected_bytes", expected_checkpoint_bytes(c)},
  };
  if (!in.ckpt) return j;
  j["tensor_count"] = in.ckpt->size();
  j["bytes"] = in.bytes;
  j["files"] = in.files;
  json per = json::object();
  for (const auto& [dtype, t] : in.per_dtype) per[dtype] = {{"tensors", t.tensors}, {"bytes", t.bytes}};
  j["bytes_per_dtype"] = per;
  j["missing"] = in.check.missing;
  json wrong = json::array();
  for (const WrongTensor& w : in.check.wrong)
    wrong.push_back({{"name", w.name},
                     {"expected", spec_json(w.expected_dtype, w.expected_shape)},
                     {"actual", spec_json(w.actual_dtype, w.actual_shape)}});
  j["wrong"] = wrong;
  j["unexpected"] = in.check.unexpected;
  return j;
}

// Layer kinds as letters (s = swa, c = csa, h = hca) in groups of ten.
std::string kind_letters(const ModelConfig& cfg, int64_t first, int64_t count) {
  std::string s;
  for (int64_t l = first; l < first + count; ++l) {
    if (l > first && (l - first) % 10 == 0) s += ' ';
    s += layer_kind_name(cfg.layer_kind(l))[0];
  }
  return s;
}

// "297.1 MB", "864.7 GB".
std::string size_text(uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e10) {
    std::snprintf(text, sizeof text, "%.1f GB", b / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f MB", b / 1e6);
  }
  return text;
}

void print_names(const std::string& title, const std::vector<std::string>& names) {
  if (names.empty()) return;
  std::cout << title << " (" << names.size() << "):\n";
  for (size_t i = 0; i < std::min(names.size(), kListedInText); ++i) std::cout << "  " << names[i] << "\n";
  if (names.size() > kListedInText)
    std::cout << "  ... and " << names.size() - kListedInText << " more (--json lists all)\n";
}

void print_text(const Inspection& in) {
  const ModelConfig& c = *in.cfg;
  const ModelParams& p = c.params();
  std::cout << "config: " << in.config_path.string() << "\n"
            << "  hidden " << p.hidden_size << ", " << p.num_hidden_layers << " layers + "
            << p.num_nextn_predict_layers << " MTP, " << p.num_attention_heads << " heads x "
            << p.head_dim << " (rope " << p.qk_rope_head_dim << "), q_lora " << p.q_lora_rank
            << ", o_groups " << p.o_groups << " x " << p.o_lora_rank << ", window "
            << p.sliding_window << "\n"
            << "  moe: " << p.n_routed_experts << " routed experts ("
            << expert_dtype_name(p.expert_dtype) << ", top " << p.num_experts_per_tok << ", scale "
            << p.routed_scaling_factor << ") + " << p.n_shared_experts << " shared, intermediate "
            << p.moe_intermediate_size << ", hash routing on the first " << p.num_hash_layers
            << " layers\n"
            << "  indexer: " << p.index_n_heads << " heads x " << p.index_head_dim << ", top-k "
            << p.index_topk << "; vocab " << p.vocab_size << "; max positions "
            << p.max_position_embeddings << "; mHC " << p.hc_mult << " streams\n"
            << "layer kinds (s = swa, c = csa, h = hca): " << kind_letters(c, 0, c.num_layers())
            << " | mtp: " << kind_letters(c, c.num_layers(), c.num_mtp_layers()) << "\n"
            << "  swa " << c.count_layers(LayerKind::kSwa) << ", csa " << c.count_layers(LayerKind::kCsa)
            << ", hca " << c.count_layers(LayerKind::kHca) << "\n";
  const size_t expected = expected_tensors(c).size();
  if (!in.ckpt) {
    std::cout << "expected checkpoint: " << expected << " tensors, "
              << size_text(expected_checkpoint_bytes(c)) << "\n";
    return;
  }
  std::cout << "checkpoint: " << in.files << " files, " << in.ckpt->size() << " tensors, "
            << size_text(in.bytes) << "\n";
  for (const auto& [dtype, t] : in.per_dtype)
    std::cout << "  " << std::left << std::setw(8) << dtype << std::right << std::setw(8)
              << t.tensors << " tensors " << std::setw(14) << size_text(t.bytes) << "\n";
  std::cout << "expected tensors: " << expected << ", missing " << in.check.missing.size()
            << ", wrong shape or dtype " << in.check.wrong.size() << ", unexpected "
            << in.check.unexpected.size() << "\n";
  print_names("missing", in.check.missing);
  std::vector<std::string> wrong;
  for (const WrongTensor& w : in.check.wrong)
    wrong.push_back(w.name + ": expected " + std::string(dtype_name(w.expected_dtype)) + " " +
                    shape_str(w.expected_shape) + ", found " + std::string(dtype_name(w.actual_dtype)) +
                    " " + shape_str(w.actual_shape));
  print_names("wrong shape or dtype", wrong);
  print_names("unexpected", in.check.unexpected);
}

void inspect(const InspectOptions& o) {
  const Inspection in = inspect_path(o.path);
  if (o.json) {
    std::cout << to_json(in).dump(2) << "\n";
  } else {
    print_text(in);
  }
  std::cout.flush();
  if (in.ckpt && !in.check.ok())
    throw TensorError(o.path.string() + ": " + std::to_string(in.check.missing.size()) +
                      " expected tensors missing, " + std::to_string(in.check.wrong.size()) +
                      " with the wrong shape or dtype");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Summarise a checkpoint (or config.json) and check its tensors against the config");
  cmd->add_option("path", o->path, "Checkpoint folder (with config.json), or a lone config.json")
      ->required();
  cmd->add_flag("--json", o->json,
                "Print one JSON object: num_hidden_layers, layer_kinds, mtp_layers, ..., and for a "
                "checkpoint tensor_count, missing, wrong, unexpected");
  cmd->footer("Exits with status 1 when an expected tensor is missing or has the wrong shape or dtype.");
  cmd->callback([o] { inspect(*o); });
}

}  // namespace dsv4::tools
