// libFuzzer target: arbitrary bytes as the text of a model.safetensors.index.json (the part of
// checkpoint::open that reads untrusted text; the shards it names are safetensors files, which
// fuzz_safetensors covers). Every shard name accepted must also resolve, lexically, inside the
// index's directory by the containment test checkpoint::open applies to resolved links.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "gattn/core/error.hpp"
#include "gattn/io/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto index = gattn::io::detail::parse_checkpoint_index(text, "<fuzz>");
    // Every shard the index names must be a contained, non-empty relative path.
    for (const auto& [shard, tensors] : index.shards) {
      if (!gattn::io::detail::is_contained_shard_name(shard) || tensors.empty()) __builtin_trap();
      std::string resolved = (std::filesystem::path("/checkpoint") / shard).lexically_normal().string();
      while (resolved.size() > 1 && resolved.back() == '/') resolved.pop_back();
      if (!gattn::io::detail::is_within(resolved, "/checkpoint")) __builtin_trap();
      for (const auto& t : tensors)
        if (index.weight_map.at(t) != shard) __builtin_trap();
    }
  } catch (const gattn::error&) {
    // Refusing bad input with a gattn error is the expected outcome; anything else is a bug.
  }
  return 0;
}
