// vLLM's `--generation-config`: a model's generation_config.json (Hugging Face's file beside
// config.json) as the sampling defaults of requests that leave those fields out. vLLM reads
// temperature, top_p, top_k, min_p, repetition_penalty and max_new_tokens from it (as max_tokens)
// and ignores the rest (bos/eos ids, do_sample, transformers_version); so does this.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "server/openai_request.h"

namespace dsv4::server {

struct GenerationConfig {
  SamplingDefaults defaults;
  std::vector<std::string> overridden;  // "temperature=0.6", ... in the file's order
};

// Reads `file`. IoError when it cannot be read; ConfigError naming the file, the field and the
// value for malformed JSON or a field of the wrong type or out of the range a request may give it.
GenerationConfig load_generation_config(const std::filesystem::path& file);

}  // namespace dsv4::server
