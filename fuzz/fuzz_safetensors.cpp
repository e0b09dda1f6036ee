// libFuzzer target: safetensors_file::parse on arbitrary bytes, then every tensor viewed and every
// float tensor read back, from the file and through a checkpoint.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/io/checkpoint.hpp"
#include "gattn/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto file = gattn::io::safetensors_file::parse(std::vector<std::uint8_t>(data, data + size), "<fuzz>");
    const gattn::io::checkpoint ck(file);
    for (const auto& t : file.tensors()) {
      (void)file.raw(t.name);
      const auto view = ck.view(t.name);
      if (view.nbytes() != t.end - t.begin || view.data() != file.raw(t.name)) __builtin_trap();
      (void)file.info(t.name).numel();
      if (t.type == gattn::io::dtype::f64 || t.type == gattn::io::dtype::f32 || t.type == gattn::io::dtype::f16 ||
          t.type == gattn::io::dtype::bf16 || t.type == gattn::io::dtype::f8_e4m3 ||
          t.type == gattn::io::dtype::f8_e5m2) {
        (void)file.read_f32(t.name);
        (void)view.to_f64();
      }
    }
    (void)file.metadata().size();
  } catch (const gattn::error&) {
    // Refusing bad input with a gattn error is the expected outcome; anything else is a bug.
  }
  return 0;
}
