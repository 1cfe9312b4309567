# mismatch_add_test(NAME <name> SOURCES <files...> LABELS <unit|model|ui|gpu|slow...> [LIBS <targets...>]
#                   [TIMEOUT <seconds>] [ENVIRONMENT <VAR=value...>])
# One Qt Test executable per call, registered with CTest under its labels. CI runs everything except
# the labels gpu and slow (ctest -LE "gpu|slow").
function(mismatch_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LABELS;LIBS;ENVIRONMENT" ${ARGN})
  if(NOT T_NAME OR NOT T_SOURCES OR NOT T_LABELS)
    message(FATAL_ERROR "mismatch_add_test needs NAME, SOURCES and LABELS")
  endif()
  foreach(label IN LISTS T_LABELS)
    if(NOT label MATCHES "^(unit|model|ui|gpu|slow)$")
      message(FATAL_ERROR "mismatch_add_test(${T_NAME}): unknown label '${label}'")
    endif()
  endforeach()
  if(NOT TARGET Qt6::Test)
    return() # headless build without Qt (top-level CMakeLists.txt says so once)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  set_target_properties(${T_NAME} PROPERTIES AUTOMOC ON)
  target_link_libraries(${T_NAME} PRIVATE Qt6::Test mismatch_core ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE
    MISMATCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    MISMATCH_BINARY_DIR="${PROJECT_BINARY_DIR}")
  mismatch_warnings(${T_NAME})
  mismatch_core_pch(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # Qt Test aborts any one test function after QTEST_FUNCTION_TIMEOUT (default 300 s), below most TIMEOUTs here: a
  # test function that runs a whole job (a calibration, say) under ASan+UBSan, several times slower, was killed by
  # Qt's watchdog although the test as a whole was within its CTest limit. The CTest TIMEOUT is the one limit.
  math(EXPR function_timeout_ms "${T_TIMEOUT} * 1000")
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;OMP_WAIT_POLICY=PASSIVE;QTEST_FUNCTION_TIMEOUT=${function_timeout_ms};MISMATCH_TEST_OUTPUT=${PROJECT_BINARY_DIR}/test-output;${T_ENVIRONMENT}")
endfunction()

# mismatch_add_plain_test(NAME <name> SOURCES <files...> LABELS <labels...> [LIBS <targets...>] [TIMEOUT <s>])
# A test executable without Qt (tests/gpu: GPU machines often have no Qt). Exit code 77 means skipped
# (no device), reported by CTest as "Not Run (skipped)".
function(mismatch_add_plain_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LABELS;LIBS" ${ARGN})
  if(NOT T_NAME OR NOT T_SOURCES OR NOT T_LABELS)
    message(FATAL_ERROR "mismatch_add_plain_test needs NAME, SOURCES and LABELS")
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE mismatch_core ${T_LIBS})
  target_compile_definitions(${T_NAME} PRIVATE MISMATCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  mismatch_warnings(${T_NAME})
  mismatch_core_pch(${T_NAME})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
endfunction()
