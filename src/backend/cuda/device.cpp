// Device discovery that degrades to "no device" on machines without a driver (CI).
#include "backend/cuda/device.h"

#include <cuda_runtime.h>

namespace dsv4::cuda {

bool device_available() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return false;
  }
  return count > 0;
}

}  // namespace dsv4::cuda
