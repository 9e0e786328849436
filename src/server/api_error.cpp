// OpenAI-shaped error objects and the server's refusals; see api_error.h.
#include "server/api_error.h"

namespace dsv4::server {

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json error = nlohmann::ordered_json::object();
  error["message"] = what();
  error["type"] = type_;
  error["param"] = param_ ? nlohmann::ordered_json(*param_) : nlohmann::ordered_json(nullptr);
  error["code"] = code_ ? nlohmann::ordered_json(*code_) : nlohmann::ordered_json(nullptr);
  return {{"error", std::move(error)}};
}

ApiError invalid_request(std::string message, std::optional<std::string> param,
                         std::optional<std::string> code) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code));
}

ApiError model_not_found(const std::string& model) {
  return ApiError(404, "The model `" + model + "` does not exist.", "invalid_request_error",
                  "model", "model_not_found");
}

ApiError invalid_api_key() {
  return ApiError(401, "Incorrect API key provided.", "invalid_request_error", std::nullopt,
                  "invalid_api_key");
}

ApiError body_too_large(size_t limit_bytes) {
  return ApiError(413,
                  "The request body is larger than the server accepts (" +
                      std::to_string(limit_bytes) + " bytes).",
                  "invalid_request_error", std::nullopt, "request_too_large");
}

ApiError too_many_requests(const std::string& why) {
  return ApiError(429, why, "rate_limit_error", std::nullopt, "rate_limit_exceeded");
}

ApiError not_ready(const std::string& why) {
  return ApiError(503, why, "server_error", std::nullopt, "service_unavailable");
}

ApiError route_not_found(const std::string& method, const std::string& path) {
  return ApiError(404, "No route " + method + " " + path + ".", "invalid_request_error",
                  std::nullopt, "not_found");
}

ApiError internal_error(const std::string& what) {
  return ApiError(500, what, "server_error", std::nullopt, "internal_error");
}

}  // namespace dsv4::server
