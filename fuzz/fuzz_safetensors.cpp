// libFuzzer target: safetensors_file::parse on arbitrary bytes, then every float tensor read back.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = gattn::io::safetensors_file::parse(std::vector<std::uint8_t>(data, data + size), "<fuzz>");
    for (const auto& t : file.tensors()) {
      (void)file.raw(t.name);
      (void)file.info(t.name).numel();
      if (t.type == gattn::io::dtype::f64 || t.type == gattn::io::dtype::f32 || t.type == gattn::io::dtype::f16 ||
          t.type == gattn::io::dtype::bf16 || t.type == gattn::io::dtype::f8_e4m3 ||
          t.type == gattn::io::dtype::f8_e5m2) {
        (void)file.read_f32(t.name);
        (void)file.read_f64(t.name);
      }
    }
    (void)file.metadata().size();
  } catch (const gattn::error&) {
    // Refusing bad input with a gattn error is the expected outcome; anything else is a bug.
  }
  return 0;
}
