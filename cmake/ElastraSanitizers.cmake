# The sanitizer builds and the fuzz build (docs/hardening.md). Their flags apply to every object,
# the one place where flags are global: a library left uninstrumented hides its memory errors
# from AddressSanitizer and shows ThreadSanitizer only half of each race.
#
#   ELASTRA_SANITIZE=address,undefined   make test-asan (build-asan/), clang
#   ELASTRA_SANITIZE=thread              make test-tsan (build-tsan/), gcc
#   ELASTRA_FUZZ=ON                      make fuzz (build-fuzz/), clang: libFuzzer + ASan + UBSan
if(ELASTRA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "ELASTRA_FUZZ=ON needs clang (libFuzzer): configure with "
                        "CC=clang-14 CXX=clang++-14, as `make fuzz` does")
  endif()
  if(ELASTRA_SANITIZE)
    message(FATAL_ERROR "ELASTRA_FUZZ=ON already builds with address,undefined")
  endif()
  # The fuzz build is the parsers' libraries only (common, checkpoint, coordinator), static, and
  # none of the optional backends.
  set(BUILD_SHARED_LIBS OFF)
  set(ELASTRA_WITH_CUDA OFF)
  set(ELASTRA_WITH_NCCL OFF)
  set(ELASTRA_WITH_MPI OFF)
  # Coverage for libFuzzer in every object; undefined behaviour is a finding, not a warning.
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(ELASTRA_SANITIZE)
  if(NOT ELASTRA_SANITIZE MATCHES "^(address|undefined|thread)(,(address|undefined|thread))*$")
    message(FATAL_ERROR "ELASTRA_SANITIZE='${ELASTRA_SANITIZE}': a comma-separated list of "
                        "address, undefined, thread")
  endif()
  if(ELASTRA_SANITIZE MATCHES "thread" AND ELASTRA_SANITIZE MATCHES "address")
    message(FATAL_ERROR "ThreadSanitizer and AddressSanitizer cannot be combined")
  endif()
  # Frame pointers keep the reports' stacks whole.
  add_compile_options(-fsanitize=${ELASTRA_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${ELASTRA_SANITIZE})
  if(ELASTRA_SANITIZE MATCHES "undefined")
    # UBSan findings abort the test (as ASan's do) instead of printing and going on.
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()
