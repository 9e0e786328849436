// Device discovery that degrades to "no device" on machines without a driver (CI).
#include "backend/cuda/device.h"

#include <cuda_runtime.h>

namespace dsv4::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

bool device_available() { return device_count() > 0; }

}  // namespace dsv4::cuda
