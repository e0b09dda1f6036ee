// Typed access to JSON config fields: every wrong type or value names the key (docs/spec.md §9 defaults).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <initializer_list>
#include <string>

#include <nlohmann/json.hpp>

#include "gattn/core/config.hpp"
#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"
#include "gattn/io/json_guard.hpp"

GATTN_NAMESPACE_BEGIN namespace io::detail {

using nlohmann::json;

/// A short rendering of a JSON value for error messages. Never dumps a container: dump() recurses
/// once per nesting level, so hostile input nested 1e5 deep would overflow the stack.
inline std::string short_text(const json& v) {
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  std::string s = v.dump();  // a scalar: no recursion
  return s.size() > 64 ? s.substr(0, 61) + "..." : s;
}

/// True when `key` is present and not null (JSON null means "absent" in HF configs).
inline bool has(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

inline const json& field(const json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  gattn::detail::require<config_error>(it != obj.end() && !it->is_null(), where, ": missing required key '", key, "'");
  return *it;
}

inline index get_index(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  // Integral JSON numbers only; a float such as 4.0 is accepted when it is an exact integer.
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      gattn::detail::require<config_error>(u <= std::uint64_t(std::numeric_limits<std::int32_t>::max()), where,
                                           ": '", key, "'=", u, " is too large");
      return index(u);
    }
    const auto s = v.get<std::int64_t>();
    gattn::detail::require<config_error>(s >= std::numeric_limits<std::int32_t>::min() &&
                                             s <= std::numeric_limits<std::int32_t>::max(),
                                         where, ": '", key, "'=", s, " is out of range");
    return index(s);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    gattn::detail::require<config_error>(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 2147483647.0,
                                         where, ": '", key, "'=", short_text(v), " must be an integer");
    return index(d);
  }
  throw config_error(gattn::detail::concat(where, ": '", key, "' must be an integer, got ", short_text(v)));
}

inline index get_index(const json& obj, const char* key, const std::string& where, index fallback) {
  return has(obj, key) ? get_index(obj, key, where) : fallback;
}

inline double get_double(const json& obj, const char* key, const std::string& where) {
  const json& v = field(obj, key, where);
  gattn::detail::require<config_error>(v.is_number(), where, ": '", key, "' must be a number, got ", short_text(v));
  const double d = v.get<double>();
  gattn::detail::require<config_error>(std::isfinite(d), where, ": '", key, "' must be finite, got ", short_text(v));
  return d;
}

inline double get_double(const json& obj, const char* key, const std::string& where, double fallback) {
  return has(obj, key) ? get_double(obj, key, where) : fallback;
}

inline bool get_bool(const json& obj, const char* key, const std::string& where, bool fallback) {
  if (!has(obj, key)) return fallback;
  const json& v = obj.at(key);
  gattn::detail::require<config_error>(v.is_boolean(), where, ": '", key, "' must be true or false, got ", short_text(v));
  return v.get<bool>();
}

inline std::string get_string(const json& obj, const char* key, const std::string& where, const std::string& fallback) {
  if (!has(obj, key)) return fallback;
  const json& v = obj.at(key);
  gattn::detail::require<config_error>(v.is_string(), where, ": '", key, "' must be a string, got ", short_text(v));
  return v.get<std::string>();
}

/// Deepest nesting a config may have. Real ones nest 3-5 levels; the limit exists because
/// json::dump() (used by error messages) recurses, and a hostile file nested 10^5 levels deep would
/// overflow the stack while the refusal is being written (and cost ~70 bytes per level to build).
inline constexpr std::size_t max_config_depth = 64;

/// Largest config file read: real ones are a few kB, so this only stops runaway input early.
inline constexpr std::uint64_t max_config_bytes = std::uint64_t{16} << 20;

/// Parses config JSON text after a streaming check (json_guard): text that is not JSON and nesting
/// past max_config_depth are format_errors; a key repeated in one object is a config_error naming
/// it (nlohmann would keep the last value silently, so `"causal": true, ..., "causal": false` would
/// run non-causal). Every message starts with `origin`.
inline json parse_json_text(const std::string& text, const std::string& origin) {
  using kind = json_guard_result::kind;
  const json_guard_result guard = json_guard::check(text, max_config_depth);
  gattn::detail::require<format_error>(guard.what != kind::not_json, origin, ": not valid JSON",
                                       guard.reason.empty() ? "" : ": ", guard.reason);
  gattn::detail::require<format_error>(guard.what != kind::too_deep, origin, ": JSON nested deeper than ",
                                       max_config_depth, " levels at '", guard.path, "'");
  gattn::detail::require<config_error>(guard.what != kind::duplicate_key, origin, ": duplicate key '", guard.key,
                                       "'", guard.path.empty() ? "" : " in '", guard.path,
                                       guard.path.empty() ? "" : "'");
  // What the guard lets through but the parser refuses (a number beyond double, 1e400): keep the
  // parser's reason and position.
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  gattn::detail::require<format_error>(!j.is_discarded(), origin, ": not valid JSON");
  return j;
}

inline constexpr std::initializer_list<storage_type> storage_types = {storage_type::f32, storage_type::bf16,
                                                                      storage_type::f16};

/// A key present in `obj` is either in `known`, or in `foreign` (a key of the other attention family,
/// refused as such), or unknown. A typo or a newer version's key must not be ignored: the layer would
/// silently differ from the one the file describes.
inline void refuse_unknown_keys(const json& obj, const std::string& where, const std::vector<const char*>& known,
                                const std::vector<const char*>& foreign = {}, const char* foreign_note = "") {
  const auto listed = [](const std::vector<const char*>& list, const std::string& key) {
    for (const char* k : list)
      if (key == k) return true;
    return false;
  };
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    if (listed(known, key)) continue;
    if (listed(foreign, key)) throw config_error(gattn::detail::concat(where, ": '", key, "' ", foreign_note));
    std::string names;
    for (const char* k : known) names += std::string(names.empty() ? "" : ", ") + k;
    throw config_error(gattn::detail::concat(where, ": unknown key '", key, "' (known keys: ", names, ")"));
  }
}

/// The enumerator of `values` whose to_string() is `s`, if any: one spelling for parser and printer.
template <class Enum>
std::optional<Enum> enum_named(const std::string& s, std::initializer_list<Enum> values) {
  for (Enum v : values)
    if (s == to_string(v)) return v;
  return std::nullopt;
}

/// "a, b or c": the accepted spellings, for error messages.
template <class Enum>
std::string enum_names(std::initializer_list<Enum> values) {
  std::string list;
  std::size_t i = 0;
  for (Enum v : values) {
    if (i++) list += i == values.size() ? " or " : ", ";
    list += to_string(v);
  }
  return list;
}

/// A string-valued key that must name one of `values`; absent (or null) gives `fallback`.
template <class Enum>
Enum get_enum(const json& obj, const char* key, const std::string& where, std::initializer_list<Enum> values,
              Enum fallback) {
  if (!has(obj, key)) return fallback;
  const std::string s = get_string(obj, key, where, "");
  if (const auto v = enum_named(s, values)) return *v;
  throw config_error(gattn::detail::concat(where, ": '", key, "'=\"", s, "\" must be ", enum_names(values)));
}

}  GATTN_NAMESPACE_END  // namespace gattn::io::detail
