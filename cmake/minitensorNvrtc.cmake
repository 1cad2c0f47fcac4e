# Defines minitensor::nvrtc, the NVRTC library by its file, after find_package(CUDAToolkit). Used by the build and
# installed beside minitensorConfig.cmake, so that the exported link interface names this target, found again on
# the consumer's machine, instead of a path of the machine that built the package.
# Why not CUDA::nvrtc: that imported target also links the driver stub (libcuda.so), which would make every binary
# fail to load on a machine without a driver; minitensor reaches the driver through cudart.
if(NOT TARGET minitensor::nvrtc)
  if(NOT CUDA_nvrtc_LIBRARY)
    message(FATAL_ERROR "minitensor: NVRTC not found in the CUDA toolkit (CUDA_nvrtc_LIBRARY is empty)")
  endif()
  # The build's own copy is global so that every directory of the build sees it; a consumer's is local to the
  # directory that called find_package, as the exported targets are.
  add_library(minitensor::nvrtc UNKNOWN IMPORTED ${MT_NVRTC_IMPORT_SCOPE})
  set_target_properties(minitensor::nvrtc PROPERTIES IMPORTED_LOCATION "${CUDA_nvrtc_LIBRARY}")
endif()
