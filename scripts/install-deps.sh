#!/usr/bin/env bash
# Install the Debian 12 packages gattn needs, and nothing that is already there.
#
#   scripts/install-deps.sh                 # build + test deps (with Open MPI for gattn::mpi)
#   scripts/install-deps.sh --cross         # + AArch64 cross compiler and qemu-user
#   scripts/install-deps.sh --fuzz --plot   # + clang/libFuzzer, gnuplot
#
# Idempotent: checks each package with dpkg first and runs `apt-get update` + `apt-get install`
# only when something is missing. Needs root (or sudo) only in that case.
set -euo pipefail

pkgs=(cmake g++ make libeigen3-dev libxsimd-dev nlohmann-json3-dev libgtest-dev libgmock-dev libbenchmark-dev)
# Tensor parallelism over MPI (gattn::mpi, `mpirun -np P gattn-mpi run`): the host's Open MPI. The
# AArch64 cross build does not use it (CMake never looks for MPI when cross-compiling).
pkgs+=(libopenmpi-dev openmpi-bin)
for arg in "$@"; do
  case "$arg" in
    --cross) pkgs+=(g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user googletest) ;;
    --fuzz)  pkgs+=(clang libclang-rt-14-dev) ;;
    --plot)  pkgs+=(gnuplot-nox) ;;
    --all)   pkgs+=(g++-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user clang libclang-rt-14-dev gnuplot-nox) ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument '$arg' (use --cross, --fuzz, --plot, --all)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "install-deps: missing packages and not root (no sudo): ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
