// A checkpoint as users name it: a safetensors file, a Hugging Face sharded index, or a directory
// holding either. One lookup API over all three, each shard mapped read-only.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "gattn/core/error.hpp"
#include "gattn/io/file_access.hpp"
#include "gattn/io/json_guard.hpp"
#include "gattn/io/safetensors.hpp"

GATTN_NAMESPACE_BEGIN namespace io {

namespace detail {

// Real indexes are a few MB (DeepSeek-V3's 91k tensors: 9 MB); the same bound as a header.
inline constexpr std::uint64_t max_index_bytes = 100'000'000;
// {"metadata": {"total_size": 1}, "weight_map": {...}} nests 2 levels; 3 leaves room for a
// metadata value that is itself a container.
inline constexpr std::size_t max_index_depth = 3;

/// A shard name must stay inside the index's directory: relative, without a ".." component.
inline bool is_contained_shard_name(const std::string& shard) {
  if (shard.empty() || shard.find('\0') != std::string::npos) return false;
  const std::filesystem::path p(shard);
  if (p.is_absolute() || p.has_root_path()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

/// Whether the path `p` is `root` or lies below it; both absolute and lexically normal (as
/// canonical paths are). Compared component by component, so "/a/bc" is not below "/a/b".
inline bool is_within(const std::string& p, const std::string& root) {
  if (root.empty() || p.compare(0, root.size(), root) != 0) return false;
  return p.size() == root.size() || root.back() == '/' || p[root.size()] == '/';
}

/// Where the files of a checkpoint in directory `dir` may lead through symbolic links: into `dir`
/// itself, and, when `dir` is a snapshot of the Hugging Face cache (`<repo>/snapshots/<revision>`,
/// whose files link to `<repo>/blobs/`), into `<repo>`. Canonical paths, `dir`'s first.
inline std::vector<std::string> link_roots(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real = fs::canonical(dir.empty() ? std::string(".") : dir, ec);
  if (ec) throw format_error(gattn::detail::concat(what, ": cannot resolve the directory '", dir, "': ", ec.message()));
  std::vector<std::string> roots{real.string()};
  if (real.parent_path().filename() == "snapshots" && real.parent_path().has_parent_path())
    roots.push_back(real.parent_path().parent_path().string());
  return roots;
}

/// Checks the checkpoint file `path` before it is opened: it must resolve (through every link on
/// the way) inside one of `roots` (link_roots) and be a regular file. Returns the identity of the
/// file it resolves to, which the open then insists on (a link swapped in between is refused).
inline file_identity contained_file(const std::string& path, const std::vector<std::string>& roots,
                                    const std::string& what) {
  using gattn::detail::concat;
  std::error_code ec;
  const std::string real = std::filesystem::canonical(path, ec).string();
  if (ec) throw format_error(concat(what, ": cannot open file for reading: ", ec.message()));
  bool inside = false;
  for (const std::string& root : roots) inside = inside || is_within(real, root);
  if (!inside)
    throw format_error(concat(what, ": is a symbolic link (or lies under one) that resolves to '", real,
                              "', outside the checkpoint directory '", roots.front(), "'",
                              roots.size() > 1 ? concat(" and its repository '", roots.back(), "'") : std::string(),
                              "; links are followed only into ", roots.size() > 1 ? "those" : "it"));
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) throw format_error(concat(what, ": cannot stat the file: ", std::strerror(errno)));
  require_regular(st, what);
  return identity_of(st);
}

/// What a Hugging Face index says, validated as text (the shards are not looked at).
struct checkpoint_index {
  std::map<std::string, std::string> metadata;             // values as strings or JSON text
  std::map<std::string, std::string> weight_map;           // tensor -> shard
  std::map<std::string, std::vector<std::string>> shards;  // shard -> its tensors, sorted
};

/// Parses index text; every refusal is a format_error starting with `what` and naming the tensor.
inline checkpoint_index parse_checkpoint_index(const std::string& text, const std::string& what) {
  using gattn::detail::concat;
  using kind = json_guard_result::kind;
  const json_guard_result guard = json_guard::check(text, max_index_depth);
  if (guard.what == kind::not_json)
    throw format_error(concat(what, ": not valid JSON", guard.reason.empty() ? "" : ": ", guard.reason));
  if (guard.what == kind::too_deep)
    throw format_error(concat(what, ": JSON nested deeper than ", max_index_depth, " levels at '", guard.path, "'"));
  if (guard.what == kind::duplicate_key) {
    if (guard.path == "weight_map")
      throw format_error(concat(what, ": tensor '", guard.key, "' is listed twice in weight_map"));
    throw format_error(concat(what, ": duplicate key '", guard.key, "'", guard.path.empty() ? "" : " in '", guard.path,
                              guard.path.empty() ? "" : "'"));
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw format_error(concat(what, ": not a JSON object but ", j.type_name()));
  const auto map_it = j.find("weight_map");
  if (map_it == j.end() || !map_it->is_object())
    throw format_error(concat(what, ": 'weight_map' is missing or not a JSON object"));

  checkpoint_index index;
  const auto meta_it = j.find("metadata");
  if (meta_it != j.end() && !meta_it->is_null()) {
    if (!meta_it->is_object()) throw format_error(concat(what, ": 'metadata' is not a JSON object"));
    for (const auto& [key, value] : meta_it->items())
      index.metadata.emplace(key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string())
      throw format_error(concat(what, ": weight_map value for tensor '", tensor, "' is not a string but ",
                                shard.type_name()));
    const auto& name = shard.get_ref<const std::string&>();
    if (!is_contained_shard_name(name))
      throw format_error(concat(what, ": tensor '", tensor, "' maps to shard '", name,
                                "', which is not a relative path inside the index's directory"));
    index.weight_map.emplace(tensor, name);
    index.shards[name].push_back(tensor);
  }
  return index;
}

}  // namespace detail

/// The tensors of a checkpoint, wherever they live:
/// - a safetensors file;
/// - a Hugging Face index (`model.safetensors.index.json`: {"metadata": {...}, "weight_map":
///   {"tensor name": "shard file name", ...}}), whose shards are resolved next to it;
/// - a directory holding `model.safetensors.index.json` (its shards), else `model.safetensors`,
///   else exactly one `*.safetensors` file.
///
/// The index and its shards must agree exactly: every tensor the index lists is in the shard it
/// names, and every tensor of a shard is listed, for that shard. Shard names are paths relative to
/// the index's directory that do not climb out of it (no absolute path, no ".."). Every refusal is
/// a format_error naming the index or file and the tensor or shard.
///
/// Symbolic links: the path given to open() is the caller's choice and is followed wherever it
/// leads. A file the checkpoint picks itself (a shard the index names; a directory's index,
/// model.safetensors or only *.safetensors file) is opened only when it resolves, through every
/// link on the way, inside the checkpoint directory (the index's directory, or the directory
/// given), or, for a snapshot of the Hugging Face cache (`<repo>/snapshots/<revision>/`, whose
/// files link to `../../blobs/<hash>`), inside `<repo>`; a link leading anywhere else is refused
/// before its target is opened. Files are opened only after stat() shows a regular file.
class checkpoint {
 public:
  /// Opens `path`: a directory, a file whose name ends in ".json" (an index) or a safetensors file.
  static checkpoint open(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return open_directory(path);
    if (ends_with(path, ".json")) return open_index(path);
    return checkpoint(safetensors_file::open(path));
  }

  /// The checkpoint of one safetensors file (implicit, so a safetensors_file works wherever a
  /// checkpoint is expected; the copy shares the file's bytes).
  checkpoint(safetensors_file file) : origin_(file.origin()), metadata_(file.metadata()) {
    shards_.push_back(std::move(file));
    index_shards();
  }

  /// Every tensor, shard by shard (shards in file-name order, each in data-offset order).
  /// `begin`/`end` are offsets in the tensor's own shard.
  const std::vector<tensor_info>& tensors() const { return tensors_; }

  /// Whether a tensor called `name` is in the checkpoint.
  bool contains(const std::string& name) const { return where_.count(name) != 0; }

  /// The tensor called `name`; weight_error when it is absent.
  const tensor_info& info(const std::string& name) const { return tensors_[locate(name).second]; }

  /// The tensor called `name` as stored in its shard's mapping, without a copy.
  tensor_view view(const std::string& name) const { return shards_[locate(name).first].view(name); }

  /// The tensor as float32 (a copy): see tensor_view::to_f32.
  std::vector<float> read_f32(const std::string& name) const { return view(name).to_f32(); }

  /// The tensor as float64 (a copy): see tensor_view::to_f64.
  std::vector<double> read_f64(const std::string& name) const { return view(name).to_f64(); }

  /// A single file's `__metadata__`, or an index's "metadata" (strings as they are, other values as
  /// JSON text, e.g. "total_size" -> "123456").
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  /// The path that was opened (a file, an index or a directory), or a single file's origin.
  const std::string& origin() const { return origin_; }

  /// The files the tensors come from (one for a single file).
  const std::vector<safetensors_file>& shards() const { return shards_; }

  /// The name of the index a checkpoint directory may hold.
  static constexpr const char* index_file_name = "model.safetensors.index.json";

 private:
  std::string origin_;
  std::vector<safetensors_file> shards_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::pair<std::size_t, std::size_t>> where_;  // name -> (shard, tensors_ index)
  std::map<std::string, std::string> metadata_;

  checkpoint() = default;

  static bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  }

  const std::pair<std::size_t, std::size_t>& locate(const std::string& name) const {
    const auto it = where_.find(name);
    if (it == where_.end()) throw weight_error(gattn::detail::concat("tensor '", name, "' not found in ", origin_));
    return it->second;
  }

  /// Fills tensors_ and where_ from shards_. A name in two shards is refused by the index checks
  /// before this runs; within one file the header already refused duplicates.
  void index_shards() {
    for (std::size_t s = 0; s < shards_.size(); ++s) {
      for (const tensor_info& t : shards_[s].tensors()) {
        where_.emplace(t.name, std::make_pair(s, tensors_.size()));
        tensors_.push_back(t);
      }
    }
  }

  static checkpoint open_directory(const std::string& dir) {
    namespace fs = std::filesystem;
    using gattn::detail::concat;
    std::error_code ec;
    const std::vector<std::string> roots = detail::link_roots(dir, concat("checkpoint directory '", dir, "'"));
    const fs::path index = fs::path(dir) / index_file_name;
    if (present(index)) {
      const detail::file_identity id = detail::contained_file(index.string(), roots, concat("checkpoint index '", index.string(), "'"));
      return open_index(index.string(), &id);
    }
    const fs::path single = fs::path(dir) / "model.safetensors";
    if (present(single)) return with_origin(checkpoint(open_contained(single.string(), roots)), dir);
    std::vector<std::string> found;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
      if (it->path().extension() == ".safetensors") found.push_back(it->path().string());
    if (ec) throw format_error(concat("checkpoint directory '", dir, "': cannot list it: ", ec.message()));
    if (found.size() != 1)
      throw format_error(concat("checkpoint directory '", dir, "': holds no ", index_file_name,
                                " and no model.safetensors, and ", found.size(), " *.safetensors files (need exactly one)"));
    return with_origin(checkpoint(open_contained(found[0], roots)), dir);
  }

  /// Whether a directory entry called `p` exists (a link counts even when its target does not: it
  /// is then refused by name instead of silently skipped).
  static bool present(const std::filesystem::path& p) {
    std::error_code ec;
    return std::filesystem::symlink_status(p, ec).type() != std::filesystem::file_type::not_found && !ec;
  }

  /// The safetensors file `path` of a checkpoint whose links may lead into `roots`.
  static safetensors_file open_contained(const std::string& path, const std::vector<std::string>& roots) {
    const detail::file_identity id = detail::contained_file(path, roots, gattn::detail::concat("safetensors '", path, "'"));
    return safetensors_file::open_checked(path, id);
  }

  static checkpoint with_origin(checkpoint c, std::string origin) {
    c.origin_ = std::move(origin);
    return c;
  }

  /// The index at `path` (when reached through a directory, `index_id` is what it was checked to
  /// resolve to) and its shards, each checked against the links its directory allows.
  static checkpoint open_index(const std::string& path, const detail::file_identity* index_id = nullptr) {
    using gattn::detail::concat;
    const std::string what = concat("checkpoint index '", path, "'");
    detail::checkpoint_index index =
        detail::parse_checkpoint_index(detail::read_capped_file(path, what, detail::max_index_bytes, index_id), what);
    checkpoint c;
    c.origin_ = path;
    c.metadata_ = std::move(index.metadata);
    const std::filesystem::path base = std::filesystem::path(path).parent_path();
    const std::vector<std::string> roots = detail::link_roots(base.string(), what);
    for (const auto& [shard, names] : index.shards) {
      try {
        c.shards_.push_back(open_contained((base / shard).string(), roots));
      } catch (const format_error& e) {
        throw format_error(concat(what, ": shard '", shard, "' (holding tensor '", names.front(), "'): ", e.what()));
      }
      const safetensors_file& file = c.shards_.back();
      for (const std::string& name : names)
        if (!file.contains(name))
          throw format_error(concat(what, ": tensor '", name, "' is listed in shard '", shard, "' but absent from it"));
      if (file.tensors().size() != names.size()) {
        // Some tensor of the shard is not listed for it: name one, and where the index puts it.
        for (const tensor_info& t : file.tensors()) {
          const auto listed_as = index.weight_map.find(t.name);
          if (listed_as == index.weight_map.end())
            throw format_error(concat(what, ": tensor '", t.name, "' of shard '", shard, "' is not in weight_map"));
          if (listed_as->second != shard)
            throw format_error(concat(what, ": tensor '", t.name, "' is in shard '", shard,
                                      "', but the index puts it in shard '", listed_as->second, "'"));
        }
      }
    }
    c.index_shards();
    return c;
  }
};

}  GATTN_NAMESPACE_END  // namespace gattn::io
