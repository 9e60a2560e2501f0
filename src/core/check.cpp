// Failure path of EMBER_CHECK; see check.h.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>

namespace ember::detail {

void check_failed(const char* cond, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "ember: internal check failed: %s at %s:%d%s%s\n", cond, file, line, msg ? ": " : "",
               msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}

}  // namespace ember::detail
