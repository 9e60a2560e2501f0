// JSON Schema -> GBNF; see json_schema.h.
#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "grammar/regex.h"

namespace ember::grammar {

using json = nlohmann::ordered_json;

namespace {

// The generic JSON rules (every value rule ends with its trailing space).
const char* const kGenericRules = R"(j-ws ::= | " " | "\n" [ \t]{0,20}
j-value ::= j-object | j-array | j-string | j-number | j-boolean | j-null
j-object ::= "{" j-ws ( j-string ":" j-ws j-value ( "," j-ws j-string ":" j-ws j-value )* )? "}" j-ws
j-array ::= "[" j-ws ( j-value ( "," j-ws j-value )* )? "]" j-ws
j-string ::= "\"" j-char* "\"" j-ws
j-char ::= [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4})
j-int ::= "0" | [1-9] [0-9]{0,15}
j-frac ::= "." [0-9]{1,16}
j-number ::= "-"? j-int j-frac? ([eE] [-+]? [0-9]{1,3})? j-ws
j-integer ::= "-"? j-int j-ws
j-boolean ::= ("true" | "false") j-ws
j-null ::= "null" j-ws
)";

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions", "strict", "discriminator", "x-order"};

std::string digits_class(char lo, char hi) {
  if (lo == hi) return fmt::format("\"{}\"", lo);
  return fmt::format("[{}-{}]", lo, hi);
}

// Decimal strings of the same length n, a <= x <= b (a, b of length n).
std::string same_len_range(const std::string& a, const std::string& b) {
  if (a.empty()) return "";
  if (a == b) return fmt::format("\"{}\"", a);
  const size_t n = a.size();
  if (a[0] == b[0]) {
    std::string rest = same_len_range(a.substr(1), b.substr(1));
    return fmt::format("\"{}\" {}", a[0], rest);
  }
  const std::string zeros(n - 1, '0'), nines(n - 1, '9');
  auto tail_any = [&](size_t k) { return k == 0 ? std::string() : fmt::format(" [0-9]{{{}}}", k); };
  if (a.substr(1) == zeros && b.substr(1) == nines) return digits_class(a[0], b[0]) + tail_any(n - 1);
  std::vector<std::string> alts;
  char lo = a[0], hi = b[0];
  if (a.substr(1) != zeros) {
    alts.push_back(fmt::format("\"{}\" ({})", a[0], same_len_range(a.substr(1), nines)));
    ++lo;
  }
  std::string top;
  if (b.substr(1) != nines) {
    top = fmt::format("\"{}\" ({})", b[0], same_len_range(zeros, b.substr(1)));
    --hi;
  }
  if (lo <= hi) alts.push_back(digits_class(lo, hi) + tail_any(n - 1));
  if (!top.empty()) alts.push_back(top);
  std::string s;
  for (const auto& x : alts) s += (s.empty() ? "" : " | ") + x;
  return "(" + s + ")";
}

constexpr int64_t kMaxBound = 999999999999999;  // 15 digits (j-int allows 16)

// Unsigned decimal integers without leading zeros in [lo, hi] (hi < 0: unbounded).
std::string uint_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo == 0) {
    alts.push_back("\"0\"");
    lo = 1;
  }
  if (hi >= 0 && lo > hi) return alts.empty() ? "" : alts[0];
  const int dl = static_cast<int>(std::to_string(lo).size());
  const int dh = hi >= 0 ? static_cast<int>(std::to_string(hi).size()) : 16;
  for (int d = dl; d <= dh; ++d) {
    const int64_t p = static_cast<int64_t>(std::pow(10.0, d - 1));
    const int64_t a = std::max(lo, p);
    if (hi < 0 && d == 16) {
      if (a == p) alts.push_back("[1-9] [0-9]{15}");
      continue;
    }
    const int64_t top = d >= 16 ? kMaxBound * 10 + 9 : p * 10 - 1;
    const int64_t b = hi >= 0 ? std::min(hi, top) : top;
    if (a > b) continue;
    alts.push_back(same_len_range(std::to_string(a), std::to_string(b)));
  }
  std::string s;
  for (const auto& x : alts) s += (s.empty() ? "" : " | ") + x;
  return "(" + s + ")";
}

class SchemaConverter {
 public:
  explicit SchemaConverter(const json& root) : root_(root) {}

  Result<std::string> run(SchemaError* err) {
    const std::string body = visit(root_, "root", "");
    if (!ok_) {
      if (err) *err = err_;
      return Status::errorf("{}{}", err_.message, err_.path.empty() ? "" : " (at " + err_.path + ")");
    }
    std::string out = fmt::format("root ::= {}\n", body);
    for (const auto& [name, b] : rules_) out += fmt::format("{} ::= {}\n", name, b);
    return out + kGenericRules;
  }

 private:
  void fail(std::string m, const std::string& path) {
    if (!ok_) return;
    ok_ = false;
    err_ = {std::move(m), path};
  }
  std::string new_name(const std::string& hint) {
    std::string n = "s-";
    for (char c : hint) n += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    std::string name = n;
    for (int k = 2; rules_.count(name) || reserved_.count(name); ++k) name = fmt::format("{}{}", n, k);
    reserved_.insert(name);
    return name;
  }
  std::string rule(const std::string& hint, const std::string& body) {
    if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
    const std::string name = new_name(hint);
    rules_[name] = body;
    by_body_[body] = name;
    return name;
  }
  static std::string lit(const json& v) { return gbnf_literal(v.dump()); }

  std::string resolve_ref(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const json* target = nullptr;
    std::string hint = "ref";
    if (ref == "#") {
      target = &root_;
    } else if (ref.rfind("#/", 0) == 0) {
      json::json_pointer ptr;
      try {
        ptr = json::json_pointer(ref.substr(1));
      } catch (...) {
        fail(fmt::format("invalid $ref '{}'", ref), path);
        return "";
      }
      if (root_.contains(ptr)) target = &root_.at(ptr);
      hint = ref.substr(ref.rfind('/') + 1);
    } else {
      fail(fmt::format("$ref '{}' is not supported (only local references '#/...')", ref), path + "/$ref");
      return "";
    }
    if (!target) {
      fail(fmt::format("$ref '{}' does not resolve", ref), path + "/$ref");
      return "";
    }
    const std::string name = new_name(hint);
    refs_[ref] = name;
    rules_[name] = "";  // placeholder while the body is built (recursion)
    rules_[name] = visit(*target, hint, ref.substr(1));
    return name;
  }

  std::optional<int64_t> int_bound(const json& s, const char* key, const std::string& path, bool lower) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number()) {
      fail(fmt::format("'{}' must be a number", key), path + "/" + key);
      return std::nullopt;
    }
    double v = it->get<double>();
    v = lower ? std::ceil(v) : std::floor(v);
    return static_cast<int64_t>(std::clamp(v, -static_cast<double>(kMaxBound), static_cast<double>(kMaxBound)));
  }

  std::string visit_integer(const json& s, const std::string& path) {
    auto lo = int_bound(s, "minimum", path, true);
    auto hi = int_bound(s, "maximum", path, false);
    if (auto xlo = int_bound(s, "exclusiveMinimum", path, false)) lo = std::max(lo.value_or(*xlo + 1), *xlo + 1);
    if (auto xhi = int_bound(s, "exclusiveMaximum", path, true)) hi = std::min(hi.value_or(*xhi - 1), *xhi - 1);
    if (!ok_) return "";
    if (!lo && !hi) return "j-integer";
    if (lo && hi && *lo > *hi) {
      fail("integer bounds admit no value", path);
      return "";
    }
    std::vector<std::string> alts;
    if (!lo || *lo < 0) {
      // Negative values -x with x in [max(1, -hi), -lo].
      const int64_t nlo = hi && *hi < 0 ? -*hi : 1;
      const int64_t nhi = lo ? -*lo : -1;
      alts.push_back("\"-\" " + uint_range(nlo, nhi));
    }
    if (!hi || *hi >= 0) alts.push_back(uint_range(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1));
    std::string body;
    for (const auto& a : alts) body += (body.empty() ? "" : " | ") + a;
    return rule("int", "(" + body + ") j-ws");
  }

  std::string visit_number(const json& s, const std::string& path) {
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      auto it = s.find(k);
      if (it == s.end()) continue;
      if (!it->is_number() || std::floor(it->get<double>()) != it->get<double>() || it->get<double>() < 0 ||
          it->get<double>() > static_cast<double>(kMaxBound))
        fail(fmt::format("number bound '{}' = {} is not supported (only non-negative integer bounds)", k, it->dump()),
             path + "/" + k);
    }
    if (!ok_) return "";
    auto get = [&](const char* k) -> std::optional<int64_t> {
      auto it = s.find(k);
      if (it == s.end()) return std::nullopt;
      return static_cast<int64_t>(it->get<double>());
    };
    auto mn = get("minimum"), mx = get("maximum"), xmn = get("exclusiveMinimum"), xmx = get("exclusiveMaximum");
    if (!mn && !mx && !xmn && !xmx) return "j-number";
    const std::string frac = "j-frac";
    std::vector<std::string> alts;
    // Integer part range [a, b] with any fraction; b < 0: unbounded.
    int64_t a = 0;
    if (mn) a = *mn;
    if (xmn) {
      a = std::max(a, *xmn + 1);
      alts.push_back(fmt::format("\"{}.\" [0-9]{{0,14}} [1-9]", *xmn));  // just above the exclusive bound
    }
    int64_t b = -1;
    bool has_top = false;  // the inclusive maximum itself, with a zero fraction
    int64_t top_incl = 0;
    if (mx) {
      b = *mx - 1;
      has_top = true;
      top_incl = *mx;
    }
    if (xmx) {
      b = b < 0 ? *xmx - 1 : std::min(b, *xmx - 1);
      if (has_top && top_incl >= *xmx) has_top = false;
    }
    if (!mn && !xmn) alts.push_back("\"-\" j-int " + frac + "?");  // every negative number is below the bound
    if (b < 0 && (mx || xmx)) {
      // No whole integer part below the bound except none.
    } else if (b < 0 || a <= b) {
      alts.push_back(uint_range(a, b) + " " + frac + "?");
    }
    if (has_top && top_incl >= a && !(xmn && top_incl <= *xmn))
      alts.push_back(fmt::format("\"{}\" (\".\" \"0\"{{1,15}})?", top_incl));
    if (xmn && ((mx && *mx <= *xmn) || (xmx && *xmx <= *xmn))) alts.erase(alts.begin());
    if (alts.empty()) {
      fail("number bounds admit no value", path);
      return "";
    }
    std::string body;
    for (const auto& x : alts) body += (body.empty() ? "" : " | ") + x;
    return rule("num", "(" + body + ") j-ws");
  }

  std::string format_expr(const std::string& f, const std::string& path) {
    const std::string d2 = "[0-9] [0-9]";
    const std::string date =
        "[1-9] [0-9]{3} \"-\" ( (\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
        "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | "
        "\"2\" [0-8]) )";
    const std::string hh = "([01] [0-9] | \"2\" [0-3])";
    const std::string time = hh + " \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | [+-] " + hh +
                             " \":\" [0-5] [0-9])";
    const std::string label = "[a-zA-Z0-9] ([a-zA-Z0-9-]{0,20} [a-zA-Z0-9])?";
    const std::string host = label + " (\".\" " + label + "){0,3}";
    const std::string octet = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])";
    (void)d2;
    if (f == "date") return date;
    if (f == "time") return time;
    if (f == "date-time") return date + " \"T\" " + time;
    if (f == "uuid")
      return "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}";
    if (f == "email") return "[a-zA-Z0-9_.+-]{1,32} \"@\" " + label + " (\".\" " + label + "){1,3}";
    if (f == "ipv4") return octet + " \".\" " + octet + " \".\" " + octet + " \".\" " + octet;
    if (f == "hostname") return host;
    if (f == "uri") return "\"http\" \"s\"? \"://\" " + host + " (\"/\" [a-zA-Z0-9._~-]{0,24}){0,6}";
    fail(fmt::format("string format '{}' is not supported", f), path + "/format");
    return "";
  }

  std::string visit_string(const json& s, const std::string& path) {
    auto has = [&](const char* k) { return s.contains(k); };
    if (has("format") && (has("pattern") || has("minLength") || has("maxLength")))
      fail("'format' together with 'pattern' or length bounds is not supported", path);
    if (has("pattern") && (has("minLength") || has("maxLength")))
      fail("'pattern' together with 'minLength'/'maxLength' is not supported", path);
    if (!ok_) return "";
    if (has("format")) {
      if (!s["format"].is_string()) return fail("'format' must be a string", path + "/format"), "";
      const std::string e = format_expr(s["format"].get<std::string>(), path);
      return ok_ ? rule(s["format"].get<std::string>(), "\"\\\"\" " + e + " \"\\\"\" j-ws") : "";
    }
    if (has("pattern")) {
      if (!s["pattern"].is_string()) return fail("'pattern' must be a string", path + "/pattern"), "";
      auto e = regex_to_gbnf(s["pattern"].get<std::string>(), RegexMode::kJsonString);
      if (!e) return fail(e.status().message(), path + "/pattern"), "";
      return rule("pattern", "\"\\\"\" (" + *e + ") \"\\\"\" j-ws");
    }
    if (!has("minLength") && !has("maxLength")) return "j-string";
    auto len = [&](const char* k, int64_t dflt) -> int64_t {
      if (!has(k)) return dflt;
      if (!s[k].is_number_integer() || s[k].get<int64_t>() < 0) {
        fail(fmt::format("'{}' must be a non-negative integer", k), path + "/" + k);
        return 0;
      }
      return s[k].get<int64_t>();
    };
    const int64_t lo = len("minLength", 0);
    int64_t hi = len("maxLength", -1);
    if (!ok_) return "";
    if (lo > 4096) return fail("'minLength' above 4096 is not supported", path + "/minLength"), "";
    if (hi > 4096) hi = 4096;  // a shorter string is still valid
    if (hi >= 0 && hi < lo) return fail("'maxLength' is below 'minLength'", path), "";
    const std::string rep = hi < 0 ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
    return rule("str", "\"\\\"\" j-char" + rep + " \"\\\"\" j-ws");
  }

  std::string visit_array(const json& s, const std::string& path) {
    for (const char* k : {"uniqueItems", "contains"})
      if (s.contains(k) && !(std::string(k) == "uniqueItems" && s[k] == false))
        return fail(fmt::format("array keyword '{}' is not supported", k), path + "/" + k), "";
    auto count = [&](const char* k, int64_t dflt) -> int64_t {
      if (!s.contains(k)) return dflt;
      if (!s[k].is_number_integer() || s[k].get<int64_t>() < 0) {
        fail(fmt::format("'{}' must be a non-negative integer", k), path + "/" + k);
        return 0;
      }
      return s[k].get<int64_t>();
    };
    const int64_t lo = count("minItems", 0);
    const int64_t hi = count("maxItems", -1);
    if (!ok_) return "";
    if (lo > 1024 || hi > 1024) return fail("'minItems'/'maxItems' above 1024 are not supported", path), "";
    if (hi >= 0 && hi < lo) return fail("'maxItems' is below 'minItems'", path), "";
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return fail("'prefixItems' must be an array", path + "/prefixItems"), "";
      for (size_t k = 0; k < s["prefixItems"].size(); ++k)
        prefix.push_back(visit(s["prefixItems"][k], "item", fmt::format("{}/prefixItems/{}", path, k)));
      if (static_cast<int64_t>(prefix.size()) < lo && s.contains("items") && s["items"] == false)
        return fail("'minItems' exceeds the prefixItems with items: false", path), "";
      if (hi >= 0 && static_cast<int64_t>(prefix.size()) > hi)
        return fail("'maxItems' below the number of prefixItems is not supported", path), "";
    }
    std::string item;
    bool more = true;
    if (s.contains("items")) {
      if (s["items"] == false) {
        more = false;
      } else {
        item = visit(s["items"], "item", path + "/items");
      }
    } else {
      item = "j-value";
    }
    if (!ok_) return "";
    std::string body = "\"[\" j-ws ";
    const auto np = static_cast<int64_t>(prefix.size());
    for (int64_t k = 0; k < np; ++k) body += (k ? "\",\" j-ws " : "") + prefix[k] + " ";
    if (more) {
      const int64_t need = std::max<int64_t>(lo - np, 0);
      const int64_t cap = hi < 0 ? -1 : hi - np;
      if (np > 0) {
        const std::string rep = cap < 0 ? fmt::format("{{{},}}", need) : fmt::format("{{{},{}}}", need, cap);
        if (cap != 0) body += "(\",\" j-ws " + item + ")" + rep + " ";
      } else if (need > 0) {
        const std::string rep = cap < 0 ? fmt::format("{{{},}}", need - 1) : fmt::format("{{{},{}}}", need - 1, cap - 1);
        body += item + " (\",\" j-ws " + item + ")" + rep + " ";
      } else if (cap != 0) {
        const std::string rep = cap < 0 ? "*" : fmt::format("{{0,{}}}", cap - 1);
        body += "(" + item + " (\",\" j-ws " + item + ")" + rep + ")? ";
      }
    }
    return rule("array", body + "\"]\" j-ws");
  }

  std::string visit_object(const json& s, const std::string& path) {
    for (const char* k : {"patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
                          "dependentSchemas", "unevaluatedProperties", "dependencies"})
      if (s.contains(k)) return fail(fmt::format("object keyword '{}' is not supported", k), path + "/" + k), "";
    std::vector<std::pair<std::string, const json*>> props;
    static const json kAny = json::object();
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return fail("'properties' must be an object", path + "/properties"), "";
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) props.push_back({it.key(), &*it});
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return fail("'required' must be an array of strings", path + "/required"), "";
      for (const json& r : s["required"]) {
        if (!r.is_string()) return fail("'required' must be an array of strings", path + "/required"), "";
        required.insert(r.get<std::string>());
        bool known = false;
        for (const auto& p : props) known |= p.first == r.get<std::string>();
        if (!known) props.push_back({r.get<std::string>(), &kAny});
      }
    }
    const json* ap = s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
    if (props.empty()) {
      if (ap && *ap == false) return rule("obj", "\"{\" j-ws \"}\" j-ws");
      const std::string v = ap && ap->is_object() ? visit(*ap, "value", path + "/additionalProperties") : "j-value";
      if (!ok_) return "";
      const std::string kv = "j-string \":\" j-ws " + v;
      return rule("map", "\"{\" j-ws (" + kv + " (\",\" j-ws " + kv + ")*)? \"}\" j-ws");
    }
    std::vector<std::string> kvs;
    for (const auto& [name, schema] : props) {
      const std::string v = visit(*schema, name, path + "/properties/" + name);
      if (!ok_) return "";
      kvs.push_back(gbnf_literal(json(name).dump()) + " j-ws \":\" j-ws " + v);
    }
    const size_t k = props.size();
    // rest_i: properties i.. after at least one was written; first_i: none written yet.
    std::vector<std::string> rest(k + 1), first(k + 1);
    rest[k] = first[k] = "";
    const std::string base = new_name("obj");
    for (size_t i = k; i-- > 0;) {
      const bool req = required.count(props[i].first) > 0;
      const std::string r_next = rest[i + 1].empty() ? "" : " " + rest[i + 1];
      std::string rb = "\",\" j-ws " + kvs[i] + r_next;
      if (!req) rb = "(" + rb + ")" + (r_next.empty() ? "?" : " |" + r_next);
      rest[i] = fmt::format("{}-r{}", base, i);
      rules_[rest[i]] = rb;
      std::string fb = kvs[i] + r_next;
      if (!req) fb += first[i + 1].empty() ? " | \"\"" : " | " + first[i + 1];
      first[i] = fmt::format("{}-f{}", base, i);
      rules_[first[i]] = fb;
    }
    rules_[base] = "\"{\" j-ws " + first[0] + " \"}\" j-ws";
    return base;
  }

  std::string visit_typed(const json& s, const std::string& type, const std::string& hint, const std::string& path) {
    if (type == "object") return visit_object(s, path);
    if (type == "array") return visit_array(s, path);
    if (type == "string") return visit_string(s, path);
    if (type == "integer") return visit_integer(s, path);
    if (type == "number") return visit_number(s, path);
    if (type == "boolean") return "j-boolean";
    if (type == "null") return "j-null";
    fail(fmt::format("unknown type '{}'", type), path + "/type");
    return "";
  }

  std::string alternatives(const json& list, const char* key, const std::string& hint, const std::string& path) {
    if (!list.is_array() || list.empty()) return fail(fmt::format("'{}' must be a non-empty array", key), path + "/" + key), "";
    std::string body;
    for (size_t k = 0; k < list.size(); ++k) {
      const std::string e = visit(list[k], hint, fmt::format("{}/{}/{}", path, key, k));
      if (!ok_) return "";
      body += (body.empty() ? "" : " | ") + e;
    }
    return list.size() == 1 ? body : rule(hint, body);
  }

  std::string visit(const json& s, const std::string& hint, const std::string& path) {
    if (!ok_) return "";
    if (++depth_ > 64) return fail("schema nested too deeply", path), "";
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return "j-value";
      return fail("the schema 'false' admits no value", path), "";
    }
    if (!s.is_object()) return fail("a schema must be an object or a boolean", path), "";
    static const std::set<std::string> kKnown = {
        "$ref", "type", "enum", "const", "anyOf", "oneOf", "allOf", "properties", "required", "additionalProperties",
        "items", "prefixItems", "minItems", "maxItems", "uniqueItems", "pattern", "minLength", "maxLength", "format",
        "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKnown.count(it.key()) && !kAnnotations.count(it.key()))
        return fail(fmt::format("unsupported JSON Schema keyword '{}'", it.key()), path + "/" + it.key()), "";
    if (s.contains("$ref")) {
      for (auto it = s.begin(); it != s.end(); ++it)
        if (it.key() != "$ref" && !kAnnotations.count(it.key()))
          return fail(fmt::format("'{}' next to '$ref' is not supported", it.key()), path + "/" + it.key()), "";
      if (!s["$ref"].is_string()) return fail("'$ref' must be a string", path + "/$ref"), "";
      return resolve_ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("nullable") && s["nullable"] == true) {
      json copy = s;
      copy.erase("nullable");
      const std::string e = visit(copy, hint, path);
      return ok_ ? rule(hint, e + " | j-null") : "";
    }
    if (s.contains("const")) return rule(hint, lit(s["const"]) + " j-ws");
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) return fail("'enum' must be a non-empty array", path + "/enum"), "";
      std::string body;
      for (const json& v : s["enum"]) body += (body.empty() ? "" : " | ") + lit(v);
      return rule(hint, "(" + body + ") j-ws");
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1)
        return fail("'allOf' with more than one schema is not supported", path + "/allOf"), "";
      return visit(s["allOf"][0], hint, path + "/allOf/0");
    }
    if (s.contains("anyOf")) return alternatives(s["anyOf"], "anyOf", hint, path);
    if (s.contains("oneOf")) return alternatives(s["oneOf"], "oneOf", hint, path);
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) return visit_typed(s, t.get<std::string>(), hint, path);
      if (!t.is_array() || t.empty()) return fail("'type' must be a string or a non-empty array", path + "/type"), "";
      std::string body;
      for (const json& x : t) {
        if (!x.is_string()) return fail("'type' must hold strings", path + "/type"), "";
        const std::string e = visit_typed(s, x.get<std::string>(), hint, path);
        if (!ok_) return "";
        body += (body.empty() ? "" : " | ") + e;
      }
      return rule(hint, body);
    }
    // No type: infer it from the keywords that constrain one.
    for (const char* k : {"properties", "required", "additionalProperties"})
      if (s.contains(k)) return visit_object(s, path);
    for (const char* k : {"items", "prefixItems", "minItems", "maxItems"})
      if (s.contains(k)) return visit_array(s, path);
    for (const char* k : {"pattern", "minLength", "maxLength", "format"})
      if (s.contains(k)) return visit_string(s, path);
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return visit_number(s, path);
    return "j-value";
  }

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> by_body_;
  std::map<std::string, std::string> refs_;
  std::set<std::string> reserved_;
  bool ok_ = true;
  SchemaError err_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const json& schema, SchemaError* err) {
  return SchemaConverter(schema).run(err);
}

std::string with_json_whitespace(std::string gbnf, std::string_view ws_body) {
  constexpr std::string_view kWs = "j-ws ::= ";
  size_t at = gbnf.rfind(std::string("\n") + std::string(kWs));
  at = at == std::string::npos ? (gbnf.rfind(kWs, 0) == 0 ? 0 : std::string::npos) : at + 1;
  if (at == std::string::npos) return gbnf;
  const size_t end = std::min(gbnf.find('\n', at), gbnf.size());
  gbnf.replace(at, end - at, std::string(kWs) + std::string(ws_body));
  return gbnf;
}

std::string json_object_gbnf() { return std::string("root ::= j-object\n") + kGenericRules; }

std::string choice_gbnf(const std::vector<std::string>& choices) {
  std::string body;
  for (const auto& c : choices) body += (body.empty() ? "" : " | ") + gbnf_literal(c);
  return "root ::= " + body + "\n";
}

}  // namespace ember::grammar
