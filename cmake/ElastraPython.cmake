# The Python package (python/, docs/python.md): which interpreter it is built for.
#
# The package is only useful where `import torch` works, and the python3 first on PATH is often
# not that one (a pyenv or venv interpreter without torch, while Debian's python3-torch belongs to
# /usr/bin/python3). So the candidates are tried in order and the first that imports torch wins:
#   ELASTRA_PYTHON (a path; when set, the only candidate), /usr/bin/python3, python3 on PATH.
# Sets ELASTRA_HAVE_PYTHON, ELASTRA_PYTHON_EXECUTABLE and ELASTRA_PYTHON_SITE (where
# `cmake --install` puts the package: that interpreter's site-packages under the install prefix,
# or its dist-packages on Debian). Without an interpreter with torch and pybind11 the Python parts
# are skipped with a message; nothing else in the build changes.
set(ELASTRA_PYTHON "" CACHE FILEPATH
    "Python 3 interpreter (with torch) to build the elastra package for; empty: search")
set(ELASTRA_HAVE_PYTHON FALSE)
set(ELASTRA_PYTHON_EXECUTABLE "")

if(ELASTRA_FUZZ)
  return()
endif()
if(NOT "${ELASTRA_SANITIZE}" STREQUAL "")
  # A sanitized extension needs the sanitizer's runtime preloaded into an uninstrumented
  # interpreter, and torch's own allocations then trip it: docs/hardening.md lists the tests that
  # are left out here and why.
  message(STATUS "Elastra Python package: skipped under ELASTRA_SANITIZE=${ELASTRA_SANITIZE}")
  return()
endif()

if(ELASTRA_PYTHON)
  set(_elastra_candidates "${ELASTRA_PYTHON}")
else()
  find_program(_elastra_path_python3 NAMES python3 NO_CACHE)
  set(_elastra_candidates /usr/bin/python3)
  if(_elastra_path_python3)
    list(APPEND _elastra_candidates "${_elastra_path_python3}")
  endif()
  list(REMOVE_DUPLICATES _elastra_candidates)
endif()

foreach(_candidate IN LISTS _elastra_candidates)
  if(NOT EXISTS "${_candidate}")
    continue()
  endif()
  execute_process(
    COMMAND "${_candidate}" -c "import torch, sys; print(torch.__version__, end='')"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _torch_version ERROR_QUIET TIMEOUT 120)
  if(_rc EQUAL 0)
    set(ELASTRA_PYTHON_EXECUTABLE "${_candidate}")
    break()
  endif()
  message(STATUS "Elastra Python package: ${_candidate} cannot import torch")
endforeach()

if(NOT ELASTRA_PYTHON_EXECUTABLE)
  message(STATUS "Elastra Python package: skipped, no Python 3 interpreter imports torch "
                 "(tried: ${_elastra_candidates}; set -DELASTRA_PYTHON=PATH, or install "
                 "python3-torch)")
  return()
endif()

# pybind11 must find the same interpreter's headers: name it before find_package.
set(PYTHON_EXECUTABLE "${ELASTRA_PYTHON_EXECUTABLE}" CACHE FILEPATH "" FORCE)
find_package(pybind11 2.6 CONFIG QUIET)
if(NOT pybind11_FOUND)
  message(STATUS "Elastra Python package: skipped, pybind11 not found (install pybind11-dev)")
  return()
endif()

# Where the interpreter looks for packages, relative to the install prefix: Debian's python3
# reads PREFIX/lib/python3.X/dist-packages for /usr/local (and /usr/lib/python3/dist-packages for
# its own packages); other builds read PREFIX/lib/python3.X/site-packages.
execute_process(
  COMMAND "${ELASTRA_PYTHON_EXECUTABLE}" -c
          "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}', end='')"
  OUTPUT_VARIABLE _pyver)
if(EXISTS /etc/debian_version AND ELASTRA_PYTHON_EXECUTABLE MATCHES "^/usr/bin/")
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(_site "lib/python3/dist-packages")
  else()
    set(_site "lib/python${_pyver}/dist-packages")
  endif()
else()
  set(_site "lib/python${_pyver}/site-packages")
endif()
# -DELASTRA_PYTHON_SITE=DIR (relative to the prefix) overrides.
if(NOT ELASTRA_PYTHON_SITE)
  set(ELASTRA_PYTHON_SITE "${_site}")
endif()
set(ELASTRA_HAVE_PYTHON TRUE)
message(STATUS "Elastra Python package: ${ELASTRA_PYTHON_EXECUTABLE} (torch ${_torch_version}), "
               "pybind11 ${pybind11_VERSION}; installs to "
               "${CMAKE_INSTALL_PREFIX}/${ELASTRA_PYTHON_SITE}")
