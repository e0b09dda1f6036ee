// Which files a checkpoint opens: symbolic links are followed into the checkpoint directory and,
// in the Hugging Face cache layout (<repo>/snapshots/<rev>/ linking into <repo>/blobs/), into the
// repository; anywhere else they are refused before the target is opened. Non-regular files are
// refused before they are opened, and no error message quotes the bytes of a file that is not a
// safetensors file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gattn/io/checkpoint.hpp"
#include "gattn/io/config_file.hpp"
#include "gattn/io/safetensors.hpp"

// One namespace per file: the test target is built as a few unity translation units.
namespace test_checkpoint_links {

namespace {

namespace fs = std::filesystem;
using gattn::format_error;
using gattn::io::checkpoint;
using gattn::io::dtype;
using gattn::io::safetensors_file;
using ::testing::HasSubstr;
using ::testing::Not;

/// A fresh directory under the system temp dir, removed with its content at scope exit.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& tag) {
    path = fs::temp_directory_path() / ("gattn_test_links_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

const std::vector<float> x_values{1, 2}, y_values{3, 4, 5};

void write_x(const std::string& path) { gattn::io::write_safetensors(path, {{"x", dtype::f32, {2}, x_values.data()}}); }
void write_y(const std::string& path) { gattn::io::write_safetensors(path, {{"y", dtype::f32, {3}, y_values.data()}}); }

/// `text` with every occurrence of `part` (a path, which may hold any digits) removed.
std::string without(std::string text, const std::string& part) {
  for (std::size_t at; !part.empty() && (at = text.find(part)) != std::string::npos;) text.erase(at, part.size());
  return text;
}

const char* const two_shard_index = R"({"weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})";

/// The format_error message of `fn` ("" and a test failure when it does not throw one).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const format_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected format_error, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected format_error, got no exception";
  return "";
}

// The Hugging Face cache: snapshots/<rev>/ holds links into ../../blobs/, the index too.
TEST(CheckpointLinks, HuggingFaceCacheLayoutLoads) {
  temp_dir repo("hf_cache");
  fs::create_directories(repo.path / "blobs");
  fs::create_directories(repo.path / "snapshots" / "0123abc");
  write_x(repo.file("blobs/1111"));
  write_y(repo.file("blobs/2222"));
  write_text(repo.file("blobs/3333"), two_shard_index);
  const fs::path snap = repo.path / "snapshots" / "0123abc";
  fs::create_symlink("../../blobs/1111", snap / "a.safetensors");
  fs::create_symlink("../../blobs/2222", snap / "b.safetensors");
  fs::create_symlink("../../blobs/3333", snap / "model.safetensors.index.json");
  for (const std::string& path : {snap.string(), (snap / "model.safetensors.index.json").string()}) {
    const auto ck = checkpoint::open(path);
    EXPECT_EQ(ck.read_f32("x"), x_values) << path;
    EXPECT_EQ(ck.read_f32("y"), y_values) << path;
  }
  // A single-file snapshot, through a link to the snapshot directory itself.
  fs::create_directories(repo.path / "snapshots" / "4567def");
  fs::create_symlink("../../blobs/1111", repo.path / "snapshots" / "4567def" / "model.safetensors");
  fs::create_directory_symlink(repo.path / "snapshots" / "4567def", repo.file("latest"));
  EXPECT_EQ(checkpoint::open(repo.file("latest")).read_f32("x"), x_values);
}

// Links that stay inside the checkpoint directory are followed.
TEST(CheckpointLinks, LinksInsideTheDirectoryAreFollowed) {
  temp_dir dir("inside");
  fs::create_directories(dir.path / "real");
  write_x(dir.file("real/a.safetensors"));
  write_y(dir.file("b.safetensors"));
  fs::create_symlink("real/a.safetensors", dir.path / "a.safetensors");
  write_text(dir.file("model.safetensors.index.json"), two_shard_index);
  EXPECT_EQ(checkpoint::open(dir.path.string()).read_f32("x"), x_values);
  // A file named directly is the caller's choice: followed wherever it points.
  temp_dir other("direct");
  fs::create_symlink(dir.file("b.safetensors"), other.path / "named.safetensors");
  EXPECT_EQ(checkpoint::open(other.file("named.safetensors")).read_f32("y"), y_values);
}

/// A checkpoint directory and a directory outside it holding a valid shard and a secret.
struct outside_case {
  temp_dir dir{"ckpt"}, outside{"outside"};
  outside_case() {
    write_y(dir.file("b.safetensors"));
    write_x(outside.file("a.safetensors"));
    write_text(outside.file("secret"), "root:$6$SECRETSECRETSECRET:19000:0:99999:7:::\n");
  }
};

// A shard, index or directory file that resolves outside is refused, naming the link.
TEST(CheckpointLinks, LinksLeavingTheCheckpointAreRefused) {
  {
    const outside_case c;
    fs::create_symlink(c.outside.file("a.safetensors"), c.dir.path / "a.safetensors");
    write_text(c.dir.file("model.safetensors.index.json"), two_shard_index);
    const std::string m = error_of([&] { (void)checkpoint::open(c.dir.path.string()); });
    EXPECT_THAT(m, HasSubstr("a.safetensors"));
    EXPECT_THAT(m, HasSubstr("outside"));
  }
  {  // a directory on the way is the link
    const outside_case c;
    fs::create_directory_symlink(c.outside.path, c.dir.path / "sub");
    write_text(c.dir.file("model.safetensors.index.json"),
               R"({"weight_map": {"x": "sub/a.safetensors", "y": "b.safetensors"}})");
    EXPECT_THAT(error_of([&] { (void)checkpoint::open(c.dir.file("model.safetensors.index.json")); }),
                HasSubstr("sub/a.safetensors"));
  }
  {  // the directory's model.safetensors, its only *.safetensors file, its index
    const outside_case c;
    fs::remove(c.dir.file("b.safetensors"));
    fs::create_symlink(c.outside.file("a.safetensors"), c.dir.path / "only.safetensors");
    EXPECT_THAT(error_of([&] { (void)checkpoint::open(c.dir.path.string()); }), HasSubstr("outside"));
    fs::create_symlink(c.outside.file("a.safetensors"), c.dir.path / "model.safetensors");
    EXPECT_THAT(error_of([&] { (void)checkpoint::open(c.dir.path.string()); }), HasSubstr("outside"));
    write_text(c.outside.file("index.json"), R"({"weight_map": {"x": "only.safetensors"}})");
    fs::create_symlink(c.outside.file("index.json"), c.dir.path / "model.safetensors.index.json");
    EXPECT_THAT(error_of([&] { (void)checkpoint::open(c.dir.path.string()); }), HasSubstr("outside"));
  }
}

// A shard linked to a file that is not a safetensors file (/etc/shadow, say) is refused before it
// is read, and the message quotes none of its bytes.
TEST(CheckpointLinks, ForeignFileIsNeverQuoted) {
  const outside_case c;
  fs::create_symlink(c.outside.file("secret"), c.dir.path / "a.safetensors");
  write_text(c.dir.file("model.safetensors.index.json"), two_shard_index);
  std::uint64_t n = 0;  // the first 8 bytes as a little-endian header length
  const std::string head = "root:$6$";
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(head[std::size_t(i)]);
  const std::string m = error_of([&] { (void)checkpoint::open(c.dir.path.string()); });
  EXPECT_THAT(m, HasSubstr("outside"));
  EXPECT_THAT(m, Not(HasSubstr(std::to_string(n))));
  EXPECT_THAT(m, Not(HasSubstr("SECRET")));
  // Named directly, the file is opened (the caller chose it) but the refusal still quotes nothing:
  // its first 8 bytes are not printed as a header length.
  const std::string direct = without(error_of([&] { (void)safetensors_file::open(c.outside.file("secret")); }),
                                     c.outside.path.string());
  EXPECT_THAT(direct, Not(HasSubstr(std::to_string(n))));
  EXPECT_THAT(direct, Not(HasSubstr("SECRET")));
  // A length that is plausible for a small file but larger than it: not printed either.
  write_text(c.outside.file("small.bin"), std::string("ZZ\0\0\0\0\0\0abc", 11));
  const std::string m2 = without(error_of([&] { (void)safetensors_file::open(c.outside.file("small.bin")); }),
                                 c.outside.path.string());
  EXPECT_THAT(m2, Not(HasSubstr("23130")));  // "ZZ" as a little-endian length
  EXPECT_THAT(m2, HasSubstr("3 bytes"));
}

/// Whether `path` was opened by anyone between now and the call of done() (inotify IN_OPEN).
class open_watch {
 public:
  explicit open_watch(const std::string& path) : fd_(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_ >= 0) ::inotify_add_watch(fd_, path.c_str(), IN_OPEN);
  }
  ~open_watch() {
    if (fd_ >= 0) ::close(fd_);
  }
  open_watch(const open_watch&) = delete;
  open_watch& operator=(const open_watch&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool opened() const {
    alignas(inotify_event) char buffer[4096];
    return ::read(fd_, buffer, sizeof buffer) > 0;
  }

 private:
  int fd_;
};

// A FIFO (or a device) is refused on sight: it is never opened, since opening a device can have
// effects of its own. Through a link inside the directory as well as named directly.
TEST(CheckpointLinks, NonRegularFilesAreRefusedBeforeTheyAreOpened) {
  temp_dir dir("fifo");
  const std::string fifo = dir.file("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const open_watch watch(fifo);
  ASSERT_TRUE(watch.ok());
  EXPECT_THAT(error_of([&] { (void)safetensors_file::open(fifo); }), HasSubstr("not a regular file"));
  EXPECT_THAT(error_of([&] { (void)gattn::io::load_layer_config(fifo); }), HasSubstr("not a regular file"));
  EXPECT_THAT(error_of([&] { (void)checkpoint::open(dir.path.string()); }), HasSubstr("not a regular file"));
  fs::create_symlink("pipe.safetensors", dir.path / "model.safetensors");
  EXPECT_THAT(error_of([&] { (void)checkpoint::open(dir.path.string()); }), HasSubstr("not a regular file"));
  EXPECT_FALSE(watch.opened()) << "the FIFO was opened before it was refused";
}

}  // namespace

}  // namespace test_checkpoint_links
