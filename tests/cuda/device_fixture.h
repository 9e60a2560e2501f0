// The gtest fixture the CUDA device tests share: skips (printing why) where
// there is no usable device, else owns one Context (stream + cuBLAS handle)
// and copies vectors to and from device buffers. Single-threaded, like gtest.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"

namespace ember::cuda {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (device_count(&why) == 0) GTEST_SKIP() << "no CUDA device (" << why << "): device test skipped";
    auto c = Context::create();
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    ctx_ = std::move(*c);
  }
  // A device buffer holding v.
  template <typename T>
  DeviceBuffer up(const std::vector<T>& v) {
    auto b = DeviceBuffer::alloc(v.size() * sizeof(T));
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    EXPECT_TRUE(ctx_->to_device(b->data(), v.data(), v.size() * sizeof(T)).is_ok());
    return std::move(*b);
  }
  // The first n elements of b.
  template <typename T>
  std::vector<T> down(const DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    const Status st = ctx_->to_host(v.data(), b.data(), n * sizeof(T));
    EXPECT_TRUE(st.is_ok()) << st.message();
    return v;
  }
  std::unique_ptr<Context> ctx_;
};

}  // namespace ember::cuda
