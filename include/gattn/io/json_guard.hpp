// One streaming pass over untrusted JSON text, before any DOM is built: bounded nesting, no
// duplicate keys. Shared by the safetensors header, the checkpoint index and config files.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include "gattn/core/arch_namespace.hpp"

GATTN_NAMESPACE_BEGIN namespace io::detail {

/// What json_guard found: nothing (ok), nesting past the limit, a duplicate key, or text that is
/// not JSON. For a duplicate, `key` is the repeated key and `path` the keys of the objects that
/// enclose it ("" at the top level, "gate" for {"gate": {"x": 1, "x": 2}}); for nesting, `path`
/// leads to the container that holds the one too many ("a[]" for {"a": [[...]]} with a limit of 2).
/// Arrays appear as "[]".
struct json_guard_result {
  enum class kind { ok, too_deep, duplicate_key, not_json } what = kind::ok;
  std::string key, path;
  std::string reason;  // for not_json, when more can be said than 'not valid JSON'
  explicit operator bool() const { return what == kind::ok; }
};

/// Checks `text` without building it: a DOM costs tens of bytes per nesting level or per key, so
/// a hostile 100 MB document must be refused from this pass, which stops at the first violation.
/// nlohmann's SAX parser is iterative, so this pass is stack-safe at any depth. nlohmann's own
/// DOM parse would keep the last of two equal keys silently; a duplicate here is always refused.
class json_guard {
 public:
  /// `max_depth` counts containers: {"a": [1]} nests 2 levels.
  static json_guard_result check(const std::uint8_t* first, const std::uint8_t* last, std::size_t max_depth) {
    // nlohmann's lexer takes a NUL byte for the end of input and would accept "{}\0<junk>"; a NUL
    // can never appear in valid JSON (not even inside a string).
    if (std::find(first, last, std::uint8_t{0}) != last) {
      json_guard_result nul;
      nul.what = json_guard_result::kind::not_json;
      nul.reason = "it contains a NUL byte";
      return nul;
    }
    json_guard guard(max_depth);
    const bool ok = nlohmann::json::sax_parse(first, last, &guard, nlohmann::json::input_format_t::json,
                                              /*strict=*/true);
    if (!ok && guard.result_.what == json_guard_result::kind::ok) guard.result_.what = json_guard_result::kind::not_json;
    return guard.result_;
  }

  static json_guard_result check(const std::string& text, std::size_t max_depth) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(text.data());
    return check(p, p + text.size(), max_depth);
  }

  // The nlohmann SAX interface. Only containers and keys matter; values are skipped.
  using number_integer_t = nlohmann::json::number_integer_t;
  using number_unsigned_t = nlohmann::json::number_unsigned_t;
  using number_float_t = nlohmann::json::number_float_t;
  using string_t = nlohmann::json::string_t;
  using binary_t = nlohmann::json::binary_t;

  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(number_integer_t) { return true; }
  bool number_unsigned(number_unsigned_t) { return true; }
  bool number_float(number_float_t, const string_t&) { return true; }
  bool string(string_t&) { return true; }
  bool binary(binary_t&) { return true; }
  bool start_object(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(false); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    frame& f = stack_.back();
    if (!f.keys.insert(k).second) {
      result_.what = json_guard_result::kind::duplicate_key;
      result_.key = k;
      result_.path = path(stack_.size() - 1);
      return false;
    }
    f.current = k;
    return true;
  }
  // The parser's reason and position, and the key whose value it was reading (a number beyond
  // double, 1e400, is well-formed text that only the parser refuses).
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    result_.what = json_guard_result::kind::not_json;
    const std::string where = stack_.empty() || !stack_.back().is_object ? "" : path(stack_.size());
    result_.reason = "at byte " + std::to_string(position) + (where.empty() ? "" : " ('" + where + "')") + ": " + e.what();
    return false;
  }

 private:
  struct frame {
    bool is_object;
    std::set<std::string> keys;  // the keys seen so far in this object
    std::string current;         // the key whose value is being read
  };

  explicit json_guard(std::size_t max_depth) : max_depth_(max_depth) {}

  bool open(bool is_object) {
    if (stack_.size() >= max_depth_) {
      result_.what = json_guard_result::kind::too_deep;
      result_.path = path(stack_.size());
      return false;
    }
    stack_.push_back(frame{is_object, {}, {}});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  /// The keys (or "[]") through which the first `frames` open containers were entered.
  std::string path(std::size_t frames) const {
    std::string out;
    for (std::size_t i = 0; i < frames; ++i) {
      if (!out.empty() && stack_[i].is_object) out += '.';
      out += stack_[i].is_object ? stack_[i].current : std::string("[]");
    }
    return out;
  }

  std::size_t max_depth_;
  std::vector<frame> stack_;
  json_guard_result result_;
};

}  GATTN_NAMESPACE_END  // namespace gattn::io::detail
