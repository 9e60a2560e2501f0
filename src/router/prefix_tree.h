// An approximate radix tree of the prompts a router recently sent to one
// worker (SGLang's cache-aware router keeps one per worker): the router
// cannot see a worker's KV cache, so it remembers what it routed there and
// assumes the worker's prefix cache holds it. Keys are the routing keys of
// requests (text, compared byte by byte, no tokenizer); edges are compressed
// (radix tree); every node records when a prompt last passed through it, and
// the tree is kept under a byte budget by evicting least recently used leaves.
//
// Not thread-safe: the router guards each tree with its own mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace ember::router {

class PrefixTree {
 public:
  // max_bytes: the tree is trimmed back to 90% of it when an insert passes it.
  explicit PrefixTree(size_t max_bytes = size_t{16} << 20);
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  // Length of the longest prefix of key that the tree holds (a prefix of
  // some inserted key). Does not change recency.
  size_t match(std::string_view key) const;
  // Adds key (every prefix of it becomes matchable) and marks its path as
  // used now. Trims least recently used leaves when over the budget.
  void insert(std::string_view key);
  // Bytes of key text held (the sum of edge lengths).
  size_t bytes() const { return bytes_; }
  size_t n_nodes() const { return n_nodes_; }
  void clear();

 private:
  struct Node {
    std::string edge;  // bytes on the edge from the parent to this node
    Node* parent = nullptr;
    std::map<unsigned char, std::unique_ptr<Node>> children;  // by the first byte of the child's edge
    uint64_t last_use = 0;
  };
  void trim(size_t target);

  std::unique_ptr<Node> root_;
  size_t max_bytes_;
  size_t bytes_ = 0;
  size_t n_nodes_ = 1;
  uint64_t clock_ = 0;  // logical time: one tick per insert
};

}  // namespace ember::router
