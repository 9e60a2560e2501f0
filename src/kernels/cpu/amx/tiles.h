// AMX tile configuration shared by the amx/ kernels: the palette-1 layout
// record, constant configurations, and a scope that loads one and releases
// the tiles on exit. Include only from amx/ files (compiled with the AMX
// flags). Each kernel call makes its own scope: a thread's AMX state is
// clean between calls.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace ember::amx {

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tiles[i] = {rows, bytes per row} for tiles 0..7.
struct TileShape {
  uint8_t rows;
  uint16_t colsb;
};
constexpr TileConfig make_config(const TileShape (&tiles)[8]) {
  TileConfig c;
  for (int i = 0; i < 8; ++i) {
    c.rows[i] = tiles[i].rows;
    c.colsb[i] = tiles[i].colsb;
  }
  return c;
}

// Loads `cfg` (which must be constant-initialized static data: GCC's
// _tile_loadconfig names only 8 bytes of its operand, so stores to a local
// configuration past those may be dropped; llama.cpp's AMX path dies so)
// and releases the tiles on scope exit.
// GCC's tile load / store intrinsics are asm statements with no memory
// operands: the compiler does not know that they read or write memory, so
// it may move, merge or drop the ordinary stores a tile load needs (a stack
// buffer that no C++ code reads looks dead) and move the loads after a tile
// store before it (bytes it believes nothing wrote). Nothing observed so far
// came from it (the garbage outputs once blamed on it were a fallback that
// passed 64 rows to a 16-row kernel), but nothing forbids it either. So:
// every buffer C++ code writes and a tile load reads is named by
// tile_reads(buffer) before the loads (buffers filled once per call: a
// tile_memory_barrier() after filling), and every buffer a tile store
// writes and C++ code reads is named by tile_writes(buffer) after the
// stores (so later loads see them) and before them when C++ code read the
// buffer earlier (so those loads are not moved past the store). (Full
// barriers at every tile step cost ~10% of the kernels' rate.)
template <class T>
inline void tile_reads(const T& obj) {
  asm volatile("" : : "m"(obj));
}
template <class T>
inline void tile_writes(T& obj) {
  asm volatile("" : "+m"(obj));
}
inline void tile_memory_barrier() { asm volatile("" ::: "memory"); }

class TileScope {
 public:
  explicit TileScope(const TileConfig& cfg) { _tile_loadconfig(&cfg); }
  ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

}  // namespace ember::amx
