// Finding out whether a CUDA device can be used, without failing where there is no driver.
#pragma once

namespace dsv4::cuda {

// True when the CUDA runtime reports at least one device. Where no driver is installed the
// runtime returns an error (and leaves the count untouched): that is "no device", not a throw.
bool device_available();
// The devices the CUDA runtime reports; 0 where there is none or no driver.
int device_count();

}  // namespace dsv4::cuda
