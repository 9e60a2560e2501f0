// Tests for the incremental Server-Sent Events parser (src/bench/sse.h):
// line endings, split feeds, multi-line data, comments, fields, BOM, limits.
#include "bench/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ember {
namespace {

std::vector<SseEvent> parse_all(const std::string& s, size_t piece = 0) {
  SseParser p;
  std::vector<SseEvent> out;
  if (piece == 0) {
    EXPECT_TRUE(p.feed(s, &out).is_ok());
  } else {
    for (size_t i = 0; i < s.size(); i += piece) EXPECT_TRUE(p.feed(s.substr(i, piece), &out).is_ok());
  }
  return out;
}

TEST(Sse, SingleEvents) {
  auto ev = parse_all("data: hello\n\ndata: world\n\n");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "hello");
  EXPECT_EQ(ev[1].data, "world");
  EXPECT_EQ(ev[0].event, "");
}

TEST(Sse, LineEndingsCrLfAndCr) {
  for (const std::string s : {"data: a\r\n\r\ndata: b\r\n\r\n", "data: a\r\rdata: b\r\r", "data: a\n\r\ndata: b\r\n\n"}) {
    auto ev = parse_all(s);
    ASSERT_EQ(ev.size(), 2u) << s;
    EXPECT_EQ(ev[0].data, "a");
    EXPECT_EQ(ev[1].data, "b");
  }
}

TEST(Sse, ByteByByteFeedsGiveTheSameEvents) {
  const std::string s =
      ": keep-alive comment\r\nevent: delta\r\ndata: {\"x\": 1}\r\nid: 7\r\n\r\ndata: line1\r\ndata: line2\r\n\r\n"
      "data: [DONE]\r\n\r\n";
  for (size_t piece : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}}) {
    auto ev = parse_all(s, piece);
    ASSERT_EQ(ev.size(), 3u) << "piece " << piece;
    EXPECT_EQ(ev[0].event, "delta");
    EXPECT_EQ(ev[0].data, "{\"x\": 1}");
    EXPECT_EQ(ev[0].id, "7");
    EXPECT_EQ(ev[1].data, "line1\nline2");
    EXPECT_EQ(ev[1].event, "");
    EXPECT_EQ(ev[2].data, "[DONE]");
  }
}

TEST(Sse, CrLfSplitAcrossFeedsIsOneLineEnd) {
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed("data: a\r", &out).is_ok());
  ASSERT_TRUE(p.feed("\n", &out).is_ok());
  EXPECT_TRUE(out.empty());  // only one line end so far: no blank line yet
  ASSERT_TRUE(p.feed("\r", &out).is_ok());
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(p.feed("\ndata: b\n\n", &out).is_ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].data, "b");
}

TEST(Sse, FieldSyntax) {
  // No space after the colon, only one space stripped, field without colon,
  // empty data line, unknown fields and retry ignored.
  auto ev = parse_all("data:x\n\ndata:  two\n\ndata\n\ndata:\ndata:\n\nfoo: bar\nretry: 10\ndata: y\n\n");
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].data, "x");
  EXPECT_EQ(ev[1].data, " two");
  EXPECT_EQ(ev[2].data, "");
  EXPECT_EQ(ev[3].data, "\n");
  EXPECT_EQ(ev[4].data, "y");
}

TEST(Sse, BlankLinesWithoutDataDispatchNothing) {
  auto ev = parse_all("\n\n: comment\n\nevent: ping\n\ndata: z\n\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "z");
  EXPECT_EQ(ev[0].event, "");  // the event name of the data-less event was reset
}

TEST(Sse, ByteOrderMarkSkippedEvenWhenSplit) {
  const std::string s = "\xEF\xBB\xBF" "data: a\n\n";
  for (size_t piece : {size_t{0}, size_t{1}, size_t{2}}) {
    auto ev = parse_all(s, piece);
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].data, "a");
  }
  // A first byte that merely looks like a BOM start is kept.
  auto ev = parse_all("\xEF" "data: q\n\ndata: r\n\n", 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "r");
}

TEST(Sse, FinishFlushesAnUnterminatedEvent) {
  SseParser p;
  std::vector<SseEvent> out;
  ASSERT_TRUE(p.feed("data: a\n\ndata: tail", &out).is_ok());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_GT(p.pending_bytes(), 0u);
  p.finish(&out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].data, "tail");
}

TEST(Sse, OverlongLineFails) {
  SseParser p(16);
  std::vector<SseEvent> out;
  EXPECT_TRUE(p.feed("data: 0123456", &out).is_ok());
  Status st = p.feed("789abcdefghij", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("longer"), std::string::npos);
  EXPECT_FALSE(p.feed("\n\n", &out).is_ok());  // stays failed
  EXPECT_TRUE(out.empty());
}

TEST(Sse, BinaryGarbageNeverCrashes) {
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    x = x * 1664525u + 1013904223u;
    junk += static_cast<char>(x >> 24);
  }
  SseParser p;
  std::vector<SseEvent> out;
  for (size_t i = 0; i < junk.size(); i += 37) ASSERT_TRUE(p.feed(junk.substr(i, 37), &out).is_ok());
  p.finish(&out);
  SUCCEED();
}

}  // namespace
}  // namespace ember
