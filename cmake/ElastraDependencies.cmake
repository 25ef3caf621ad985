# Finds Elastra's dependencies. Required: Threads, ZeroMQ, cpp-httplib, cereal, nlohmann-json,
# Gloo, CLI11 (the elastra command's parser, header-only).
# Optional (AUTO|ON|OFF): CUDA, NCCL, MPI.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
# The coordinator's HTTP API (Debian's libcpp-httplib-dev: a header and a shared library).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
find_path(CPPZMQ_INCLUDE_DIR zmq.hpp REQUIRED)
find_path(CEREAL_INCLUDE_DIR cereal/cereal.hpp REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(Gloo CONFIG REQUIRED)
find_path(XXHASH_INCLUDE_DIR xxhash.h)
find_library(XXHASH_LIBRARY xxhash)

function(elastra_resolve_option name found)
  if(${name} STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "${name}=ON but the dependency was not found")
  endif()
  if(${name} STREQUAL "OFF")
    set(${found} FALSE PARENT_SCOPE)
  endif()
endfunction()

# CUDA: the toolkit in its usual place.
set(ELASTRA_HAVE_CUDA FALSE)
if(NOT ELASTRA_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(ELASTRA_HAVE_CUDA TRUE)
  endif()
endif()
elastra_resolve_option(ELASTRA_WITH_CUDA ELASTRA_HAVE_CUDA)

# NCCL: ships beside CUDA on our machines.
set(ELASTRA_HAVE_NCCL FALSE)
if(NOT ELASTRA_WITH_NCCL STREQUAL "OFF" AND ELASTRA_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(ELASTRA_HAVE_NCCL TRUE)
    add_library(elastra_nccl_dep INTERFACE IMPORTED)
    target_include_directories(elastra_nccl_dep INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(elastra_nccl_dep INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
elastra_resolve_option(ELASTRA_WITH_NCCL ELASTRA_HAVE_NCCL)

# MPI: Open MPI from Debian.
set(ELASTRA_HAVE_MPI FALSE)
if(NOT ELASTRA_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(ELASTRA_HAVE_MPI TRUE)
  endif()
endif()
elastra_resolve_option(ELASTRA_WITH_MPI ELASTRA_HAVE_MPI)

# LibTorch: Debian's libtorch-dev (CPU, 1.13) installs TorchConfig.cmake under
# /usr/lib/<multiarch>/cmake/Torch, which find_package searches; a CUDA LibTorch elsewhere is
# found through Torch_DIR or CMAKE_PREFIX_PATH. Builds elastra::torch and examples/gpt.
set(ELASTRA_HAVE_TORCH FALSE)
if(NOT ELASTRA_WITH_TORCH STREQUAL "OFF" AND NOT ELASTRA_FUZZ)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(ELASTRA_HAVE_TORCH TRUE)
  endif()
endif()
elastra_resolve_option(ELASTRA_WITH_TORCH ELASTRA_HAVE_TORCH)

message(STATUS "Elastra: CUDA=${ELASTRA_HAVE_CUDA} NCCL=${ELASTRA_HAVE_NCCL} MPI=${ELASTRA_HAVE_MPI} "
               "Torch=${ELASTRA_HAVE_TORCH}")

# jemalloc: the allocator of the processes that run a coordinator (the elastra command and
# bench_scale link elastra_coordinator_malloc; libraries and workers keep theirs). A change at
# 16,384 workers allocates and frees per-worker vectors of hundreds of KB between tens of
# thousands of small frames; glibc's malloc consolidated its fast bins on each large request (3-10
# ms a time) and jemalloc takes about 20% less of the coordinator's CPU a change (docs/scale.md).
# Not under sanitizers or the fuzz build: they bring their own allocator.
set(ELASTRA_HAVE_JEMALLOC FALSE)
add_library(elastra_coordinator_malloc INTERFACE)
if(NOT ELASTRA_WITH_JEMALLOC STREQUAL "OFF" AND "${ELASTRA_SANITIZE}" STREQUAL "" AND NOT ELASTRA_FUZZ)
  pkg_check_modules(JEMALLOC QUIET IMPORTED_TARGET jemalloc)
  if(JEMALLOC_FOUND)
    set(ELASTRA_HAVE_JEMALLOC TRUE)
    target_link_libraries(elastra_coordinator_malloc INTERFACE PkgConfig::JEMALLOC)
    # Its options for a coordinator: keep and reuse the pages a change frees (the file says why).
    target_sources(elastra_coordinator_malloc INTERFACE
                   ${PROJECT_SOURCE_DIR}/launch/coordinator_malloc.cc)
  endif()
endif()
elastra_resolve_option(ELASTRA_WITH_JEMALLOC ELASTRA_HAVE_JEMALLOC)
