// A CUPTI injection library that records every kernel the process runs (graph replays included:
// each carries its graph's id and the correlation id of the launch that ran it) and writes them
// as CSV when the process exits. It is how a decode step's graph is profiled where Nsight Systems
// is not installed: scripts/trace_summary.py turns the CSV into each kernel family's share of a
// step. Usage (any program, nothing to rebuild):
//   DSV4_TRACE_OUT=trace.csv CUDA_INJECTION64_PATH=libdsv4_kernel_trace.so dsv4 bench step ...
// Written by hand: CUPTI's activity API is the documented way to do this, and no Debian package
// wraps it in a tool for a machine without Nsight.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

FILE* out = nullptr;
std::mutex out_mutex;
constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

// "void ns::(anonymous namespace)::name<args>(params)" -> "name<args>", commas as ';' for the CSV.
std::string kernel_name(const char* mangled) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled != nullptr ? demangled : mangled;
  std::free(demangled);
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  int depth = 0;
  size_t params = s.size(), scope = std::string::npos;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') --depth;
    else if (depth == 0 && s[i] == '(') {
      params = i;
      break;
    } else if (depth == 0 && s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') scope = i + 2;
  }
  s = s.substr(scope == std::string::npos ? 0 : scope, params - (scope == std::string::npos ? 0 : scope));
  for (char& c : s)
    if (c == ',') c = ';';
  return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(out_mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || out == nullptr) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    std::fprintf(out, "%llu,%llu,%u,%u,%u,%d,%d,%d,%s\n", static_cast<unsigned long long>(k->start),
                 static_cast<unsigned long long>(k->end), k->streamId, k->graphId, k->correlationId, k->gridX, k->gridY,
                 k->gridZ, kernel_name(k->name).c_str());
  }
  std::free(buffer);
}

void finish() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(out_mutex);
  if (out != nullptr) std::fclose(out);
  out = nullptr;
}

}  // namespace

// Called by the CUDA driver when the process starts using CUDA (CUDA_INJECTION64_PATH).
extern "C" int InitializeInjection() {
  const char* path = std::getenv("DSV4_TRACE_OUT");
  out = std::fopen(path != nullptr ? path : "kernel_trace.csv", "w");
  if (out == nullptr) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path != nullptr ? path : "kernel_trace.csv");
    return 0;
  }
  std::fprintf(out, "start,end,stream,graph,correlation,gx,gy,gz,name\n");
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
      cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kernel_trace: CUPTI refused the kernel activity\n");
    return 0;
  }
  std::atexit(finish);
  return 1;
}
