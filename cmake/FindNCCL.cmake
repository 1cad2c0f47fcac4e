# FindNCCL: NVIDIA's collective communication library, as the imported target NCCL::nccl.
#
# Searched in this order, the first place holding both nccl.h and the library wins (so a header of one NCCL is
# never paired with the library of another):
#   1. NCCL_ROOT (CMake or environment variable): <root>/include, <root>/lib, lib64 or lib/<multiarch>;
#   2. the CUDA toolkit's own include and library folders (found by find_package(CUDAToolkit), called here when
#      the caller has not);
#   3. the system folders (/usr/include, the multiarch library folder such as /usr/lib/x86_64-linux-gnu, ...);
#   4. the nvidia-nccl-cu13 Python wheel (nvidia/nccl/include, nvidia/nccl/lib) of the first python3 on PATH.
# The library is found as libnccl.so or, where only the versioned file exists (the wheel), libnccl.so.2.
#
# Sets NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION (from nccl.h) and NCCL_VERSION_MAJOR/MINOR/PATCH.
# Set NCCL_INCLUDE_DIR and NCCL_LIBRARY in the cache to skip the search; NCCL_IMPORT_GLOBAL makes the imported
# target global (visible to every directory of the build).
include(FindPackageHandleStandardArgs)

set(_nccl_lib_names nccl libnccl.so.2)
set(_nccl_lib_suffixes lib lib64)
if(CMAKE_LIBRARY_ARCHITECTURE)
  list(APPEND _nccl_lib_suffixes lib/${CMAKE_LIBRARY_ARCHITECTURE})
endif()

# Looks for nccl.h and the library under the given prefixes only; sets _nccl_inc and _nccl_lib when both are there.
function(_nccl_search_in)
  set(_nccl_inc "" PARENT_SCOPE)
  set(_nccl_lib "" PARENT_SCOPE)
  unset(_inc)
  unset(_lib)
  if(NOT ARGN)
    return()
  endif()
  find_path(_inc nccl.h PATHS ${ARGN} PATH_SUFFIXES include NO_DEFAULT_PATH NO_CACHE)
  find_library(_lib NAMES ${_nccl_lib_names} PATHS ${ARGN} PATH_SUFFIXES ${_nccl_lib_suffixes} NO_DEFAULT_PATH NO_CACHE)
  if(_inc AND _lib)
    set(_nccl_inc "${_inc}" PARENT_SCOPE)
    set(_nccl_lib "${_lib}" PARENT_SCOPE)
  endif()
endfunction()

if(NOT (NCCL_INCLUDE_DIR AND NCCL_LIBRARY))
  set(_nccl_found_where "")
  # 1. NCCL_ROOT
  set(_nccl_roots)
  if(DEFINED NCCL_ROOT AND NOT NCCL_ROOT STREQUAL "")
    list(APPEND _nccl_roots "${NCCL_ROOT}")
  endif()
  if(DEFINED ENV{NCCL_ROOT} AND NOT "$ENV{NCCL_ROOT}" STREQUAL "")
    list(APPEND _nccl_roots "$ENV{NCCL_ROOT}")
  endif()
  _nccl_search_in(${_nccl_roots})
  if(_nccl_lib)
    set(_nccl_found_where "NCCL_ROOT")
  endif()

  # 2. the CUDA toolkit
  if(NOT _nccl_lib)
    if(NOT CUDAToolkit_FOUND)
      find_package(CUDAToolkit QUIET)
    endif()
    set(_nccl_cuda_dirs)
    foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS CUDAToolkit_LIBRARY_DIR)
      get_filename_component(_parent "${dir}" DIRECTORY)  # <toolkit>/include -> <toolkit>
      list(APPEND _nccl_cuda_dirs "${_parent}")
    endforeach()
    if(CUDAToolkit_TARGET_DIR)
      list(APPEND _nccl_cuda_dirs "${CUDAToolkit_TARGET_DIR}")
    endif()
    if(CUDAToolkit_LIBRARY_ROOT)
      list(APPEND _nccl_cuda_dirs "${CUDAToolkit_LIBRARY_ROOT}")
    endif()
    list(REMOVE_DUPLICATES _nccl_cuda_dirs)
    _nccl_search_in(${_nccl_cuda_dirs})
    if(_nccl_lib)
      set(_nccl_found_where "the CUDA toolkit")
    endif()
  endif()

  # 3. the system folders (find_library adds the multiarch folder by itself; named too, for clarity)
  if(NOT _nccl_lib)
    unset(_nccl_inc)
    unset(_nccl_lib)
    find_path(_nccl_inc nccl.h NO_CACHE)
    set(_nccl_system_hints)
    if(CMAKE_LIBRARY_ARCHITECTURE)
      set(_nccl_system_hints /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /lib/${CMAKE_LIBRARY_ARCHITECTURE})
    endif()
    find_library(_nccl_lib NAMES ${_nccl_lib_names} HINTS ${_nccl_system_hints} NO_CACHE)
    if(_nccl_inc AND _nccl_lib)
      set(_nccl_found_where "the system folders")
    else()
      set(_nccl_inc "")
      set(_nccl_lib "")
    endif()
  endif()

  # 4. the nvidia-nccl-cu13 wheel: nvidia.nccl is a namespace package (no __file__), so ask for its __path__.
  if(NOT _nccl_lib)
    find_program(_nccl_python NAMES python3 NO_CACHE)
    if(_nccl_python)
      execute_process(COMMAND "${_nccl_python}" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                      OUTPUT_VARIABLE _nccl_wheel RESULT_VARIABLE _nccl_rc ERROR_QUIET
                      OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_nccl_rc EQUAL 0 AND IS_DIRECTORY "${_nccl_wheel}")
        _nccl_search_in("${_nccl_wheel}")
        if(_nccl_lib)
          set(_nccl_found_where "the Python wheel nvidia-nccl (${_nccl_wheel})")
        endif()
      endif()
    endif()
  endif()

  if(_nccl_lib)
    set(NCCL_INCLUDE_DIR "${_nccl_inc}" CACHE PATH "Directory holding nccl.h")
    set(NCCL_LIBRARY "${_nccl_lib}" CACHE FILEPATH "The NCCL shared library")
    if(NOT NCCL_FIND_QUIETLY)
      message(STATUS "NCCL: found in ${_nccl_found_where}")
    endif()
  endif()
endif()

if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    set(NCCL_VERSION_${part} "")
    foreach(line IN LISTS _nccl_version_lines)
      if(line MATCHES "^#define NCCL_${part} +([0-9]+)")
        set(NCCL_VERSION_${part} "${CMAKE_MATCH_1}")
      endif()
    endforeach()
  endforeach()
  if(NOT NCCL_VERSION_MAJOR STREQUAL "")
    set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
  endif()
endif()

# Paths given in the cache must exist too.
set(NCCL_FILES_EXIST "")
if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h" AND EXISTS "${NCCL_LIBRARY}")
  set(NCCL_FILES_EXIST TRUE)
endif()
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR NCCL_FILES_EXIST
                                  VERSION_VAR NCCL_VERSION)
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)

if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  # The full file name, so that a library with only its versioned file (libnccl.so.2) links as it is.
  if(NCCL_IMPORT_GLOBAL)
    add_library(NCCL::nccl UNKNOWN IMPORTED GLOBAL)
  else()
    add_library(NCCL::nccl UNKNOWN IMPORTED)
  endif()
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
