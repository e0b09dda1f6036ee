// Named fp32 weight tensors, as a layer receives them (PyTorch nn.Linear layout [out, in]).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gattn/core/error.hpp"
#include "gattn/core/types.hpp"

namespace gattn {

/// One dense row-major fp32 tensor.
struct tensor {
  std::vector<index> shape;
  std::vector<float> data;

  index numel() const {
    index n = 1;
    for (index d : shape) n *= d;
    return n;
  }
};

inline std::string shape_string(const std::vector<index>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Weights by name (`q_proj.weight`, `q_proj.bias`, ...), without any checkpoint prefix.
class weight_map {
 public:
  void set(const std::string& name, tensor t) {
    detail::require<weight_error>(index(t.data.size()) == t.numel(), "weight '", name, "': shape ",
                                  shape_string(t.shape), " holds ", t.numel(), " values, data has ", t.data.size());
    tensors_[name] = std::move(t);
  }
  void set(const std::string& name, std::vector<index> shape, std::vector<float> data) {
    set(name, tensor{std::move(shape), std::move(data)});
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

  /// The tensor `name` with exactly `shape`; weight_error naming both otherwise.
  const tensor& get(const std::string& name, const std::vector<index>& shape) const {
    auto it = tensors_.find(name);
    detail::require<weight_error>(it != tensors_.end(), "missing weight '", name, "' (expected shape ",
                                  shape_string(shape), ")");
    detail::require<weight_error>(it->second.shape == shape, "weight '", name, "' has shape ",
                                  shape_string(it->second.shape), ", expected ", shape_string(shape));
    return it->second;
  }

  /// Like get(), but nullptr when absent (optional biases).
  const tensor* find(const std::string& name, const std::vector<index>& shape) const {
    return contains(name) ? &get(name, shape) : nullptr;
  }

  const std::map<std::string, tensor>& all() const { return tensors_; }

 private:
  std::map<std::string, tensor> tensors_;
};

}  // namespace gattn
