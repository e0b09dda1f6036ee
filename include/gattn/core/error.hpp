// gattn errors: one hierarchy so callers can catch gattn::error, or a precise subclass.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "gattn/core/arch_namespace.hpp"

// The exception classes stay outside the arch namespace (core/arch_namespace.hpp): a catch in a
// translation unit compiled for one ISA catches what code compiled for another throws.
namespace gattn {

/// Base of every exception gattn throws. Messages name the offending field and its values.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A configuration that is inconsistent or not supported (H_q % H_kv != 0, odd rotary width...).
class config_error : public error {
 public:
  using error::error;
};

/// A tensor whose shape does not match what the layer or kernel needs.
class shape_error : public error {
 public:
  using error::error;
};

/// A weight that is missing from a checkpoint or has the wrong shape.
class weight_error : public error {
 public:
  using error::error;
};

/// A KV cache misuse: appending past capacity, decoding a non-causal layer...
class cache_error : public error {
 public:
  using error::error;
};

/// A file that cannot be read or is malformed (safetensors, JSON).
class format_error : public error {
 public:
  using error::error;
};

}  // namespace gattn

GATTN_NAMESPACE_BEGIN namespace detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

/// Throws E with the concatenated message when `ok` is false.
template <class E, class... Parts>
void require(bool ok, Parts&&... parts) {
  if (!ok) throw E(concat(std::forward<Parts>(parts)...));
}

}  // namespace detail
GATTN_NAMESPACE_END  // namespace gattn
