// Runtime CPU feature detection (CPUID + XGETBV) and the ISA level used for
// kernel dispatch. EMBER_ISA=scalar|avx2|avx512 lowers the level (tests,
// benchmarks); it can never raise it above what the CPU supports.
#pragma once

#include <string>

namespace ember {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avxvnni = false;
  std::string brand;
};

// Dispatch levels, ordered: a level implies all lower ones.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const CpuFeatures& cpu_features();
// Highest level supported by the CPU (kAvx512 needs F/BW/VL/DQ/VNNI).
Isa cpu_max_isa();
// Level in use: cpu_max_isa() lowered by EMBER_ISA or set_active_isa().
Isa active_isa();
// Sets the active level (clamped to cpu_max_isa()); returns the level set.
Isa set_active_isa(Isa isa);
const char* isa_name(Isa isa);
std::string cpu_features_string();

}  // namespace ember
