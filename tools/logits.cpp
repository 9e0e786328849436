// `dsv4 logits`: the logits of every position of one token sequence, for parity checks against
// other implementations, written as a float32 .npy of shape [tokens, vocab].
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/model.h"
#include "tools/backend.h"
#include "tools/commands.h"
#include "tools/model_source.h"
#include "tools/number_checks.h"
#include "tools/token_ids.h"

namespace dsv4::tools {

namespace {

struct LogitsOptions {
  ModelSource source;
  std::string ids_file;
  std::string out_file;
  int64_t prefill_chunk = 0;
  bool exact_math = false;
  int threads = 0;
  Device device = Device::kCpu;
  GpuOptions gpu;
};

// A float32 C-order .npy file, written as it is produced. The format (numpy's NEP 1) is a magic
// string, a version, and a Python-dict header padded to a 64-byte boundary: a few lines, so no
// library is pulled in for it.
class NpyWriter {
 public:
  NpyWriter(const std::string& path, int64_t rows, int64_t cols) : path_(path), out_(path, std::ios::binary) {
    if (!out_) throw IoError(path + ": cannot create the output file");
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    const size_t preamble = 10;  // magic (6) + version (2) + header length (2)
    header.append(63 - (preamble + header.size()) % 64, ' ');
    header.push_back('\n');
    const auto len = static_cast<uint16_t>(header.size());
    const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
    out_.write(magic, sizeof magic);
    out_.write(header.data(), static_cast<std::streamsize>(header.size()));
  }
  void write(const std::vector<float>& values) {
    out_.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  }
  void finish() {
    out_.close();
    if (!out_) throw IoError(path_ + ": writing failed");
  }

 private:
  std::string path_;
  std::ofstream out_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open the ids file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void run_logits(const LogitsOptions& o) {
  const std::vector<int32_t> ids = parse_token_ids(read_file(o.ids_file), o.ids_file);
  const auto T = static_cast<int64_t>(ids.size());
  const std::unique_ptr<Ops> backend = make_backend(o.device, o.threads, o.gpu, o.exact_math);
  Ops& ops = *backend;
  const Model model = load_model(ops, o.source);
  const std::unique_ptr<ForwardRunner> runner = make_forward_runner(ops, o.gpu);
  const int64_t V = model.config()->vocab_size;
  SequenceCache cache = model.new_sequence(ops, T, o.exact_math);
  NpyWriter npy(o.out_file, T, V);
  const int64_t chunk = o.prefill_chunk > 0 ? o.prefill_chunk : T;
  for (int64_t begin = 0; begin < T; begin += chunk) {
    const int64_t n = std::min(chunk, T - begin);
    ForwardBatch batch;
    batch.options.exact_math = o.exact_math;
    batch.options.logits = LogitsFor::kAllTokens;
    batch.add(cache, std::span<const int32_t>(ids).subspan(static_cast<size_t>(begin), static_cast<size_t>(n)));
    const ForwardResult r = runner->forward(model, ops, batch);
    std::vector<float> logits(static_cast<size_t>(n * V));
    ops.download(r.logits.view(), host_view(logits.data(), DType::kF32, {n, V}));
    npy.write(logits);
  }
  npy.finish();
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto opts = std::make_shared<LogitsOptions>();
  CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position of a token sequence (.npy)");
  add_model_options(cmd, opts->source);
  cmd->add_option("--ids", opts->ids_file, "File of comma-separated token ids")->required();
  cmd->add_option("--out", opts->out_file, "Output .npy file: float32 [tokens, vocab]")->required();
  cmd->add_option("--prefill-chunk", opts->prefill_chunk, "Prefill in chunks of N tokens (0: one shot)")
      ->check(non_negative_number());
  cmd->add_flag("--exact-math", opts->exact_math,
                "No FP8/FP4 activation quantisation or QAT rounding; every activation fp32");
  cmd->add_option("--threads", opts->threads, "CPU threads (0: all cores)")->check(non_negative_number());
  add_device_option(cmd, opts->device);
  add_gpu_options(cmd, opts->gpu);
  cmd->callback([opts] { run_logits(*opts); });
}

}  // namespace dsv4::tools
