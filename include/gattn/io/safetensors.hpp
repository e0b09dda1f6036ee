// Safetensors reader and writer: every byte of a file is checked before it is trusted.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/error.hpp"
#include "gattn/io/file_access.hpp"
#include "gattn/io/json_guard.hpp"

// The tensor bytes are copied straight into host integers and floats, so the host must share the
// format's byte order (little-endian) and IEEE 754 floats. Every compiler we support defines
// __BYTE_ORDER__; a big-endian port would need a byte swap in detail::copy_elements.
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gattn::io::safetensors assumes a little-endian host");
#endif
static_assert(std::numeric_limits<float>::is_iec559 && std::numeric_limits<double>::is_iec559,
              "gattn::io::safetensors assumes IEEE 754 float and double");

GATTN_NAMESPACE_BEGIN namespace io {

/// Element types a safetensors file may declare. Sub-byte types (F4, F6_*) and F8_E8M0 are not
/// supported: a file that uses them is refused as having an unknown dtype.
enum class dtype { f64, f32, f16, bf16, f8_e4m3, f8_e5m2, i64, i32, i16, i8, u64, u32, u16, u8, boolean };

namespace detail {

struct dtype_entry {
  dtype type;
  std::string_view name;
  std::size_t size;
};

inline constexpr dtype_entry dtype_table[] = {
    {dtype::f64, "F64", 8},         {dtype::f32, "F32", 4},         {dtype::f16, "F16", 2},
    {dtype::bf16, "BF16", 2},       {dtype::f8_e4m3, "F8_E4M3", 1}, {dtype::f8_e5m2, "F8_E5M2", 1},
    {dtype::i64, "I64", 8},         {dtype::i32, "I32", 4},         {dtype::i16, "I16", 2},
    {dtype::i8, "I8", 1},           {dtype::u64, "U64", 8},         {dtype::u32, "U32", 4},
    {dtype::u16, "U16", 2},         {dtype::u8, "U8", 1},           {dtype::boolean, "BOOL", 1},
};

inline const dtype_entry& entry_of(dtype t) {
  for (const auto& e : dtype_table)
    if (e.type == t) return e;
  throw format_error(gattn::detail::concat("safetensors: invalid dtype value ", static_cast<int>(t)));
}

/// The dtype spelled `name` in a header, or false when the name is not one we know.
inline bool dtype_from_name(std::string_view name, dtype& out) {
  for (const auto& e : dtype_table) {
    if (e.name == name) {
      out = e.type;
      return true;
    }
  }
  return false;
}

inline bool is_float(dtype t) {
  return t == dtype::f64 || t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || t == dtype::f8_e4m3 ||
         t == dtype::f8_e5m2;
}

inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Product of non-negative dims, or false on int64 overflow. A zero dim anywhere makes the product
/// zero whatever the other dims are, so the answer does not depend on the order of the dims.
inline bool checked_numel(const std::vector<std::int64_t>& shape, std::int64_t& out) {
  out = 1;
  if (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; })) return false;
  if (std::find(shape.begin(), shape.end(), std::int64_t{0}) != shape.end()) {
    out = 0;
    return true;
  }
  for (std::int64_t d : shape) {
    if (out > std::numeric_limits<std::int64_t>::max() / d) return false;
    out *= d;
  }
  return true;
}

/// numel * size in bytes, or false when it does not fit in 64 bits.
inline bool checked_bytes(std::int64_t numel, std::size_t size, std::uint64_t& out) {
  const auto n = static_cast<std::uint64_t>(numel);
  if (size != 0 && n > std::numeric_limits<std::uint64_t>::max() / size) return false;
  out = n * size;
  return true;
}

template <class T>
T load(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the data section has no alignment guarantee
  return v;
}

/// The value of a JSON non-negative integer that fits in `limit`, or false (floats, negatives and
/// integers too large for 64 bits, which nlohmann stores as floats, all give false).
inline bool json_to_u64(const nlohmann::json& j, std::uint64_t limit, std::uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<std::uint64_t>();
  } else if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(j.get<std::int64_t>());
  } else {
    return false;
  }
  return out <= limit;
}

/// A short rendering of an untrusted JSON value for an error message. Never json::dump() on the
/// whole value: it recurses, so a hostile header nested a million levels deep would blow the stack.
inline std::string brief(const nlohmann::json& j) {
  constexpr std::size_t max_items = 8, max_chars = 64;
  if (j.is_object()) return "{...}";
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s.size() <= max_chars) return j.dump();
    std::size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u) --cut;  // keep UTF-8 whole
    return nlohmann::json(s.substr(0, cut)).dump() + "...";
  }
  if (!j.is_array()) return j.dump();  // numbers, booleans, null
  std::string out = "[";
  for (std::size_t i = 0; i < j.size() && i < max_items; ++i) {
    const auto& item = j[i];
    out += (i ? ", " : "") + (item.is_array() ? std::string("[...]") : brief(item));
  }
  return out + (j.size() > max_items ? ", ...]" : "]");
}

inline float bits_to_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace detail

/// The name a safetensors header uses for `t` ("F32", "BF16", "BOOL"...).
inline std::string_view dtype_name(dtype t) { return detail::entry_of(t).name; }

/// Bytes per element of `t`.
inline std::size_t dtype_size(dtype t) { return detail::entry_of(t).size; }

/// Exact widening of a bfloat16 (the top half of a float32), including subnormals, inf and NaN.
inline float bf16_to_float(std::uint16_t bits) { return detail::bits_to_float(std::uint32_t{bits} << 16); }

/// Exact widening of an IEEE binary16, including subnormals, inf and NaN (sign and payload kept).
inline float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x8000u} << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
  const std::uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24 is exact in float (at most 10 significant bits).
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1F) return detail::bits_to_float(sign | 0x7F800000u | (mantissa << 13));
  return detail::bits_to_float(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

/// Exact widening of an OCP float8 E4M3 ("fn": no infinities, S.1111.111 is NaN).
inline float f8_e4m3_to_float(std::uint8_t bits) {
  const std::uint32_t sign = std::uint32_t{bits & 0x80u} << 24;
  const std::uint32_t exponent = (bits >> 3) & 0xFu;
  const std::uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xF && mantissa == 0x7) return detail::bits_to_float(sign | 0x7FC00000u);
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    return sign ? -magnitude : magnitude;
  }
  return detail::bits_to_float(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

/// Exact widening of an OCP float8 E5M2, which is the top byte of an IEEE binary16.
inline float f8_e5m2_to_float(std::uint8_t bits) { return f16_to_float(static_cast<std::uint16_t>(bits << 8)); }

/// One tensor of a safetensors file. `begin`/`end` are byte offsets into the data section.
struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;

  /// Number of elements (1 for a rank-0 tensor). Overflow-checked when the file was parsed.
  std::int64_t numel() const {
    std::int64_t n = 0;
    detail::checked_numel(shape, n);
    return n;
  }
};

/// A tensor as stored: its dtype, shape and a pointer to its bytes inside the file's mapping (or
/// buffer), without a copy. The view shares ownership of the mapping, so it stays valid after the
/// file object that handed it out is gone. The bytes are little-endian and *not aligned*: read
/// them with memcpy, or through to_f32() / to_f64().
class tensor_view {
 public:
  tensor_view(const tensor_info& info, std::shared_ptr<const std::uint8_t> bytes, std::string origin)
      : info_(info), bytes_(std::move(bytes)), origin_(std::move(origin)) {}

  const std::string& name() const { return info_.name; }
  dtype type() const { return info_.type; }
  const std::vector<std::int64_t>& shape() const { return info_.shape; }
  std::int64_t numel() const { return info_.numel(); }
  std::uint64_t nbytes() const { return info_.end - info_.begin; }
  /// The first byte of the tensor (no alignment guarantee; may be null for an empty tensor).
  const std::uint8_t* data() const { return bytes_.get(); }
  /// data(), sharing ownership of the mapping (or buffer) it points into.
  const std::shared_ptr<const std::uint8_t>& shared_data() const { return bytes_; }
  /// The file the tensor came from (its path, or the origin given to parse()).
  const std::string& origin() const { return origin_; }

  /// The tensor as float32: F32 as stored, F16/BF16/F8 widened exactly, F64 rounded to nearest
  /// (IEEE: ties to even, overflow to +-inf). Integer and boolean tensors are refused (weight_error).
  std::vector<float> to_f32() const { return widen<float>(); }

  /// The tensor as float64: every float dtype widened exactly. Integer and boolean tensors are
  /// refused with weight_error.
  std::vector<double> to_f64() const { return widen<double>(); }

 private:
  tensor_info info_;
  std::shared_ptr<const std::uint8_t> bytes_;
  std::string origin_;

  const std::uint8_t* at(std::size_t byte_offset) const { return bytes_.get() + byte_offset; }

  template <class T>
  std::vector<T> widen() const {
    if (!detail::is_float(info_.type))
      throw weight_error(gattn::detail::concat("tensor '", info_.name, "' in ", origin_, " has dtype ",
                                               dtype_name(info_.type),
                                               "; only floating-point tensors can be read as floats"));
    std::vector<T> out(static_cast<std::size_t>(numel()));
    if (out.empty()) return out;
    if (info_.type == dtype::f32 && std::is_same<T, float>::value) {
      std::memcpy(out.data(), at(0), out.size() * sizeof(float));
      return out;
    }
    if (info_.type == dtype::f64 && std::is_same<T, double>::value) {
      std::memcpy(out.data(), at(0), out.size() * sizeof(double));
      return out;
    }
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (info_.type) {
        case dtype::f32: out[i] = static_cast<T>(detail::load<float>(at(i * 4))); break;
        case dtype::f16: out[i] = static_cast<T>(f16_to_float(detail::load<std::uint16_t>(at(i * 2)))); break;
        case dtype::bf16: out[i] = static_cast<T>(bf16_to_float(detail::load<std::uint16_t>(at(i * 2)))); break;
        case dtype::f8_e4m3: out[i] = static_cast<T>(f8_e4m3_to_float(*at(i))); break;
        case dtype::f8_e5m2: out[i] = static_cast<T>(f8_e5m2_to_float(*at(i))); break;
        default: out[i] = static_cast<T>(detail::load<double>(at(i * 8))); break;  // f64
      }
    }
    return out;
  }
};

class checkpoint;

/// A safetensors file, validated when it is opened: a read-only mapping of a file on disk, or a
/// buffer given to parse(). Copies share the bytes (the last one unmaps them).
///
/// Validation follows the reference (Rust) parser: an 8-byte little-endian header length N with
/// N <= 100 MB and N <= file size - 8; a JSON object header; each entry an object with exactly
/// `dtype`, `shape` and `data_offsets`; a known dtype; non-negative integer dims whose product
/// times the dtype size fits and equals end - begin; tensors that tile the data section exactly
/// (no overlap, no hole, no trailing byte); `__metadata__` an object of strings. gattn is stricter
/// than the reference in three places: duplicate keys anywhere in the header, unknown keys inside
/// a tensor entry and nesting deeper than the format has (3 levels) are refused instead of silently
/// resolved or parsed. Every failure is a gattn::format_error naming the file, the tensor and the
/// offending values.
class safetensors_file {
 public:
  /// Maps and validates the file at `path`, which must be a regular file (a device or FIFO, which
  /// could stream forever, is refused before it is opened). Only the header is read here; tensor
  /// bytes are paged in when used. Throws format_error naming `path` on any failure; the message
  /// describes what is wrong (sizes, names, structure) and never quotes the file's raw bytes.
  static safetensors_file open(const std::string& path) {
    return from_bytes(detail::map_file(path, gattn::detail::concat("safetensors '", path, "'")), path);
  }

  /// Validates `bytes` as a safetensors file; `origin` names it in error messages.
  static safetensors_file parse(std::vector<std::uint8_t> bytes, std::string origin = "<memory>") {
    const auto owner = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
    detail::shared_bytes shared;
    shared.data = std::shared_ptr<const std::uint8_t>(owner, owner->data());  // aliases the vector
    shared.size = owner->size();
    return from_bytes(std::move(shared), std::move(origin));
  }

  /// All tensors, sorted by data offset (ties, which only zero-size tensors can have, by name).
  const std::vector<tensor_info>& tensors() const { return tensors_; }

  /// Whether a tensor called `name` is in the file.
  bool contains(const std::string& name) const { return index_.count(name) != 0; }

  /// The tensor called `name`; weight_error when it is absent.
  const tensor_info& info(const std::string& name) const {
    const auto it = index_.find(name);
    if (it == index_.end())
      throw weight_error(gattn::detail::concat("tensor '", name, "' not found in ", origin_));
    return tensors_[it->second];
  }

  /// The tensor called `name` as stored, without a copy; weight_error when it is absent.
  tensor_view view(const std::string& name) const {
    const tensor_info& t = info(name);
    return tensor_view(t, std::shared_ptr<const std::uint8_t>(bytes_, raw_at(t)), origin_);
  }

  /// The string-to-string `__metadata__` map (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// Where the file came from (its path, or the origin given to parse()).
  const std::string& origin() const { return origin_; }

  /// The tensor as float32 (a copy): see tensor_view::to_f32.
  std::vector<float> read_f32(const std::string& name) const { return view(name).to_f32(); }

  /// The tensor as float64 (a copy): see tensor_view::to_f64.
  std::vector<double> read_f64(const std::string& name) const { return view(name).to_f64(); }

  /// Pointer to the first byte of the tensor's data inside the file's bytes. No alignment is
  /// guaranteed: copy with memcpy. Valid as long as this object or a copy of it lives.
  const std::uint8_t* raw(const std::string& name) const { return raw_at(info(name)); }

 private:
  // The reference parser's bound on the header: large enough for any real checkpoint, small enough
  // that a hostile length cannot make us parse (or allocate for) gigabytes of JSON.
  static constexpr std::uint64_t max_header_bytes = 100'000'000;
  // The format nests 3 levels: the header object, a tensor entry (or __metadata__), its arrays.
  static constexpr std::size_t max_header_depth = 3;

  std::shared_ptr<const std::uint8_t> bytes_;
  std::uint64_t size_ = 0;
  std::string origin_;
  std::uint64_t data_start_ = 0;  // 8 + header length
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;

  friend class checkpoint;

  /// open(), insisting that `path` is the file `expected` (checked by the checkpoint beforehand).
  static safetensors_file open_checked(const std::string& path, const detail::file_identity& expected) {
    return from_bytes(detail::map_file(path, gattn::detail::concat("safetensors '", path, "'"), &expected), path);
  }

  static safetensors_file from_bytes(detail::shared_bytes bytes, std::string origin) {
    safetensors_file file;
    file.bytes_ = std::move(bytes.data);
    file.size_ = bytes.size;
    file.origin_ = std::move(origin);
    try {
      file.validate();
    } catch (const nlohmann::json::exception& e) {
      // Should not happen (types are checked before every access), but must never escape as such.
      file.fail("malformed header: ", e.what());
    }
    return file;
  }

  template <class... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    throw format_error(gattn::detail::concat("safetensors '", origin_, "': ", std::forward<Parts>(parts)...));
  }

  const std::uint8_t* raw_at(const tensor_info& t) const { return bytes_.get() + data_start_ + t.begin; }

  /// Parses the header after a streaming pass (detail::json_guard) that refuses duplicate keys,
  /// which nlohmann would resolve silently (two entries with one name is an attack surface), and
  /// nesting the format does not have, before the DOM costs memory for it.
  nlohmann::json parse_header(const std::uint8_t* first, const std::uint8_t* last) const {
    using kind = detail::json_guard_result::kind;
    const detail::json_guard_result guard = detail::json_guard::check(first, last, max_header_depth);
    if (guard.what == kind::not_json)
      fail(guard.reason.empty() ? std::string("header is not valid UTF-8 JSON")
                                : gattn::detail::concat("header is not valid JSON: ", guard.reason));
    if (guard.what == kind::too_deep)
      fail("header nests deeper than the format's ", max_header_depth, " levels at '", guard.path, "'");
    if (guard.what == kind::duplicate_key) {
      if (guard.path.empty()) fail("duplicate tensor name '", guard.key, "' in header");
      fail("duplicate key '", guard.key, "' in header (in '", guard.path, "')");
    }
    nlohmann::json header = nlohmann::json::parse(first, last, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded()) fail("header is not valid UTF-8 JSON");
    if (!header.is_object()) fail("header is not a JSON object but ", header.type_name());
    return header;
  }

  void validate() {
    const std::uint64_t size = size_;
    if (size < 8) fail("file is ", size, " bytes, shorter than the 8-byte header length");
    const std::uint8_t* bytes = bytes_.get();
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];  // little-endian u64
    // The length itself is not printed: in a file that is not a safetensors file at all, it is
    // 8 bytes of whatever the file holds.
    if (n > max_header_bytes)
      fail("the header length in the first 8 bytes is too large (more than the limit of ", max_header_bytes,
           " bytes): not a safetensors file, or a damaged one");
    if (n > size - 8)
      fail("the header length in the first 8 bytes exceeds the ", size - 8,
           " bytes after them: not a safetensors file, or a truncated one");
    data_start_ = 8 + n;
    const std::uint64_t data_size = size - data_start_;

    const nlohmann::json header = parse_header(bytes + 8, bytes + data_start_);
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        read_metadata(value);
      } else {
        tensors_.push_back(read_entry(name, value, data_size));
      }
    }

    // The tensors must tile the data section: sorted by offset, each starts where the previous one
    // ended and the last ends at the end of the file. This rules out aliasing and hidden bytes.
    std::sort(tensors_.begin(), tensors_.end(), [](const tensor_info& a, const tensor_info& b) {
      return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    std::uint64_t expected = 0;
    const tensor_info* previous = nullptr;
    for (const tensor_info& t : tensors_) {
      if (t.begin < expected)
        fail("tensor '", t.name, "' data_offsets [", t.begin, ", ", t.end, "] overlap tensor '", previous->name,
             "' [", previous->begin, ", ", previous->end, "]");
      if (t.begin > expected)
        fail("gap of ", t.begin - expected, " bytes in the data section before tensor '", t.name, "' [", t.begin,
             ", ", t.end, "]");
      expected = t.end;
      previous = &t;
    }
    if (expected != data_size)
      fail(data_size - expected, " trailing bytes after the last tensor (tensors cover ", expected,
           " of ", data_size, " data bytes)");
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }

  void read_metadata(const nlohmann::json& value) {
    if (!value.is_object()) fail("__metadata__ is not a JSON object but ", value.type_name());
    for (const auto& [key, item] : value.items()) {
      if (!item.is_string()) fail("__metadata__ value for '", key, "' is not a string but ", item.type_name());
      metadata_.emplace(key, item.get<std::string>());
    }
  }

  tensor_info read_entry(const std::string& name, const nlohmann::json& entry, std::uint64_t data_size) const {
    if (!entry.is_object()) fail("tensor '", name, "' entry is not a JSON object but ", entry.type_name());
    for (const auto& [key, unused] : entry.items()) {
      (void)unused;
      if (key != "dtype" && key != "shape" && key != "data_offsets") fail("tensor '", name, "' has unknown key '", key, "'");
    }
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(key)) fail("tensor '", name, "' lacks '", key, "'");

    tensor_info t;
    t.name = name;
    const auto& type = entry.at("dtype");
    if (!type.is_string()) fail("tensor '", name, "' dtype is not a string but ", type.type_name());
    if (!detail::dtype_from_name(type.get_ref<const std::string&>(), t.type))
      fail("tensor '", name, "' has unknown dtype ", detail::brief(type));

    const auto& shape = entry.at("shape");
    if (!shape.is_array()) fail("tensor '", name, "' shape is not an array but ", shape.type_name());
    for (const auto& dim : shape) {
      std::uint64_t d = 0;
      if (!detail::json_to_u64(dim, std::numeric_limits<std::int64_t>::max(), d))
        fail("tensor '", name, "' shape ", detail::brief(shape), " has a dim that is not a non-negative integer");
      t.shape.push_back(static_cast<std::int64_t>(d));
    }

    const auto& offsets = entry.at("data_offsets");
    const std::uint64_t any = std::numeric_limits<std::uint64_t>::max();
    if (!offsets.is_array() || offsets.size() != 2 || !detail::json_to_u64(offsets[0], any, t.begin) ||
        !detail::json_to_u64(offsets[1], any, t.end))
      fail("tensor '", name, "' data_offsets ", detail::brief(offsets), " is not a pair of non-negative integers");
    if (t.begin > t.end) fail("tensor '", name, "' data_offsets [", t.begin, ", ", t.end, "] has begin > end");
    if (t.end > data_size)
      fail("tensor '", name, "' data_offsets [", t.begin, ", ", t.end, "] go beyond the data section of ",
           data_size, " bytes");

    std::int64_t numel = 0;
    std::uint64_t nbytes = 0;
    if (!detail::checked_numel(t.shape, numel) || !detail::checked_bytes(numel, dtype_size(t.type), nbytes))
      fail("tensor '", name, "' shape ", detail::shape_string(t.shape), " of ", dtype_name(t.type),
           " overflows the element or byte count");
    if (nbytes != t.end - t.begin)
      fail("tensor '", name, "' shape ", detail::shape_string(t.shape), " of ", dtype_name(t.type), " needs ",
           nbytes, " bytes but data_offsets [", t.begin, ", ", t.end, "] span ", t.end - t.begin);
    return t;
  }
};

/// A tensor to write: `data` points to numel * dtype_size(type) bytes in host (little-endian) order.
struct tensor_to_write {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
};

/// The bytes of a safetensors file holding `tensors` in the given order, plus `metadata` as
/// `__metadata__` (omitted when empty). The header is padded with spaces to a multiple of 8 bytes
/// so the data section starts aligned, as the reference writer does. Any dtype is accepted: the
/// data is copied as bytes. Throws format_error on a duplicate or reserved name, a negative dim,
/// a size overflow or a null `data` for a non-empty tensor.
inline std::vector<std::uint8_t> serialize_safetensors(const std::vector<tensor_to_write>& tensors,
                                                       const std::map<std::string, std::string>& metadata = {}) {
  using gattn::detail::concat;
  nlohmann::json header = nlohmann::json::object();
  std::vector<std::uint64_t> sizes;
  std::uint64_t offset = 0;
  for (const tensor_to_write& t : tensors) {
    if (t.name == "__metadata__") throw format_error("safetensors writer: '__metadata__' cannot be a tensor name");
    if (header.contains(t.name)) throw format_error(concat("safetensors writer: duplicate tensor name '", t.name, "'"));
    std::int64_t numel = 0;
    std::uint64_t nbytes = 0;
    if (!detail::checked_numel(t.shape, numel) || !detail::checked_bytes(numel, dtype_size(t.type), nbytes) ||
        nbytes > std::numeric_limits<std::uint64_t>::max() - offset)
      throw format_error(concat("safetensors writer: tensor '", t.name, "' shape ", detail::shape_string(t.shape),
                                " is negative or overflows"));
    if (nbytes > 0 && t.data == nullptr)
      throw format_error(concat("safetensors writer: tensor '", t.name, "' has no data"));
    header[t.name] = {{"dtype", std::string(dtype_name(t.type))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // names or metadata that are not UTF-8
    throw format_error(concat("safetensors writer: ", e.what()));
  }
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  std::vector<std::uint8_t> out(8 + text.size() + offset);
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(std::uint64_t{text.size()} >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  std::uint8_t* data = out.data() + 8 + text.size();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > 0) std::memcpy(data, tensors[i].data, sizes[i]);
    data += sizes[i];
  }
  return out;
}

/// Writes serialize_safetensors(tensors, metadata) to `path`, whole or not at all: a temporary
/// file next to it is written, synced and renamed over it, so a failed write (a full disk) leaves
/// an earlier file at `path` as it was (detail::write_file_replacing). format_error naming `path`
/// on failure.
inline void write_safetensors(const std::string& path, const std::vector<tensor_to_write>& tensors,
                              const std::map<std::string, std::string>& metadata = {}) {
  const std::vector<std::uint8_t> bytes = serialize_safetensors(tensors, metadata);
  detail::write_file_replacing(path, bytes.data(), bytes.size(), gattn::detail::concat("safetensors '", path, "'"));
}

}  GATTN_NAMESPACE_END  // namespace gattn::io
