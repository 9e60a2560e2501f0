// The router's approximate prefix tree; see prefix_tree.h.
#include "router/prefix_tree.h"

#include <algorithm>
#include <vector>

namespace ember::router {

PrefixTree::PrefixTree(size_t max_bytes) : root_(std::make_unique<Node>()), max_bytes_(std::max<size_t>(max_bytes, 1)) {}

PrefixTree::~PrefixTree() { clear(); }

void PrefixTree::clear() {
  // Iterative teardown: a long chain of nodes must not recurse.
  std::vector<std::unique_ptr<Node>> stack;
  for (auto& [c, child] : root_->children) stack.push_back(std::move(child));
  root_->children.clear();
  while (!stack.empty()) {
    std::unique_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    for (auto& [c, child] : n->children) stack.push_back(std::move(child));
  }
  bytes_ = 0;
  n_nodes_ = 1;
}

size_t PrefixTree::match(std::string_view key) const {
  const Node* n = root_.get();
  size_t pos = 0;
  while (pos < key.size()) {
    auto it = n->children.find(static_cast<unsigned char>(key[pos]));
    if (it == n->children.end()) break;
    const Node* child = it->second.get();
    const std::string& e = child->edge;
    size_t k = 0;
    while (k < e.size() && pos + k < key.size() && e[k] == key[pos + k]) ++k;
    pos += k;
    if (k < e.size()) break;  // diverged (or key ended) inside the edge
    n = child;
  }
  return pos;
}

void PrefixTree::insert(std::string_view key) {
  const uint64_t now = ++clock_;
  Node* n = root_.get();
  n->last_use = now;
  size_t pos = 0;
  while (pos < key.size()) {
    const unsigned char c = static_cast<unsigned char>(key[pos]);
    auto it = n->children.find(c);
    if (it == n->children.end()) {
      auto leaf = std::make_unique<Node>();
      leaf->edge.assign(key.substr(pos));
      leaf->parent = n;
      leaf->last_use = now;
      bytes_ += leaf->edge.size();
      ++n_nodes_;
      n->children.emplace(c, std::move(leaf));
      break;
    }
    Node* child = it->second.get();
    const std::string& e = child->edge;
    size_t k = 0;
    while (k < e.size() && pos + k < key.size() && e[k] == key[pos + k]) ++k;
    if (k < e.size()) {
      // Split the edge at k: a middle node takes the common part.
      auto mid = std::make_unique<Node>();
      mid->edge = e.substr(0, k);
      mid->parent = n;
      mid->last_use = now;
      std::unique_ptr<Node> old = std::move(it->second);
      old->edge.erase(0, k);
      old->parent = mid.get();
      const unsigned char oc = static_cast<unsigned char>(old->edge[0]);
      mid->children.emplace(oc, std::move(old));
      Node* m = mid.get();
      it->second = std::move(mid);
      ++n_nodes_;  // the split adds a node, no bytes
      n = m;
      pos += k;
      continue;
    }
    child->last_use = now;
    n = child;
    pos += k;
  }
  if (bytes_ > max_bytes_) trim(max_bytes_ - max_bytes_ / 10);
}

void PrefixTree::trim(size_t target) {
  // Collect the leaves, evict the least recently used first; a parent that
  // becomes a leaf joins the candidates (its last_use is at least as recent
  // as any of its children's, so order is kept by re-sorting lazily).
  std::vector<Node*> leaves;
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    if (n->children.empty() && n != root_.get()) leaves.push_back(n);
    for (auto& [c, child] : n->children) stack.push_back(child.get());
  }
  auto older = [](const Node* a, const Node* b) { return a->last_use > b->last_use; };  // min-heap on last_use
  std::make_heap(leaves.begin(), leaves.end(), older);
  while (bytes_ > target && !leaves.empty()) {
    std::pop_heap(leaves.begin(), leaves.end(), older);
    Node* leaf = leaves.back();
    leaves.pop_back();
    Node* parent = leaf->parent;
    bytes_ -= leaf->edge.size();
    --n_nodes_;
    parent->children.erase(static_cast<unsigned char>(leaf->edge[0]));
    if (parent != root_.get() && parent->children.empty()) {
      leaves.push_back(parent);
      std::push_heap(leaves.begin(), leaves.end(), older);
    }
  }
}

}  // namespace ember::router
