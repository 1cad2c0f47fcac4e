# cmake --install: the static library, its headers under include/minitensor/ (the source tree's layout), the CMake
# package (minitensorConfig.cmake, its version file, the exported minitensor::minitensor) and minitensor.pc.
# Included at the end of the top CMakeLists.txt, once the library's link libraries are final.
set(MT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/minitensor)
set(MT_INSTALL_HEADERDIR ${CMAKE_INSTALL_INCLUDEDIR}/minitensor)

install(TARGETS minitensor EXPORT minitensorTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT minitensorTargets NAMESPACE minitensor:: DESTINATION ${MT_INSTALL_CMAKEDIR})

# Every header of every layer, detail/ included (public headers include their details). Globbed, so that a moved
# or new header is installed without touching this file.
set(_mt_header_layers ${MT_LAYERS} dist)
list(REMOVE_DUPLICATES _mt_header_layers)
foreach(layer IN LISTS _mt_header_layers)
  file(GLOB_RECURSE _mt_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${layer}/*.h ${PROJECT_SOURCE_DIR}/${layer}/*.cuh)
  foreach(header IN LISTS _mt_headers)
    get_filename_component(_mt_dir ${header} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${header} DESTINATION ${MT_INSTALL_HEADERDIR}/${_mt_dir})
  endforeach()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/minitensor.h DESTINATION ${MT_INSTALL_HEADERDIR})
install(FILES ${MT_GENERATED_INCLUDE_DIR}/minitensor/runtime/version.h DESTINATION ${MT_INSTALL_HEADERDIR}/runtime)

# Dependencies the library may gain elsewhere in the build (ZLIB): re-found by the config file, required by the .pc.
set(MT_FIND_EXTRA_DEPENDENCIES "")
set(MT_PC_EXTRA_REQUIRES "")
get_target_property(_mt_link_libraries minitensor LINK_LIBRARIES)
if(TARGET ZLIB::ZLIB AND "${_mt_link_libraries}" MATCHES "ZLIB::ZLIB")
  string(APPEND MT_FIND_EXTRA_DEPENDENCIES "find_dependency(ZLIB)\n")
  string(APPEND MT_PC_EXTRA_REQUIRES ", zlib")
endif()

# NCCL (dist/): the config file finds it again with the same FindNCCL.cmake, starting where the build found it.
set(MT_PC_NCCL_LIBS "")
if(MT_HAS_NCCL)
  get_filename_component(_mt_nccl_root "${NCCL_INCLUDE_DIR}" DIRECTORY)
  string(APPEND MT_FIND_EXTRA_DEPENDENCIES
         "# NCCL: the one that built the package is only a hint (NCCL_ROOT, cmake/FindNCCL.cmake).\n"
         "if(NOT DEFINED NCCL_ROOT AND NOT DEFINED ENV{NCCL_ROOT} AND EXISTS \"${_mt_nccl_root}\")\n"
         "  set(NCCL_ROOT \"${_mt_nccl_root}\")\n"
         "endif()\n"
         "list(PREPEND CMAKE_MODULE_PATH \"\${CMAKE_CURRENT_LIST_DIR}\")\n"
         "find_dependency(NCCL 2)\n"
         "list(REMOVE_AT CMAKE_MODULE_PATH 0)\n")
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake DESTINATION ${MT_INSTALL_CMAKEDIR})
  # By its full file name: the wheel's NCCL has no unversioned libnccl.so.
  get_filename_component(_mt_nccl_libdir "${NCCL_LIBRARY}" DIRECTORY)
  get_filename_component(_mt_nccl_libname "${NCCL_LIBRARY}" NAME)
  set(MT_PC_NCCL_LIBS "-L${_mt_nccl_libdir} -Wl,-rpath,${_mt_nccl_libdir} -l:${_mt_nccl_libname} ")
endif()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/minitensorConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/minitensorConfig.cmake INSTALL_DESTINATION ${MT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/minitensorConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/minitensorConfig.cmake ${PROJECT_BINARY_DIR}/minitensorConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/minitensorNvrtc.cmake
        DESTINATION ${MT_INSTALL_CMAKEDIR})

# pkg-config: prefix relative to the .pc file, so the installed tree can move.
file(RELATIVE_PATH MT_PC_RELATIVE_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MT_PC_RELATIVE_PREFIX "${MT_PC_RELATIVE_PREFIX}")
# The CUDA libraries of the toolkit that built the package (cudart and nvrtc sit side by side).
get_filename_component(MT_PC_CUDA_LIBDIR "${CUDA_cudart_LIBRARY}" DIRECTORY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/minitensor.pc.in ${PROJECT_BINARY_DIR}/minitensor.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/minitensor.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
