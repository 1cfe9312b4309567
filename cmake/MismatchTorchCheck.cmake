# mismatch_torch_compiles(RESULT NAME SOURCE [INCLUDES dir...] [LIBRARIES lib...]): whether SOURCE compiles and links
# against this LibTorch (its include directories, libraries and flags, plus the ones given). RESULT is set ON or OFF
# in the caller's scope; the check's result is cached under NAME and the LibTorch version, so a build folder switched
# to another LibTorch checks again. For calls whose presence or signature differs across LibTorch versions.
include(CheckCXXSourceCompiles)

function(mismatch_torch_compiles result name source)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "" "INCLUDES;LIBRARIES")
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS} ${arg_INCLUDES})
  set(CMAKE_REQUIRED_LIBRARIES ${TORCH_LIBRARIES} ${arg_LIBRARIES})
  set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
  string(MAKE_C_IDENTIFIER "${name}_${Torch_VERSION}" check)
  check_cxx_source_compiles("${source}" ${check})
  if(${check})
    set(${result} ON PARENT_SCOPE)
  else()
    set(${result} OFF PARENT_SCOPE)
  endif()
endfunction()
