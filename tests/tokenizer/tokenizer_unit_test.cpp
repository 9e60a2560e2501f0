// Tokenizer unit tests on small vocabularies built in code: SentencePiece
// merges by score and byte fallback, byte-level BPE merges by rank, the
// special-token splitter against a direct transcription of llama.cpp's
// algorithm, the streaming decoder, NFC, and error handling.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode_util.h"

namespace ember {
namespace {

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

// A SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then
// the given normal pieces with their scores.
VocabSpec spm_spec(const std::vector<std::pair<std::string, float>>& pieces) {
  VocabSpec s;
  s.model = "llama";
  auto add = [&](const std::string& t, float score, int32_t type) {
    s.tokens.push_back(t);
    s.scores.push_back(score);
    s.token_types.push_back(type);
  };
  add("<unk>", 0, kUnknown);
  add("<s>", 0, kControl);
  add("</s>", 0, kControl);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    add(buf, 0, kByte);
  }
  for (const auto& [t, score] : pieces) add(t, score, kNormal);
  return s;
}

std::unique_ptr<Tokenizer> build(VocabSpec spec) {
  auto t = Tokenizer::from_spec(std::move(spec));
  EXPECT_TRUE(t.is_ok()) << t.status().message();
  return t.is_ok() ? std::move(t.value()) : nullptr;
}

int32_t id_of(const Tokenizer& t, const std::string& s) {
  const int32_t id = t.token_id(s);
  EXPECT_GE(id, 0) << s;
  return id;
}

const std::string kU = "\xE2\x96\x81";  // U+2581

TEST(SpmTokenizer, MergesHighestScoreFirstAndFallsBackToBytes) {
  auto tok = build(spm_spec({{kU, -1}, {"a", -2}, {"b", -2}, {"c", -2}, {"ab", -5}, {"bc", -3}, {"abc", -4},
                             {kU + "a", -6}, {kU + "abc", -7}}));
  ASSERT_TRUE(tok);
  EXPECT_TRUE(tok->add_space_prefix());
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->add_bos());
  // "▁abc": bc (-3) merges before ab (-5) and ▁a (-6); then a+bc = abc (-4);
  // then ▁+abc = ▁abc (-7).
  EXPECT_EQ(tok->encode("abc", {false, false}), std::vector<int32_t>{id_of(*tok, kU + "abc")});
  EXPECT_EQ(tok->encode("abc"), (std::vector<int32_t>{1, id_of(*tok, kU + "abc")}));
  // "▁ab": ab (-5) beats ▁a (-6).
  EXPECT_EQ(tok->encode("ab", {false, false}), (std::vector<int32_t>{id_of(*tok, kU), id_of(*tok, "ab")}));
  // Unknown characters fall back to their UTF-8 bytes.
  EXPECT_EQ(tok->encode("\xC3\xA9", {false, false}),
            (std::vector<int32_t>{id_of(*tok, kU), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("a \xC3\xA9 abc")), "a \xC3\xA9 abc");
  // Control tokens in text: only with parse_special; text after a special
  // token gets the space prefix again (as llama.cpp does).
  EXPECT_EQ(tok->encode("<s>abc", {false, true}), (std::vector<int32_t>{1, id_of(*tok, kU + "abc")}));
  const auto plain = tok->encode("<s>", {false, false});
  EXPECT_EQ(plain.size(), 4u);  // ▁ < s >
  EXPECT_EQ(tok->decode(plain), "<s>");
  EXPECT_TRUE(tok->is_eog(2));
}

TEST(SpmTokenizer, EqualScoresMergeLeftmostFirst) {
  auto tok = build(spm_spec({{"a", -1}, {"aa", -2}}));
  ASSERT_TRUE(tok);
  VocabSpec s = spm_spec({{"a", -1}, {"aa", -2}});
  s.add_space_prefix = false;
  auto t2 = build(s);
  ASSERT_TRUE(t2);
  const int32_t a = id_of(*t2, "a"), aa = id_of(*t2, "aa");
  EXPECT_EQ(t2->encode("aaa", {false, false}), (std::vector<int32_t>{aa, a}));
  EXPECT_EQ(t2->encode("aaaaa", {false, false}), (std::vector<int32_t>{aa, aa, a}));
}

TEST(SpmTokenizer, WordCacheAgreesWithWholeTextMerging) {
  // The encoder cuts text before "▁" and caches words; a token spanning such
  // a cut ("x▁y") must still be found.
  VocabSpec s = spm_spec({{kU, -1}, {"x", -1}, {"y", -1}, {"x" + kU, -3}, {"x" + kU + "y", -2}, {kU + "y", -4}});
  s.add_space_prefix = false;
  auto tok = build(s);
  ASSERT_TRUE(tok);
  const int32_t xy = id_of(*tok, "x" + kU + "y");
  EXPECT_EQ(tok->encode("x y", {false, false}), std::vector<int32_t>{xy});
  EXPECT_EQ(tok->encode("x yx y", {false, false}), (std::vector<int32_t>{xy, xy}));
  EXPECT_EQ(tok->encode("x y x y", {false, false}), (std::vector<int32_t>{xy, id_of(*tok, kU), xy}));
}

// Byte-level BPE: GPT-2 byte map, merges by rank, leftmost on ties.
VocabSpec bpe_spec(const std::vector<std::string>& merges, const std::vector<std::string>& extra) {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "gpt-2";
  const auto& bm = tok::byte_unicode_map();
  for (int b = 0; b < 256; ++b) s.tokens.push_back(bm.byte_to_utf8[b]);
  for (const std::string& m : merges) {
    const size_t sp = m.find(' ');
    s.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  for (const std::string& e : extra) s.tokens.push_back(e);
  s.merges = merges;
  s.token_types.assign(s.tokens.size(), kNormal);
  return s;
}

TEST(ByteBpeTokenizer, MergesByRankLeftmostFirst) {
  // "Ġ" is the byte map's code point for ' '.
  auto tok = build(bpe_spec({"a a", "b c", "a bc", "Ġ a"}, {}));
  ASSERT_TRUE(tok);
  EXPECT_FALSE(tok->add_bos());
  const int32_t a = tok->token_id("a"), aa = tok->token_id("aa"), abc = tok->token_id("abc");
  EXPECT_EQ(tok->encode("aaa"), (std::vector<int32_t>{aa, a}));
  EXPECT_EQ(tok->encode("aabc"), (std::vector<int32_t>{aa, tok->token_id("bc")}));  // a a (rank 0) first
  EXPECT_EQ(tok->encode("abc"), std::vector<int32_t>{abc});
  // GPT-2 pre-tokenizer: " a" is one word, so "Ġa" can merge.
  EXPECT_EQ(tok->encode("x a"), (std::vector<int32_t>{tok->token_id("x"), tok->token_id("\xC4\xA0" "a")}));
  EXPECT_EQ(tok->decode(tok->encode("x a\xF0\x9F\x98\x80 abc")), "x a\xF0\x9F\x98\x80 abc");
  // Invalid UTF-8 is replaced by U+FFFD before byte-level encoding.
  EXPECT_EQ(tok->decode(tok->encode("a\xFF")), "a\xEF\xBF\xBD");
}

TEST(ByteBpeTokenizer, IgnoreMergesTakesWholeWords) {
  VocabSpec s = bpe_spec({"a b", "c d"}, {"abcd"});
  auto plain = build(s);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->encode("abcd").size(), 2u);
  s.ignore_merges = true;
  auto whole = build(s);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->encode("abcd"), std::vector<int32_t>{whole->token_id("abcd")});
}

// ---------------------------------------------------------------------------
// Special-token splitting against a direct transcription of llama.cpp's
// tokenizer_st_partition (fragment list, one pass per special token).

struct RefFragment {
  int32_t token;
  size_t off, len;
};

std::vector<RefFragment> reference_partition(const tok::Vocab& v, const std::string& text, bool parse_special) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < v.n(); ++id) {
    if (v.attrs[id] & (tok::kAttrControl | tok::kAttrUserDefined | tok::kAttrUnknown)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return v.texts[a].size() > v.texts[b].size(); });
  std::vector<RefFragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  for (int32_t sid : ids) {
    const std::string& st = v.texts[sid];
    const uint32_t attr = v.attrs[sid];
    if (!parse_special && (attr & (tok::kAttrControl | tok::kAttrUnknown))) continue;
    std::vector<RefFragment> next;
    for (const RefFragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.off, len = f.len;
      while (true) {
        const size_t match = std::string_view(text.data(), base + len).find(st, base);
        if (match == std::string::npos) {
          if (len > 0) next.push_back({-1, base, len});
          break;
        }
        if (match > base) {
          size_t l = match - base;
          if (attr & tok::kAttrLstrip) {
            while (l > 0 && std::isspace(static_cast<unsigned char>(text[base + l - 1]))) --l;
          }
          if (l > 0) next.push_back({-1, base, l});
        }
        next.push_back({sid, match, st.size()});
        if (match + st.size() >= base + len) break;
        size_t roff = match + st.size();
        size_t rlen = len - ((match - base) + st.size());
        if (attr & tok::kAttrRstrip) {
          while (rlen > 0 && std::isspace(static_cast<unsigned char>(text[roff]))) ++roff, --rlen;
        }
        base = roff;
        len = rlen;
      }
    }
    frags = std::move(next);
  }
  return frags;
}

TEST(SpecialSplitter, MatchesLlamaCppPartitionOnRandomText) {
  for (bool phi3 : {false, true}) {
    tok::Vocab v;
    const std::vector<std::pair<std::string, uint32_t>> specials = {
        {"ab", tok::kAttrUserDefined}, {"abc", tok::kAttrControl}, {"bca", tok::kAttrUserDefined},
        {"ca", tok::kAttrControl},     {"aaa", tok::kAttrUserDefined}, {"aa", tok::kAttrControl},
        {"<x>", tok::kAttrControl},    {"x>", tok::kAttrUserDefined}, {"  ", tok::kAttrUserDefined},
        {"   ", tok::kAttrUserDefined}, {"b", tok::kAttrUnknown},     {"cab", tok::kAttrUserDefined}};
    v.texts.push_back("a");
    v.attrs.push_back(tok::kAttrNormal);
    for (const auto& [t, a] : specials) {
      v.texts.push_back(t);
      v.attrs.push_back(a | (phi3 ? tok::kAttrRstrip : 0u) | (phi3 && t == "x>" ? tok::kAttrLstrip : 0u));
    }
    v.scores.assign(v.texts.size(), 0);
    v.map.build(v.texts);
    tok::SpecialSplitter splitter;
    splitter.build(v);
    std::mt19937 rng(123);
    const char alphabet[] = "abc<x> \n";
    for (int iter = 0; iter < 3000; ++iter) {
      std::string text;
      const int n = rng() % 24;
      for (int i = 0; i < n; ++i) text += alphabet[rng() % 8];
      for (bool ps : {false, true}) {
        const auto got = splitter.split(text, ps);
        const auto want = reference_partition(v, text, ps);
        ASSERT_EQ(got.size(), want.size()) << "text '" << text << "' parse_special=" << ps << " phi3=" << phi3;
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i].token, want[i].token) << "text '" << text << "' fragment " << i;
          EXPECT_EQ(got[i].offset, want[i].off) << "text '" << text << "' fragment " << i;
          EXPECT_EQ(got[i].length, want[i].len) << "text '" << text << "' fragment " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------

TEST(StreamDecoder, HoldsBackIncompleteUtf8) {
  VocabSpec s = spm_spec({{"a", -1}});
  s.add_space_prefix = false;
  auto tok = build(s);
  ASSERT_TRUE(tok);
  auto byte = [](uint8_t b) { return 3 + b; };
  const int32_t a = tok->token_id("a");
  StreamDecoder sd(*tok);
  // "€" = E2 82 AC arrives one byte token at a time.
  EXPECT_EQ(sd.push(byte(0xE2)), "");
  EXPECT_EQ(sd.push(byte(0x82)), "");
  EXPECT_EQ(sd.push(byte(0xAC)), "\xE2\x82\xAC");
  // A byte that can never start a character is passed through.
  EXPECT_EQ(sd.push(byte(0xFF)), "\xFF");
  // A truncated character followed by ASCII is emitted as it is.
  EXPECT_EQ(sd.push(byte(0xF0)), "");
  EXPECT_EQ(sd.push(a), "\xF0" "a");
  // E0 80 can never complete (overlong): not held.
  EXPECT_EQ(sd.push(byte(0xE0)), "");
  EXPECT_EQ(sd.push(byte(0x80)), "\xE0\x80");
  EXPECT_EQ(sd.push(byte(0xC3)), "");
  EXPECT_EQ(sd.flush(), "\xC3");
  // Control tokens render as nothing unless asked.
  EXPECT_EQ(sd.push(2), "");
  StreamDecoder special(*tok, true);
  EXPECT_EQ(special.push(2), "</s>");
}

TEST(StreamDecoder, ConcatenationEqualsDecodeWithLeadingSpaceRule) {
  auto tok = build(spm_spec({{kU, -1}, {"a", -2}, {kU + "a", -1.5f}, {"b", -2}}));
  ASSERT_TRUE(tok);
  std::mt19937 rng(5);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<int32_t> ids;
    const int n = rng() % 12;
    for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(rng() % tok->n_vocab()) - (rng() % 20 == 0 ? 400 : 0));
    StreamDecoder sd(*tok);
    const std::string full = tok->decode(ids);
    // When the whole text is valid UTF-8, every streamed part must be too.
    const bool valid = tok::utf8_is_valid(full);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string part = sd.push(id);
      if (valid) {
        EXPECT_TRUE(tok::utf8_is_valid(part));
      }
      streamed += part;
    }
    streamed += sd.flush();
    EXPECT_EQ(streamed, full);
  }
  // The space the encoder adds in front is removed again.
  EXPECT_EQ(tok->decode(tok->encode("a a")), "a a");
  EXPECT_EQ(tok->decode(tok->encode(" a")), " a");
}

TEST(Unicode, NfcNormalization) {
  using tok::nfc_normalize;
  EXPECT_EQ(nfc_normalize("e\xCC\x81"), "\xC3\xA9");                  // e + acute -> é
  EXPECT_EQ(nfc_normalize("\xE2\x84\xAB"), "\xC3\x85");               // Angstrom sign -> Å
  EXPECT_EQ(nfc_normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> 각
  // a + dot below (220) + grave (230) in either order -> ạ̀ (precomposed dot-below + grave)
  EXPECT_EQ(nfc_normalize("a\xCC\x80\xCC\xA3"), nfc_normalize("a\xCC\xA3\xCC\x80"));
  EXPECT_EQ(nfc_normalize("a\xCC\xA3\xCC\x80"), "\xE1\xBA\xA1\xCC\x80");
  EXPECT_EQ(nfc_normalize("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc_normalize("\xFF\xCC\x81"), "\xFF\xCC\x81");  // invalid input unchanged
  EXPECT_EQ(nfc_normalize("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // composition exclusion stays decomposed
}

TEST(Unicode, IncompleteTail) {
  using tok::utf8_incomplete_tail;
  EXPECT_EQ(utf8_incomplete_tail(""), 0u);
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("\xF5"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(utf8_incomplete_tail("\x80\x80"), 0u);
}

// ---------------------------------------------------------------------------

TEST(TokenizerErrors, BadSpecsAreReported) {
  VocabSpec empty;
  empty.model = "llama";
  EXPECT_FALSE(Tokenizer::from_spec(empty).is_ok());
  VocabSpec bert = spm_spec({});
  bert.model = "bert";
  auto r = Tokenizer::from_spec(bert);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("bert"), std::string::npos);
  VocabSpec short_scores = spm_spec({});
  short_scores.scores.resize(3);
  EXPECT_FALSE(Tokenizer::from_spec(short_scores).is_ok());
  VocabSpec unknown_pre = bpe_spec({"a b"}, {});
  unknown_pre.pre = "no-such-pre-tokenizer";
  EXPECT_FALSE(Tokenizer::from_spec(unknown_pre).is_ok());
  VocabSpec bad_regex = bpe_spec({"a b"}, {});
  bad_regex.pre_regex = {"(unclosed"};
  EXPECT_FALSE(Tokenizer::from_spec(bad_regex).is_ok());
}

TEST(TokenizerErrors, BadMetadataIsReported) {
  Metadata md;
  EXPECT_FALSE(Tokenizer::from_metadata(md).is_ok());
  md.set("tokenizer.ggml.model", Metadata::make_string("llama"));
  EXPECT_FALSE(Tokenizer::from_metadata(md).is_ok());  // no tokens
  md.set("tokenizer.ggml.tokens", Metadata::make_string("not an array"));
  EXPECT_FALSE(Tokenizer::from_metadata(md).is_ok());
  // A valid spec written as metadata loads back.
  Metadata good;
  vocab_spec_to_metadata(spm_spec({{"a", -1}}), &good);
  auto tok = Tokenizer::from_metadata(good);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->n_vocab(), 260);
  good.set("tokenizer.ggml.bos_token_id", Metadata::make_string("x"));
  EXPECT_FALSE(Tokenizer::from_metadata(good).is_ok());
}

TEST(TokenizerErrors, BadHfFoldersAreReported) {
  namespace fs = std::filesystem;
  Metadata md;
  EXPECT_FALSE(metadata_from_hf_tokenizer("/nonexistent/folder", &md).is_ok());
  const fs::path dir = fs::temp_directory_path() / ("ember_tok_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& text) { std::ofstream(dir / "tokenizer.json") << text; };
  write("{not json");
  EXPECT_FALSE(metadata_from_hf_tokenizer(dir.string(), &md).is_ok());
  write(R"({"model": {"type": "Unigram", "vocab": []}})");
  auto st = metadata_from_hf_tokenizer(dir.string(), &md);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("Unigram"), std::string::npos);
  write(R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {"a": 0}, "merges": []}})");
  st = metadata_from_hf_tokenizer(dir.string(), &md);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("tokenizer.model"), std::string::npos);
  write(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
            "added_tokens": [{"id": 3, "content": "<|end|>", "special": true}]})");
  VocabSpec spec;
  ASSERT_TRUE(vocab_spec_from_hf_tokenizer(dir.string(), &spec).is_ok());
  EXPECT_EQ(spec.tokens.size(), 4u);
  EXPECT_EQ(spec.pre, "gpt-2");
  EXPECT_EQ(spec.token_types[3], kControl);
  write(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})");
  EXPECT_FALSE(metadata_from_hf_tokenizer(dir.string(), &md).is_ok());
  fs::remove_all(dir);
}

TEST(TokenizerErrors, OutOfRangeIdsDecodeToNothing) {
  auto tok = build(spm_spec({{"a", -1}}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->decode({-1, 1 << 30, tok->token_id("a")}), "a");
  EXPECT_EQ(tok->token_text(-3), "");
  EXPECT_EQ(tok->token_to_piece(99999), "");
  EXPECT_FALSE(tok->is_eog(-1));
  EXPECT_EQ(tok->token_type(-1), TokenType::kUndefined);
  EXPECT_EQ(tok->token_type(0), TokenType::kUnknown);
}

}  // namespace
}  // namespace ember
