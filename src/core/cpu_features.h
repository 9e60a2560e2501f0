// Runtime CPU feature detection (CPUID + XGETBV) and the ISA level used for
// kernel dispatch. EMBER_ISA=scalar|avx2|avx512|amx lowers the level (tests,
// benchmarks); it can never raise it above what the CPU supports.
#pragma once

#include <string>

namespace ember {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false, avxvnni = false, avx512vbmi = false;
  // AMX tile + INT8 in CPUID and enabled by the OS (XCR0), and the
  // process's request for the tile data state granted (Linux arch_prctl,
  // made once at detection): only then may a thread run tile instructions.
  bool amx_int8 = false;
  std::string brand;
};

// Dispatch levels, ordered: a level implies all lower ones.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAmx = 3 };
constexpr int kNumIsaLevels = 4;

const CpuFeatures& cpu_features();
// Highest level supported by the CPU (kAvx512 needs F/BW/VL/DQ/VNNI; kAmx
// that plus VBMI and usable AMX-INT8).
Isa cpu_max_isa();
// Level in use: cpu_max_isa() lowered by EMBER_ISA or set_active_isa().
Isa active_isa();
// Sets the active level (clamped to cpu_max_isa()); returns the level set.
Isa set_active_isa(Isa isa);
const char* isa_name(Isa isa);
std::string cpu_features_string();

}  // namespace ember
