// The installed package's runtime dispatch (gattn_add_dispatched): an entry compiled per arch.
#pragma once

struct probe_entry {
  /// Runs one small SDPA with the arch's kernels; returns max|out - scalar answer| and the arch's
  /// name (gattn::default_arch::name()) through `arch`.
  template <class Arch>
  double operator()(Arch, const char** arch) const;
};
