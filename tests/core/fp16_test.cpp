// F16/BF16 conversion tests: exhaustive round trips and rounding.
#include "core/fp16.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>

namespace ember {
namespace {

TEST(Fp16, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(static_cast<f16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(Fp16, MatchesF16cHardwareRounding) {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    float f = bits_to_f32(state);
    if (std::isnan(f)) continue;
    uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    EXPECT_EQ(f32_to_f16(f), hw) << f;
    EXPECT_EQ(f16_to_f32(hw), _cvtsh_ss(hw));
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0x4049), bits_to_f32(0x40490000u));
}

}  // namespace
}  // namespace ember
