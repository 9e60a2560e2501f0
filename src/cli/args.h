// Minimal command-line parser for ember subcommands: declared options with
// typed targets, clear errors ("ember run: --temp expects a number, got 'x'").
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ember::cli {

// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // runtime failure
constexpr int kExitUsage = 2;    // bad arguments, missing file, bad model

class ArgParser {
 public:
  ArgParser(std::string command, std::string usage) : command_(std::move(command)), usage_(std::move(usage)) {}

  void flag(const std::string& names, bool* out, const std::string& help);
  void option(const std::string& names, std::string* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, int* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, int64_t* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, uint64_t* out, const std::string& metavar, const std::string& help);
  void option(const std::string& names, float* out, const std::string& metavar, const std::string& help);
  // Positional arguments are collected in order.
  void positionals(std::vector<std::string>* out, const std::string& metavar);

  // Parses argv[first..]. On error returns a message (without the prefix).
  // Sets help_requested() for -h/--help.
  Status parse(int argc, char** argv, int first);
  bool help_requested() const { return help_; }
  std::string help_text() const;
  const std::string& command() const { return command_; }

 private:
  struct Opt {
    std::vector<std::string> names;
    std::string metavar, help;
    bool is_flag = false;
    std::function<Status(const std::string&)> set;
  };
  void add(const std::string& names, const std::string& metavar, const std::string& help, bool is_flag,
           std::function<Status(const std::string&)> set);
  std::string command_, usage_;
  std::vector<Opt> opts_;
  std::vector<std::string>* positionals_ = nullptr;
  std::string pos_metavar_;
  bool help_ = false;
};

// Prints "ember <cmd>: <msg>" and the usage hint to stderr; returns kExitUsage.
int usage_error(const ArgParser& p, const std::string& msg);

}  // namespace ember::cli
