// Token ids and decoded text against the committed reference fixtures:
// Gemma 3 (llama.cpp on the default GGUF), Llama 3.2 and Qwen3 (Hugging Face
// tokenizers on their tokenizer.json). Regenerate the fixtures with
// tools/gen_tokenizer_fixtures.py.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_util.h"
#include "tokenizer_test_util.h"

namespace ember {
namespace {

using namespace testing_tok;

// Checks every case: ids, decode == reference decode, streaming == decode,
// and decode(encode(s)) == s where the reference round-trips.
void check_cases(const Tokenizer& tok, const std::vector<Case>& cases, const char* name) {
  ASSERT_GE(cases.size(), 500u) << name;
  size_t id_failures = 0, roundtrips = 0;
  for (const Case& c : cases) {
    const auto ids = tok.encode(c.text, EncodeOptions{c.add_special, c.special});
    if (ids != c.ids) {
      ++id_failures;
      if (id_failures <= 10) {
        ADD_FAILURE() << name << ": ids differ for text '" << c.text << "' (add_special=" << c.add_special
                      << " special=" << c.special << ")\n  expected " << show_ids(c.ids) << "\n  got      "
                      << show_ids(ids);
      }
      continue;
    }
    const std::string dec = tok.decode(c.ids);
    EXPECT_EQ(dec, c.decoded) << name << ": decode of " << show_ids(c.ids);
    StreamDecoder sd(tok);
    std::string streamed;
    for (int32_t id : c.ids) streamed += sd.push(id);
    streamed += sd.flush();
    EXPECT_EQ(streamed, dec) << name << ": streaming decode of " << show_ids(c.ids);
    if (c.decoded == c.text) {
      ++roundtrips;
      EXPECT_EQ(tok.decode(tok.encode(c.text, EncodeOptions{false, false})), c.text) << name;
    }
  }
  EXPECT_EQ(id_failures, 0u) << name << ": " << id_failures << " of " << cases.size() << " cases differ";
  EXPECT_GT(roundtrips, cases.size() / 2) << name;
}

TEST(TokenizerReference, Gemma3MatchesLlamaCpp) {
  const Tokenizer* tok = gemma_tokenizer();
  if (!tok) GTEST_SKIP() << "default model not found: " << gemma_path();
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kSentencePieceBpe);
  EXPECT_EQ(tok->n_vocab(), 262144);
  EXPECT_EQ(tok->bos_id(), 2);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->eot_id(), 106);  // <end_of_turn>
  EXPECT_TRUE(tok->is_eog(1));
  EXPECT_TRUE(tok->is_eog(106));
  EXPECT_FALSE(tok->is_eog(105));
  EXPECT_FALSE(tok->add_space_prefix());
  check_cases(*tok, read_cases(data_dir() + "/gemma3_cases.jsonl"), "gemma3");
}

TEST(TokenizerReference, Llama3MatchesHfTokenizers) {
  const Tokenizer* tok = hf_tokenizer("llama3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kByteLevelBpe);
  EXPECT_EQ(tok->n_vocab(), 128257);
  EXPECT_EQ(tok->bos_id(), tok->token_id("<|begin_of_text|>"));
  EXPECT_TRUE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(tok->token_id("<|eot_id|>")));
  EXPECT_TRUE(tok->is_eog(tok->token_id("<|eom_id|>")));
  EXPECT_TRUE(tok->is_eog(tok->token_id("<|end_of_text|>")));
  check_cases(*tok, read_cases(data_dir() + "/llama3_cases.jsonl"), "llama3");
}

TEST(TokenizerReference, Qwen3MatchesHfTokenizers) {
  const Tokenizer* tok = hf_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), Tokenizer::Kind::kByteLevelBpe);
  EXPECT_EQ(tok->n_vocab(), 151669);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_TRUE(tok->is_eog(tok->token_id("<|im_end|>")));
  EXPECT_TRUE(tok->is_eog(tok->token_id("<|endoftext|>")));
  EXPECT_FALSE(tok->is_eog(tok->token_id("<|im_start|>")));
  EXPECT_FALSE(tok->chat_template().empty());
  check_cases(*tok, read_cases(data_dir() + "/qwen3_cases.jsonl"), "qwen3");
}

// chat_template.jinja (transformers >= 4.47 saves the template there; the
// gpt-oss checkpoints ship it so) is read and wins over tokenizer_config.json's.
TEST(TokenizerReference, ChatTemplateJinjaFileWins) {
  const std::string dir = unpack_hf_fixture("qwen3");
  ASSERT_FALSE(dir.empty());
  VocabSpec base;
  ASSERT_TRUE(vocab_spec_from_hf_tokenizer(dir, &base).is_ok());
  ASSERT_FALSE(base.chat_template.empty());  // tokenizer_config.json's
  const std::string tmpl = "{%- for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}";
  {
    std::ofstream f(dir + "/chat_template.jinja", std::ios::binary);
    f << tmpl;
  }
  VocabSpec with_file;
  ASSERT_TRUE(vocab_spec_from_hf_tokenizer(dir, &with_file).is_ok());
  EXPECT_EQ(with_file.chat_template, tmpl);
  EXPECT_EQ(with_file.tokens, base.tokens);
  {
    std::ofstream f(dir + "/chat_template.jinja", std::ios::binary | std::ios::trunc);
  }
  VocabSpec empty;
  const Status st = vocab_spec_from_hf_tokenizer(dir, &empty);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("chat_template.jinja"), std::string::npos) << st.message();
  std::filesystem::remove_all(dir);
}

// Hugging Face SentencePiece folder (tokenizer.model + tokenizer.json): a
// small BPE model trained by tools/gen_tokenizer_spm_fixture.py, reference
// ids from sentencepiece.
TEST(TokenizerReference, SentencePieceHfFolderMatchesSentencePiece) {
  Metadata md;
  md.set("ember.hf.dir", Metadata::make_string(data_dir() + "/spm_tiny"));
  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  EXPECT_EQ((*tok)->kind(), Tokenizer::Kind::kSentencePieceBpe);
  EXPECT_TRUE((*tok)->add_space_prefix());
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->unk_id(), 0);
  EXPECT_EQ((*tok)->token_type((*tok)->token_id("<tool>")), TokenType::kUserDefined);
  EXPECT_EQ((*tok)->token_type((*tok)->token_id("<start_of_turn>")), TokenType::kControl);
  check_cases(**tok, read_cases(data_dir() + "/spm_tiny_cases.jsonl"), "spm_tiny");

  // A folder with only tokenizer.model (older repositories) gives the same
  // ids for text without added tokens.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ember_tok_spm_only_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(data_dir() + "/spm_tiny/tokenizer.model", dir / "tokenizer.model");
  Metadata md2;
  md2.set("ember.hf.dir", Metadata::make_string(dir.string()));
  auto tok2 = Tokenizer::from_metadata(md2);
  fs::remove_all(dir);
  ASSERT_TRUE(tok2.is_ok()) << tok2.status().message();
  for (const char* text : {"Hello world", "  two  spaces", "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 123"}) {
    EXPECT_EQ((*tok2)->encode(text), (*tok)->encode(text)) << text;
  }
}

// User text must not be able to inject control tokens; templates can.
TEST(TokenizerReference, ControlTokensOnlyWithParseSpecial) {
  struct Item {
    const Tokenizer* tok;
    const char* text;
  };
  std::vector<Item> items;
  if (const Tokenizer* g = gemma_tokenizer()) items.push_back({g, "<start_of_turn>"});
  if (const Tokenizer* q = hf_tokenizer("qwen3")) items.push_back({q, "<|im_start|>"});
  if (const Tokenizer* l = hf_tokenizer("llama3")) items.push_back({l, "<|eot_id|>"});
  ASSERT_GE(items.size(), 2u);
  for (const Item& it : items) {
    const int32_t id = it.tok->token_id(it.text);
    ASSERT_GE(id, 0) << it.text;
    const auto plain = it.tok->encode(it.text, EncodeOptions{false, false});
    EXPECT_GT(plain.size(), 1u) << it.text;
    for (int32_t t : plain) EXPECT_NE(t, id) << it.text;
    EXPECT_EQ(it.tok->decode(plain), it.text);
    const auto parsed = it.tok->encode(it.text, EncodeOptions{false, true});
    EXPECT_EQ(parsed, std::vector<int32_t>{id}) << it.text;
    EXPECT_EQ(it.tok->decode(parsed), "");
    EXPECT_EQ(it.tok->decode(parsed, /*render_special=*/true), it.text);
  }
}

// Arbitrary bytes never crash; SentencePiece byte fallback keeps every byte,
// byte-level BPE keeps every valid character.
TEST(TokenizerReference, RandomBytesRoundTrip) {
  std::mt19937 rng(99);
  const char* pieces[] = {"<start_of_turn>", "<|im_start|>", "<|eot_id|>", "  ", "\n\n", "\t", "\xE2\x96\x81",
                          "\xF0\x9F\x98\x80", "\xE4\xB8\xAD", "a", " ", "'s", "<", ">"};
  std::vector<std::pair<const Tokenizer*, bool>> toks;  // (tokenizer, keeps invalid bytes)
  if (const Tokenizer* g = gemma_tokenizer()) toks.push_back({g, true});
  if (const Tokenizer* q = hf_tokenizer("qwen3")) toks.push_back({q, false});
  if (const Tokenizer* l = hf_tokenizer("llama3")) toks.push_back({l, false});
  ASSERT_GE(toks.size(), 2u);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int n = rng() % 20;
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {
        s += static_cast<char>(rng() % 256);
      } else {
        s += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
      }
    }
    for (auto [tok, keeps_bytes] : toks) {
      for (bool special : {false, true}) {
        const auto ids = tok->encode(s, EncodeOptions{false, special});
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->n_vocab());
        if (special) continue;
        const std::string back = tok->decode(ids);
        if (keeps_bytes) {
          // SentencePiece writes spaces as U+2581, so a literal U+2581 in the
          // input may come back as a space (as in llama.cpp and sentencepiece):
          // compare with U+2581 read as a space on both sides.
          auto spaces = [](std::string t) {
            for (size_t p = t.find("\xE2\x96\x81"); p != std::string::npos; p = t.find("\xE2\x96\x81", p)) {
              t.replace(p, 3, " ");
            }
            return t;
          };
          EXPECT_EQ(spaces(back), spaces(s));
        } else if (tok::utf8_is_valid(s)) {
          EXPECT_EQ(back, s);
        } else {
          EXPECT_EQ(back, tok::utf8_repair(s));
        }
      }
    }
  }
}

TEST(TokenizerReference, MetadataRoundTripKeepsBehaviour) {
  const Tokenizer* ref = hf_tokenizer("qwen3");
  ASSERT_NE(ref, nullptr);
  const std::string dir = unpack_hf_fixture("qwen3");
  ASSERT_FALSE(dir.empty());
  Metadata md;
  ASSERT_TRUE(metadata_from_hf_tokenizer(dir, &md).is_ok());
  std::filesystem::remove_all(dir);
  ASSERT_NE(md.get_string("tokenizer.ggml.model"), nullptr);
  EXPECT_EQ(*md.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*md.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(*md.get_string("ember.tokenizer.normalizer"), "NFC");
  auto tok = Tokenizer::from_metadata(md);
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  const std::string text = "Hello <think>world</think> 12345 caf\u00e9 e\u0301 <|im_start|>";
  EXPECT_EQ((*tok)->encode(text), ref->encode(text));
}

}  // namespace
}  // namespace ember
