// EMBER_CHECK / EMBER_DCHECK (core/check.h): a failed check aborts (SIGABRT,
// not an exit status) and names the condition and where it is; a passing
// one evaluates its condition once and goes on; EMBER_DCHECK is compiled out
// under NDEBUG (the suite's Release build: the condition is not even
// evaluated) and is EMBER_CHECK otherwise.
#include "core/check.h"

#include <gtest/gtest.h>

#include <csignal>
#include <string>

namespace ember {
namespace {

class CheckDeathTest : public ::testing::Test {
 protected:
  // The death tests fork; "threadsafe" re-executes the binary, so threads
  // started by other tests in this binary cannot deadlock the child.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST(Check, PassingCheckEvaluatesItsConditionOnceAndGoesOn) {
  int evaluated = 0;
  EMBER_CHECK(++evaluated == 1);
  EMBER_CHECK_MSG(++evaluated == 2, "never printed");
  EXPECT_EQ(evaluated, 2);
}

TEST_F(CheckDeathTest, FailedCheckAbortsWithConditionAndLocation) {
  const int n = 2;
  const std::string where = std::string("check_test\\.cpp:") + std::to_string(__LINE__ + 1);
  EXPECT_EXIT(EMBER_CHECK(n + 1 == 4), ::testing::KilledBySignal(SIGABRT),
              "ember: internal check failed: n \\+ 1 == 4 at .*tests/core/" + where + "\n");
}

TEST_F(CheckDeathTest, FailedCheckMsgAddsTheMessage) {
  const char* p = nullptr;
  const std::string where = std::string("check_test\\.cpp:") + std::to_string(__LINE__ + 1);
  EXPECT_EXIT(EMBER_CHECK_MSG(p != nullptr, "no buffer"), ::testing::KilledBySignal(SIGABRT),
              "internal check failed: p != nullptr at .*" + where + ": no buffer\n");
}

TEST_F(CheckDeathTest, ChecksAreExpressions) {
  // Usable where an expression is (a comma operand, a ternary branch).
  int x = (EMBER_CHECK(true), 7);
  EXPECT_EQ(x, 7);
  EXPECT_EXIT((void)(x == 7 ? (EMBER_CHECK(x == 8), 0) : 1), ::testing::KilledBySignal(SIGABRT),
              "internal check failed: x == 8 at ");
}

#ifdef NDEBUG

TEST(Check, DcheckIsCompiledOutUnderNdebug) {
  int evaluated = 0;
  EMBER_DCHECK(++evaluated == 100);  // would fail if it ran
  EMBER_DCHECK(false);
  EXPECT_EQ(evaluated, 0);
}

TEST_F(CheckDeathTest, CheckStaysOnUnderNdebug) {
  EXPECT_EXIT(EMBER_CHECK(sizeof(int) == 1), ::testing::KilledBySignal(SIGABRT),
              "internal check failed: sizeof\\(int\\) == 1 at ");
}

#else

TEST_F(CheckDeathTest, DcheckIsACheckWithoutNdebug) {
  int evaluated = 0;
  EMBER_DCHECK(++evaluated == 1);
  EXPECT_EQ(evaluated, 1);
  EXPECT_EXIT(EMBER_DCHECK(evaluated == 2), ::testing::KilledBySignal(SIGABRT),
              "internal check failed: evaluated == 2 at ");
}

#endif

}  // namespace
}  // namespace ember
