// Typed errors thrown by library code. Each carries enough context (file, tensor, field, value)
// for a user to fix the input without reading the source; only tools/ turns them into exit codes.
#pragma once

#include <stdexcept>
#include <string>

namespace dsv4 {

// Base of every error the library throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config.json field is missing, has the wrong type, or holds a value the model cannot use.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file on disk is malformed (safetensors header, index json, tokenizer json, ...).
class FormatError : public Error {
 public:
  using Error::Error;
};

// Opening, reading, writing or mapping a file failed at the OS level.
class IoError : public Error {
 public:
  using Error::Error;
};

// A tensor is missing, or has a shape or dtype other than the one the model expects.
class TensorError : public Error {
 public:
  using Error::Error;
};

// The caller asked for something invalid (bad flag, value out of range, unsupported preset).
class UsageError : public Error {
 public:
  using Error::Error;
};

// An exchange among the ranks of a group failed, or a rank gave the group up (ExpertComm::abort).
class CommError : public Error {
 public:
  using Error::Error;
};

// A CUDA runtime / cuBLAS call failed; the message carries the expression, file and line.
class CudaError : public Error {
 public:
  using Error::Error;
};

}  // namespace dsv4
