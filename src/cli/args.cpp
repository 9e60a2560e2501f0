// Command-line parser; see args.h.
#include "cli/args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

namespace ember::cli {

namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= names.size()) {
    size_t e = names.find(',', b);
    if (e == std::string::npos) e = names.size();
    if (e > b) out.push_back(names.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

Status parse_i64(const std::string& name, const std::string& v, int64_t lo, int64_t hi, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != 0 || errno == ERANGE) return Status::errorf("{} expects an integer, got '{}'", name, v);
  if (x < lo || x > hi) return Status::errorf("{} must be in [{}, {}], got {}", name, lo, hi, x);
  *out = x;
  return Status::ok();
}

}  // namespace

void ArgParser::add(const std::string& names, const std::string& metavar, const std::string& help, bool is_flag,
                    std::function<Status(const std::string&)> set) {
  opts_.push_back(Opt{split_names(names), metavar, help, is_flag, std::move(set)});
}

void ArgParser::flag(const std::string& names, bool* out, const std::string& help) {
  add(names, "", help, true, [out](const std::string&) {
    *out = true;
    return Status::ok();
  });
}

void ArgParser::option(const std::string& names, std::string* out, const std::string& metavar,
                       const std::string& help) {
  add(names, metavar, help, false, [out](const std::string& v) {
    *out = v;
    return Status::ok();
  });
}

void ArgParser::option(const std::string& names, int* out, const std::string& metavar, const std::string& help) {
  const std::string n = split_names(names).back();
  add(names, metavar, help, false, [out, n](const std::string& v) {
    int64_t x;
    EMBER_RETURN_IF_ERROR(parse_i64(n, v, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), &x));
    *out = static_cast<int>(x);
    return Status::ok();
  });
}

void ArgParser::option(const std::string& names, int64_t* out, const std::string& metavar,
                       const std::string& help) {
  const std::string n = split_names(names).back();
  add(names, metavar, help, false, [out, n](const std::string& v) {
    return parse_i64(n, v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), out);
  });
}

void ArgParser::option(const std::string& names, uint64_t* out, const std::string& metavar,
                       const std::string& help) {
  const std::string n = split_names(names).back();
  add(names, metavar, help, false, [out, n](const std::string& v) {
    errno = 0;
    char* end = nullptr;
    unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || v[0] == '-' || *end != 0 || errno == ERANGE)
      return Status::errorf("{} expects a non-negative integer, got '{}'", n, v);
    *out = x;
    return Status::ok();
  });
}

void ArgParser::option(const std::string& names, float* out, const std::string& metavar, const std::string& help) {
  const std::string n = split_names(names).back();
  add(names, metavar, help, false, [out, n](const std::string& v) {
    errno = 0;
    char* end = nullptr;
    float x = std::strtof(v.c_str(), &end);
    if (v.empty() || *end != 0 || errno == ERANGE || !std::isfinite(x))
      return Status::errorf("{} expects a number, got '{}'", n, v);
    *out = x;
    return Status::ok();
  });
}

void ArgParser::positionals(std::vector<std::string>* out, const std::string& metavar) {
  positionals_ = out;
  pos_metavar_ = metavar;
}

Status ArgParser::parse(int argc, char** argv, int first) {
  bool only_positional = false;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (!only_positional && a == "--") {
      only_positional = true;
      continue;
    }
    if (!only_positional && (a == "-h" || a == "--help")) {
      help_ = true;
      return Status::ok();
    }
    if (!only_positional && a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(a[1]) || a[1] == '.'))) {
      std::string name = a, value;
      bool has_value = false;
      size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        has_value = true;
      }
      const Opt* opt = nullptr;
      for (const Opt& o : opts_)
        for (const std::string& n : o.names)
          if (n == name) opt = &o;
      if (!opt) return Status::errorf("unknown option '{}'", name);
      if (opt->is_flag) {
        if (has_value) return Status::errorf("{} takes no value", name);
        EMBER_RETURN_IF_ERROR(opt->set(""));
        continue;
      }
      if (!has_value) {
        if (i + 1 >= argc) return Status::errorf("{} expects a value ({})", name, opt->metavar);
        value = argv[++i];
      }
      EMBER_RETURN_IF_ERROR(opt->set(value));
      continue;
    }
    if (a == "-" || !positionals_ || only_positional || a[0] != '-' || a.size() == 1 || std::isdigit(a[1]) ||
        a[1] == '.') {
      if (!positionals_) return Status::errorf("unexpected argument '{}'", a);
      positionals_->push_back(a);
      continue;
    }
  }
  return Status::ok();
}

std::string ArgParser::help_text() const {
  std::string s = fmt::format("usage: {}\n\noptions:\n", usage_);
  for (const Opt& o : opts_) {
    std::string names;
    for (const std::string& n : o.names) names += (names.empty() ? "" : ", ") + n;
    if (!o.metavar.empty()) names += " " + o.metavar;
    s += fmt::format("  {:<28} {}\n", names, o.help);
  }
  s += fmt::format("  {:<28} {}\n", "-h, --help", "show this help");
  return s;
}

int usage_error(const ArgParser& p, const std::string& msg) {
  std::fprintf(stderr, "ember %s: %s\n(run 'ember %s --help' for usage)\n", p.command().c_str(), msg.c_str(),
               p.command().c_str());
  return kExitUsage;
}

}  // namespace ember::cli
