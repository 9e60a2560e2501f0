// Test helper: a byte-level BPE vocabulary (every byte a token, no merges)
// with gpt-oss's harmony markers as control tokens, for driving the
// harmony parser and processors with real token ids.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ember {

// A byte-level vocabulary with the harmony markers as control tokens.
inline std::unique_ptr<Tokenizer> harmony_tokenizer() {
  VocabSpec s;
  s.model = "gpt2";
  s.pre = "gpt-2";
  // GPT-2's byte -> printable code point map.
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  std::vector<std::string> by_byte(256);
  for (size_t i = 0; i < bs.size(); ++i) {
    const int c = cs[i];
    std::string u;
    if (c < 0x80) {
      u.push_back(static_cast<char>(c));
    } else {
      u.push_back(static_cast<char>(0xC0 | (c >> 6)));
      u.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    by_byte[bs[i]] = u;
  }
  for (const auto& u : by_byte) s.tokens.push_back(u);
  s.token_types.assign(256, 1);
  for (const char* m : {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>",
                        "<|constrain|>", "<|endoftext|>"}) {
    s.tokens.push_back(m);
    s.token_types.push_back(3);
  }
  s.add_bos = false;
  auto tok = Tokenizer::from_spec(std::move(s));
  EXPECT_TRUE(tok.is_ok()) << tok.status().message();
  return tok.is_ok() ? std::move(tok.value()) : nullptr;
}

}  // namespace ember
