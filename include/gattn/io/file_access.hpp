// Opening untrusted files: regular files only (checked before they are opened), sizes known before
// a byte is read, and either a read-only mapping (checkpoints) or a capped read (JSON files); and
// writing files whole or not at all (a temporary file renamed over the target). POSIX.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gattn/core/error.hpp"

GATTN_NAMESPACE_BEGIN namespace io::detail {

/// The bytes of a file, shared: the last owner unmaps (or frees) them.
struct shared_bytes {
  std::shared_ptr<const std::uint8_t> data;
  std::uint64_t size = 0;
};

/// An open file descriptor, closed when it goes out of scope.
class unique_fd {
 public:
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(unique_fd&&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  /// Closes now; false when close() reports an error (a deferred write error on some file systems).
  bool close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0;
  }

 private:
  int fd_;
};

/// A file as the file system knows it: device and inode. Two paths name the same file (through
/// links, hard links or another spelling) exactly when their identities are equal.
struct file_identity {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const file_identity& o) const { return device == o.device && inode == o.inode; }
  bool operator!=(const file_identity& o) const { return !(*this == o); }
};

inline file_identity identity_of(const struct stat& st) { return {st.st_dev, st.st_ino}; }

/// Refuses, from its stat alone, anything but a regular file: a device (/dev/zero) or a FIFO has
/// no size to check a header against and may never end, and opening a device can act by itself.
inline void require_regular(const struct stat& st, const std::string& what) {
  if (S_ISDIR(st.st_mode)) throw format_error(what + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    throw format_error(what + ": is not a regular file (a device, FIFO or socket cannot be read as one)");
}

/// Opens `path` read-only and returns it with its size. The file is stat()ed (following links)
/// and refused unless it is a regular file *before* it is opened; the opened descriptor is
/// fstat()ed again and refused unless it is that same file, so a path swapped in between is
/// refused too. With `expected`, the file must also be that one (a checkpoint file whose links
/// were checked first). O_NONBLOCK is kept against a FIFO swapped in at the last moment; it
/// changes nothing for regular files. Errors are format_errors starting with `what`.
inline unique_fd open_regular_file(const std::string& path, const std::string& what, std::uint64_t& size,
                                   const file_identity* expected = nullptr) {
  if (path.find('\0') != std::string::npos) throw format_error(what + ": the path contains a NUL byte");
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0)
    throw format_error(what + ": cannot open file for reading: " + std::strerror(errno));
  require_regular(before, what);
  if (expected && identity_of(before) != *expected)
    throw format_error(what + ": was replaced while it was being opened");
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) throw format_error(what + ": cannot open file for reading: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw format_error(what + ": cannot stat the file: " + std::strerror(errno));
  require_regular(st, what);
  if (identity_of(st) != identity_of(before)) throw format_error(what + ": was replaced while it was being opened");
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

/// Maps the regular file `path` read-only and private. The mapping is released when the last copy
/// of the returned pointer goes; the descriptor is closed at once (the mapping does not need it).
/// A file truncated by another process while mapped faults on access (SIGBUS), and one rewritten
/// in place changes what the mapping reads: mapping trades that for not copying gigabytes, as
/// every mmap-based loader does. (A file replaced by rename, as write_file_replacing does, leaves
/// the mapping on the earlier file.) `expected`: see open_regular_file.
inline shared_bytes map_file(const std::string& path, const std::string& what, const file_identity* expected = nullptr) {
  std::uint64_t size = 0;
  const unique_fd fd = open_regular_file(path, what, size, expected);
  shared_bytes out;
  out.size = size;
  if (size == 0) return out;  // mmap refuses length 0; callers check the size before reading
  if (size > std::numeric_limits<std::size_t>::max())
    throw format_error(what + ": file of " + std::to_string(size) + " bytes does not fit in the address space");
  const auto length = static_cast<std::size_t>(size);
  void* p = ::mmap(nullptr, length, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) throw format_error(what + ": cannot map the file: " + std::strerror(errno));
  out.data = std::shared_ptr<const std::uint8_t>(static_cast<const std::uint8_t*>(p), [length](const std::uint8_t* q) {
    ::munmap(const_cast<std::uint8_t*>(q), length);
  });
  return out;
}

/// The whole content of the regular file `path`, refused before reading when it is larger than
/// `max_bytes`. Reads at most the size fstat reported, so a file that grows cannot run away.
inline std::string read_capped_file(const std::string& path, const std::string& what, std::uint64_t max_bytes,
                                    const file_identity* expected = nullptr) {
  std::uint64_t size = 0;
  const unique_fd fd = open_regular_file(path, what, size, expected);
  if (size > max_bytes)
    throw format_error(what + ": file is " + std::to_string(size) + " bytes, more than the limit of " +
                       std::to_string(max_bytes));
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ::ssize_t n = ::read(fd.get(), &text[done], text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw format_error(what + ": read error: " + std::strerror(errno));
    if (n == 0) throw format_error(what + ": file shrank while it was being read");
    done += static_cast<std::size_t>(n);
  }
  return text;
}

/// Where a write to `path` lands: `path` with the symbolic links of its last component followed,
/// so that writing through a link replaces the file it names and keeps the link. A chain longer
/// than the system's limit (40) is returned as it stands (the writer then refuses it).
inline std::string write_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(p, ec)) break;
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  return p.string();
}

/// Writes all of `size` bytes to `fd`; false with errno set when the file system refuses.
inline bool write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ::ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

/// A new, empty file next to `target` (same directory, so that rename() is atomic), created
/// exclusively (never an existing file or link) with mode 0666 less the umask. Returns its path.
inline unique_fd create_temporary_next_to(const std::string& target, std::string& temp_path, const std::string& what) {
  namespace fs = std::filesystem;
  static std::atomic<unsigned> counter{0};
  const fs::path t(target);
  const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path = (dir / ("." + t.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                        std::to_string(counter++))).string();
    const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd >= 0) return unique_fd(fd);
    if (errno != EEXIST) throw format_error(what + ": cannot create a file in '" + dir.string() + "': " + std::strerror(errno));
  }
  throw format_error(what + ": cannot create a temporary file in '" + dir.string() + "'");
}

/// fsync of a directory, so that a rename in it survives a crash. Best effort: some file systems
/// cannot sync a directory, and the data itself was synced already.
inline void sync_directory(const std::string& file_in_it) {
  const std::filesystem::path p(file_in_it);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

/// Writes `size` bytes to an existing file that is not a regular file (/dev/null, a FIFO, a
/// terminal): it has no earlier content to keep, and a rename would replace the device itself.
inline void write_in_place(const std::string& target, const void* data, std::size_t size, const std::string& what) {
  const unique_fd fd(::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) throw format_error(what + ": cannot open for writing: " + std::strerror(errno));
  if (!write_all(fd.get(), data, size)) throw format_error(what + ": write failed: " + std::strerror(errno));
}

/// Writes `size` bytes to `path` whole or not at all: into a temporary file in the target's
/// directory, flushed to disk (fsync), then renamed over the target; on any failure (a full disk,
/// a quota, the file size limit) the temporary file is removed and the target keeps its earlier
/// content. Links of the last component are followed (see write_target); a replaced file keeps
/// its permission bits. An existing target that is not a regular file is written in place
/// (write_in_place); a directory is refused. Errors are format_errors starting with `what`.
inline void write_file_replacing(const std::string& path, const void* data, std::size_t size, const std::string& what) {
  const std::string target = write_target(path);
  struct stat st {};
  const bool exists = ::lstat(target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) throw format_error(what + ": is a directory");
  if (exists && S_ISLNK(st.st_mode)) throw format_error(what + ": too many levels of symbolic links");
  if (exists && !S_ISREG(st.st_mode)) return write_in_place(target, data, size, what);
  std::string temp;
  unique_fd fd = create_temporary_next_to(target, temp, what);
  const auto fail = [&](const char* step) {
    const std::string reason = std::strerror(errno);
    ::unlink(temp.c_str());
    throw format_error(what + ": " + step + ": " + reason);
  };
  if (exists && ::fchmod(fd.get(), st.st_mode & 07777) != 0) fail("cannot set the permissions");
  if (!write_all(fd.get(), data, size)) fail("write failed");
  if (::fsync(fd.get()) != 0) fail("write failed (fsync)");
  if (!fd.close()) fail("write failed (close)");
  if (::rename(temp.c_str(), target.c_str()) != 0) fail("cannot replace the file");
  sync_directory(target);
}

}  GATTN_NAMESPACE_END  // namespace gattn::io::detail
