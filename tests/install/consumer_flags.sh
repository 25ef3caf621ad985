# Sourced by the install tests: CONSUMER_FLAGS, the cmake arguments that build an outside project
# the way the build tree at $BUILD was built. A sanitized tree (make test-asan: clang with ASan and
# UBSan) installs libraries that need the consumer compiled by the same compiler and linked with the
# same runtimes; a plain tree needs nothing.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
CONSUMER_FLAGS=()
sanitize=$(cache_value ELASTRA_SANITIZE)
if [ -n "$sanitize" ]; then
  CONSUMER_FLAGS+=(-DCMAKE_C_COMPILER="$(cache_value CMAKE_C_COMPILER)"
    -DCMAKE_CXX_COMPILER="$(cache_value CMAKE_CXX_COMPILER)"
    -DCMAKE_CXX_FLAGS="-fsanitize=$sanitize" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=$sanitize")
fi
