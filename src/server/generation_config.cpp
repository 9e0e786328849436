// generation_config.json's sampling fields, checked as a request's are (generation_config.h).
#include "server/generation_config.h"

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4::server {

namespace {

// "0.6" for 0.6f, "40" for 40.
std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

}  // namespace

GenerationConfig load_generation_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw IoError("cannot read " + file.string());
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    throw ConfigError(file.string() + ": not a JSON object (a Hugging Face generation_config.json)");
  GenerationConfig config;
  SamplingDefaults& d = config.defaults;
  // A number in [low, high] (low excluded where low_open), or ConfigError naming the field.
  const auto number = [&](const std::string& key, double low, double high, bool low_open) {
    const nlohmann::ordered_json& v = json.at(key);
    const double x = v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
    if (!v.is_number() || !(low_open ? x > low : x >= low) || !(x <= high))
      throw ConfigError(file.string() + ": " + key + " = " + v.dump() + " is not a number in " + (low_open ? "(" : "[") +
                        number_text(low) + ", " + number_text(high) + "]");
    config.overridden.push_back(key + "=" + number_text(x));
    return x;
  };
  const auto integer = [&](const std::string& key, int64_t low) {
    const nlohmann::ordered_json& v = json.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < low)
      throw ConfigError(file.string() + ": " + key + " = " + v.dump() + " is not an integer of at least " +
                        std::to_string(low));
    return v.get<int64_t>();
  };
  for (const auto& [key, value] : json.items()) {
    if (key == "temperature") {
      d.temperature = static_cast<float>(number(key, 0, 2, false));
    } else if (key == "top_p") {
      d.top_p = static_cast<float>(number(key, 0, 1, true));
    } else if (key == "min_p") {
      d.min_p = static_cast<float>(number(key, 0, 1, false));
    } else if (key == "repetition_penalty") {
      d.repetition_penalty = static_cast<float>(number(key, 0, 2, true));
    } else if (key == "top_k") {
      const int64_t k = integer(key, -1);
      if (k > std::numeric_limits<int32_t>::max())
        throw ConfigError(file.string() + ": top_k = " + value.dump() + " is beyond 2^31 - 1");
      d.top_k = static_cast<int32_t>(k < 0 ? 0 : k);
      config.overridden.push_back("top_k=" + std::to_string(k));
    } else if (key == "max_new_tokens") {
      d.max_tokens = integer(key, 1);
      config.overridden.push_back("max_tokens=" + std::to_string(*d.max_tokens));
    }
  }
  return config;
}

}  // namespace dsv4::server
