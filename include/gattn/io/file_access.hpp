// Opening untrusted files: regular files only, sizes known before a byte is read, and either a
// read-only mapping (checkpoints) or a capped read (JSON files). POSIX.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gattn/core/error.hpp"

namespace gattn::io::detail {

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

 private:
  int fd_;
};

/// Opens `path` read-only and returns it with its size, refusing anything but a regular file: a
/// device (/dev/zero), a FIFO or a socket has no size to check a header against and may never end.
/// O_NONBLOCK keeps open() itself from waiting for a FIFO's writer; it changes nothing for regular
/// files. Errors are format_errors starting with `what` (which names the path).
inline unique_fd open_regular_file(const std::string& path, const std::string& what, std::uint64_t& size) {
  if (path.find('\0') != std::string::npos) throw format_error(what + ": the path contains a NUL byte");
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw format_error(what + ": cannot open file for reading: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw format_error(what + ": cannot stat the file: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw format_error(what + ": is a directory, not a file");
  if (!S_ISREG(st.st_mode))
    throw format_error(what + ": is not a regular file (a device, FIFO or socket cannot be read as one)");
  size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

/// Maps the regular file `path` read-only and private. The mapping is released when the last copy
/// of the returned pointer goes; the descriptor is closed at once (the mapping does not need it).
/// A file truncated by another process while mapped faults on access (SIGBUS): mapping trades that
/// for not copying gigabytes, as every mmap-based loader does.
inline shared_bytes map_file(const std::string& path, const std::string& what) {
  std::uint64_t size = 0;
  const unique_fd fd = open_regular_file(path, what, size);
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
inline std::string read_capped_file(const std::string& path, const std::string& what, std::uint64_t max_bytes) {
  std::uint64_t size = 0;
  const unique_fd fd = open_regular_file(path, what, size);
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

}  // namespace gattn::io::detail
