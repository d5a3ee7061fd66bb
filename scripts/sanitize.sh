#!/usr/bin/env bash
# A sanitizer job: builds Pagoda with clang and a sanitizer in its own build
# folder and runs tests through ctest. Any sanitizer report fails its test,
# so ctest and this script fail; the output ends with ctest's summary.
#   scripts/sanitize.sh address   ASan+UBSan (build-asan): every ctest test
#                                 but the node client tests
#   scripts/sanitize.sh thread    TSan (build-tsan): the thread pool, engine,
#                                 HTTP and server tests (tests/core,
#                                 tests/engine, tests/http, tests/server)
# Extra arguments go to ctest (e.g. -R ThreadPool).
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:?usage: scripts/sanitize.sh address|thread [ctest args...]}"
shift
jobs="${PAGODA_JOBS:-2}"
case "$kind" in
  address)
    dir=build-asan
    targets=(all)
    select=(-LE '^node$')  # the node clients: covered by the Release run
    # halt_on_error: stop at the first report; the leak checker runs at exit.
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
    # lsan.supp: what OpenMPI's own libraries keep (tests/dist under mpirun).
    export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
    ;;
  thread)
    dir=build-tsan
    targets=(core_test engine_test http_test server_test)
    select=(-L '^(core|engine|http|server)$')
    # tsan.supp: races TSan invents inside the uninstrumented libcpp-httplib.
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
    ;;
  *)
    echo "sanitize.sh: unknown sanitizer '$kind' (address or thread)" >&2
    exit 2
    ;;
esac

# Warnings are errors in the GCC Release build (scripts/test.sh); here clang
# only reports them.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_SANITIZE="$kind" \
  -DPAGODA_BENCH=OFF -DPAGODA_WERROR=OFF "${launcher[@]}" >/dev/null
ninja -C "$dir" -j"$jobs" "${targets[@]}"
cd "$dir"
# ctest prints its summary before the label times and the failed tests;
# repeat it so the job's output ends with it.
set +e
ctest "${select[@]}" --output-on-failure -j"$jobs" --timeout 900 "$@" 2>&1 | tee ctest.log
status=${PIPESTATUS[0]}
set -e
echo "=== sanitize.sh $kind:"
grep -E '^[0-9]+% tests passed' ctest.log | tail -1 || echo "ctest printed no summary (exit status $status)"
exit "$status"
