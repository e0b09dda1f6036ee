// libFuzzer target: the containment test checkpoint::open applies to the file a symbolic link
// resolves to (detail::is_within: is a canonical path inside a canonical directory?), checked
// against std::filesystem's lexically_relative on the same two paths. The input is two paths
// separated by a newline; each is made absolute and lexically normal, as canonical paths are.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "gattn/io/checkpoint.hpp"

namespace {

/// `text` as a canonical path would spell it: absolute, no "." or "..", no trailing separator.
std::string as_canonical(const std::string& text) {
  std::string s = text;
  while (!s.empty() && s.front() == '/') s.erase(0, 1);  // "//x" may be a root name: keep one '/'
  std::string p = std::filesystem::path("/" + s).lexically_normal().string();
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::size_t newline = text.find('\n');
  if (newline == std::string::npos || text.find('\0') != std::string::npos) return 0;
  const std::string path = as_canonical(text.substr(0, newline)), root = as_canonical(text.substr(newline + 1));
  const std::filesystem::path relative = std::filesystem::path(path).lexically_relative(root);
  const bool inside = !relative.empty() && *relative.begin() != "..";
  if (gattn::io::detail::is_within(path, root) != inside) __builtin_trap();
  return 0;
}
