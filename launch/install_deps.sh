#!/usr/bin/env bash
# Installs what Elastra needs to build and test on Debian 12, skipping what is already there.
# Idempotent; apt-get as root, or through sudo. CUDA and NCCL are optional and never installed
# here: the build uses them when /usr/local/cuda has them.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libzmq3-dev cppzmq-dev libcereal-dev nlohmann-json3-dev libcli11-dev libxxhash-dev
  libcpp-httplib-dev
  # The allocator of the processes that run a coordinator (docs/scale.md).
  libjemalloc-dev
  # The dashboard's browser test (headless Chromium) and promtool for /metrics (docs/http.md).
  chromium prometheus
  libgloo-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenmpi-dev openmpi-bin python3
  # PMIx's headers: MPI rank 0 ends an mpirun job whose ranks were lost (worker/mpirun_job.h).
  libpmix-dev
  # make fuzz (and so make test): clang and its libFuzzer runtime (docs/hardening.md).
  clang-14 libclang-rt-14-dev
  # elastra::torch and examples/gpt: Debian's CPU LibTorch 1.13, and the English text train_gpt
  # learns (fortunes-min's /usr/share/games/fortunes/literature).
  libtorch-dev fortunes-min
  # The elastra Python package and its tests (docs/python.md): Debian's torch 1.13 for
  # /usr/bin/python3, pybind11 2.10, pytest.
  python3-torch pybind11-dev python3-pytest
  # The journal on etcd (docs/ha.md): its tests start single-member etcd servers of their own.
  etcd-server etcd-client
  # The Slurm tests (tests/slurm): a real Slurm cluster in network namespaces (docs/slurm.md).
  munge slurmctld slurmd slurm-client
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "install_deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
