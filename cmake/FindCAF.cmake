# FindCAF: the C++ Actor Framework (Debian's libcaf-dev 0.17.x ships no CMake config).
#
# Provides the imported targets CAF::core, CAF::io and CAF::openssl, and sets CAF_FOUND and CAF_VERSION.
# CAF_ROOT may point at a non-system install.

find_path(CAF_INCLUDE_DIR caf/config.hpp HINTS ${CAF_ROOT} PATH_SUFFIXES include)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  # CAF_VERSION is encoded as MMmmpp, e.g. 1706 for 0.17.6.
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_version_number "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_version_number} / 10000")
  math(EXPR _caf_minor "(${_caf_version_number} / 100) % 100")
  math(EXPR _caf_patch "${_caf_version_number} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

set(_caf_required_vars CAF_INCLUDE_DIR)
foreach(_component core io openssl)
  find_library(CAF_${_component}_LIBRARY NAMES caf_${_component} HINTS ${CAF_ROOT} PATH_SUFFIXES lib lib64)
  if(CAF_${_component}_LIBRARY)
    set(CAF_${_component}_FOUND TRUE)
  endif()
endforeach()
foreach(_component ${CAF_FIND_COMPONENTS})
  list(APPEND _caf_required_vars CAF_${_component}_LIBRARY)
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS ${_caf_required_vars}
  VERSION_VAR CAF_VERSION
  HANDLE_COMPONENTS)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  # Each module links the one below it: core <- io <- openssl.
  set(_caf_below_core Threads::Threads)
  set(_caf_below_io CAF::core)
  set(_caf_below_openssl CAF::io)
  foreach(_component core io openssl)
    if(CAF_${_component}_LIBRARY AND NOT TARGET CAF::${_component})
      add_library(CAF::${_component} UNKNOWN IMPORTED)
      set_target_properties(CAF::${_component} PROPERTIES
        IMPORTED_LOCATION "${CAF_${_component}_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
        INTERFACE_LINK_LIBRARIES "${_caf_below_${_component}}")
    endif()
  endforeach()
endif()

mark_as_advanced(CAF_INCLUDE_DIR CAF_core_LIBRARY CAF_io_LIBRARY CAF_openssl_LIBRARY)
