# FindPCRE2: the 8-bit PCRE2 library (libpcre2-8) as the imported target PCRE2::PCRE2_8.
# Works without pkg-config (GPU machines often have none, and the device build kit's .pc files are only a
# hint): pcre2.h and libpcre2-8 are searched like any header and library, CMAKE_PREFIX_PATH first, with the
# pkg-config answer, when there is one, as a hint. Sets PCRE2_FOUND, PCRE2_INCLUDE_DIR, PCRE2_LIBRARY,
# PCRE2_VERSION.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_PCRE2 QUIET libpcre2-8)
endif()
find_path(PCRE2_INCLUDE_DIR NAMES pcre2.h HINTS ${PC_PCRE2_INCLUDE_DIRS})
find_library(PCRE2_LIBRARY NAMES pcre2-8 HINTS ${PC_PCRE2_LIBRARY_DIRS})
if(PCRE2_INCLUDE_DIR AND EXISTS "${PCRE2_INCLUDE_DIR}/pcre2.h")
  file(STRINGS "${PCRE2_INCLUDE_DIR}/pcre2.h" _pcre2_version_lines REGEX "^#define PCRE2_(MAJOR|MINOR)[ \t]+[0-9]+")
  string(REGEX REPLACE ".*PCRE2_MAJOR[ \t]+([0-9]+).*" "\\1" _pcre2_major "${_pcre2_version_lines}")
  string(REGEX REPLACE ".*PCRE2_MINOR[ \t]+([0-9]+).*" "\\1" _pcre2_minor "${_pcre2_version_lines}")
  set(PCRE2_VERSION "${_pcre2_major}.${_pcre2_minor}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR VERSION_VAR PCRE2_VERSION)
if(PCRE2_FOUND AND NOT TARGET PCRE2::PCRE2_8)
  add_library(PCRE2::PCRE2_8 UNKNOWN IMPORTED)
  set_target_properties(PCRE2::PCRE2_8 PROPERTIES
    IMPORTED_LOCATION "${PCRE2_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}")
endif()
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
