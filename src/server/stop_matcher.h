// Stop strings for generated text: finds the earliest occurrence of any stop
// string in a stream of text pieces, matching across token boundaries, and
// holds back a tail that could still become a stop string so that no part of
// a stop string ever reaches the client (OpenAI semantics: the output ends
// just before the stop string, which is not included).
#pragma once

#include <string>
#include <vector>

namespace ember {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);

  // Adds generated text; returns the text that is now safe to emit. After a
  // stop string is found, stopped() is true and later pushes return "".
  std::string push(const std::string& piece);
  // End of generation: returns whatever was held back (unless stopped).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched (valid when stopped()).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string held_;  // text not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace ember
