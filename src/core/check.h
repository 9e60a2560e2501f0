// EMBER_CHECK / EMBER_DCHECK: assertions for programmer errors (a broken
// invariant, an argument no caller may pass), never for bad input: input
// from files, requests or flags is validated at the boundary and answered
// with a Status. A failed check prints the condition and where it is, then
// aborts (no exceptions, no exit()). EMBER_DCHECK compiles to nothing in
// release builds (NDEBUG) and is for checks on hot paths.
#pragma once

namespace ember::detail {

[[noreturn]] void check_failed(const char* cond, const char* file, int line, const char* msg);

}  // namespace ember::detail

#define EMBER_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::ember::detail::check_failed(#cond, __FILE__, __LINE__, nullptr))
#define EMBER_CHECK_MSG(cond, msg) \
  ((cond) ? static_cast<void>(0) : ::ember::detail::check_failed(#cond, __FILE__, __LINE__, (msg)))

#ifdef NDEBUG
#define EMBER_DCHECK(cond) static_cast<void>(0)
#else
#define EMBER_DCHECK(cond) EMBER_CHECK(cond)
#endif
