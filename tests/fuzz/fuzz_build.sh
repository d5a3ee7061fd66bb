# Sourced by the run_*_fuzz.sh scripts: `fuzz_build TARGET` configures the
# fuzz build folder ($BUILD_DIR, default build-fuzz: clang, ASan+UBSan,
# libFuzzer, tests off) on first use and builds TARGET in it. Sets $root and
# $build.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"

fuzz_build() {
  if [[ ! -f "$build/build.ninja" ]]; then
    local launcher=()
    command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
    CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPAGODA_FUZZ=ON -DPAGODA_TESTS=OFF -DPAGODA_NATIVE=OFF "${launcher[@]}"
  fi
  ninja -C "$build" -j"${FUZZ_JOBS:-2}" "$1"
}
