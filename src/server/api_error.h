// ApiError: a request the server refuses, carried as the HTTP status and the fields of OpenAI's
// error object ({"error": {"message", "type", "param", "code"}}), so every refusal reaches the
// client in the shape its SDK parses.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace dsv4::server {

class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string type,
           std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt)
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }

  // {"error": {"message": ..., "type": ..., "param": ... or null, "code": ... or null}}
  nlohmann::ordered_json to_json() const;

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// The refusals the server gives, one constructor per kind, with OpenAI's type and code words.
ApiError invalid_request(std::string message, std::optional<std::string> param = std::nullopt,
                         std::optional<std::string> code = std::nullopt);  // 400
ApiError model_not_found(const std::string& model);                       // 404
ApiError invalid_api_key();                                                // 401
ApiError body_too_large(size_t limit_bytes);                               // 413
ApiError too_many_requests(const std::string& why);                        // 429
ApiError not_ready(const std::string& why);                                // 503
ApiError route_not_found(const std::string& method, const std::string& path);  // 404
ApiError internal_error(const std::string& what);                          // 500

}  // namespace dsv4::server
