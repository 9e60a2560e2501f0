// CPUID-based feature detection. See cpu_features.h.
#include "core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace ember {
namespace {

unsigned long long xgetbv0() {
  unsigned int eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// Linux: a process must request the AMX tile data state before any thread
// uses it (otherwise the first tile instruction faults).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned int a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_ymm = (xcr0 & 0x6) == 0x6;
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = avx && os_ymm && (b & (1u << 5));
    f.bmi2 = b & (1u << 8);
    f.avx512f = os_zmm && (b & (1u << 16));
    f.avx512dq = os_zmm && (b & (1u << 17));
    f.avx512bw = os_zmm && (b & (1u << 30));
    f.avx512vl = os_zmm && (b & (1u << 31));
    f.avx512vnni = os_zmm && (c & (1u << 11));
    f.avx512vbmi = os_zmm && (c & (1u << 1));
    const bool os_amx = (xcr0 & 0x60000) == 0x60000;  // XTILECFG, XTILEDATA
    f.amx_int8 = os_amx && (d & (1u << 24)) && (d & (1u << 25)) && request_amx_permission();
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avxvnni = os_ymm && (a & (1u << 4));
    f.avx512bf16 = os_zmm && (a & (1u << 5));
  }
  f.fma = f.fma && os_ymm;
  f.f16c = f.f16c && os_ymm;
  unsigned int brand[12];
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2], &brand[4 * i + 3]);
    char s[49];
    std::memcpy(s, brand, 48);
    s[48] = 0;
    f.brand = s;
    while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  }
  return f;
}

Isa parse_env_isa(Isa max) {
  const char* e = std::getenv("EMBER_ISA");
  if (!e) return max;
  Isa want = max;
  if (!std::strcmp(e, "scalar")) want = Isa::kScalar;
  else if (!std::strcmp(e, "avx2")) want = Isa::kAvx2;
  else if (!std::strcmp(e, "avx512")) want = Isa::kAvx512;
  else if (!std::strcmp(e, "amx")) want = Isa::kAmx;
  return want < max ? want : max;
}

std::atomic<int>& active_slot() {
  static std::atomic<int> slot{static_cast<int>(parse_env_isa(cpu_max_isa()))};
  return slot;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

Isa cpu_max_isa() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512vnni && f.avx2 && f.fma && f.f16c)
    return f.amx_int8 && f.avx512vbmi ? Isa::kAmx : Isa::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa active_isa() { return static_cast<Isa>(active_slot().load(std::memory_order_relaxed)); }

Isa set_active_isa(Isa isa) {
  Isa max = cpu_max_isa();
  if (isa > max) isa = max;
  active_slot().store(static_cast<int>(isa));
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) { if (!s.empty()) s += ' '; s += name; }
  };
  add(f.avx2, "avx2"); add(f.fma, "fma"); add(f.f16c, "f16c");
  add(f.avx512f, "avx512f"); add(f.avx512bw, "avx512bw"); add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni"); add(f.avx512bf16, "avx512bf16"); add(f.avxvnni, "avxvnni");
  add(f.avx512vbmi, "avx512vbmi");
  add(f.amx_int8, "amx-int8");
  return s;
}

}  // namespace ember
