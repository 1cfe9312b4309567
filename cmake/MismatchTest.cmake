# The Qt Test suite is a few executables, each holding the test classes of a module group: a class registers itself
# with MISMATCH_TEST_MAIN (tests/common/test_main.h) and CTest runs `EXECUTABLE CLASS`, one class per process, under
# the class's own test name, labels, timeout and environment. Linking an executable against LibTorch and Qt, running
# AUTOMOC for it and compiling its moc file cost more than a small test file, so a class per executable (54 of
# them) made the build ~10% slower (docs/building-and-testing.md).
#
# Every test executable is built the same way (the same libraries, definitions and flags) so that all of them reuse
# one precompiled header, tests/common/test_pch.h (LibTorch's headers, Qt Test and Qt Widgets: about 4-6 s of every
# test file's compile before), built once with test_main.cpp in the object library mismatch_test_main. GCC drops a
# precompiled header, and clang refuses it, when a macro it saw is defined differently, so the executables are made
# here in one directory (QT_TESTCASE_BUILDDIR/SOURCEDIR are the same) and take the same definitions.

# mismatch_test_settings(<target>): what every test target shares.
function(mismatch_test_settings target)
  set_target_properties(${target} PROPERTIES AUTOMOC ON QT_TESTCASE_BUILDDIR ${PROJECT_BINARY_DIR}/tests)
  target_link_libraries(${target} PRIVATE Qt6::Test mismatch_core mismatch_cli)
  target_compile_definitions(${target} PRIVATE
    MISMATCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    MISMATCH_BINARY_DIR="${PROJECT_BINARY_DIR}"
    MISMATCH_CLI_PATH="$<TARGET_FILE:mismatch>"
    STORE_WRITER_PATH="$<TARGET_FILE:store_writer>"
    # `mismatch report` draws its plots only in builds with the GUI; without it test_cli checks a report of tables.
    MISMATCH_TEST_GUI_BUILD=$<BOOL:${MISMATCH_BUILD_GUI}>)
  if(MISMATCH_BUILD_GUI)
    target_compile_definitions(${target} PRIVATE MISMATCH_LAB_PATH="$<TARGET_FILE:mismatch-lab>")
  endif()
  mismatch_warnings(${target})
  mismatch_light_optimization(${target})
endfunction()

# mismatch_test_executables(<name>...): the object library with main() and the precompiled header, then the
# executables (in build/<preset>/tests/). Called once, from tests/CMakeLists.txt.
function(mismatch_test_executables)
  add_library(mismatch_test_main OBJECT ${PROJECT_SOURCE_DIR}/tests/common/test_main.cpp)
  mismatch_test_settings(mismatch_test_main)
  mismatch_pch(mismatch_test_main ${PROJECT_SOURCE_DIR}/tests/common/test_pch.h)
  foreach(executable IN LISTS ARGN)
    add_executable(${executable})
    mismatch_test_settings(${executable})
    target_link_libraries(${executable} PRIVATE mismatch_test_main)
    mismatch_reuse_pch(${executable} mismatch_test_main)
    set_target_properties(${executable} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)
  endforeach()
  # Tests run the CLI, the GUI binary and the store writer in child processes. The target all_tests builds them with
  # the test executables (`cmake --build --preset release --target all_tests`; the default build has them all). Not
  # add_dependencies on each test executable: Ninja would then hold back every test file's compile until those
  # programs are linked, which left one core idle for minutes of a fresh build.
  add_custom_target(all_tests)
  add_dependencies(all_tests ${ARGN} mismatch store_writer)
  if(MISMATCH_BUILD_GUI)
    add_dependencies(all_tests mismatch-lab)
  endif()
endfunction()

# mismatch_add_test(NAME <name> CLASS <TestClass> EXECUTABLE <tests_group> SOURCES <files...>
#                   LABELS <unit|model|ui|gpu|slow...> [TIMEOUT <seconds>] [COST <seconds>]
#                   [ENVIRONMENT <VAR=value...>])
# Adds the class's files to EXECUTABLE (one of mismatch_test_executables') and registers `EXECUTABLE CLASS` with
# CTest as NAME under its labels. CI runs everything except the labels gpu and slow (ctest -LE "gpu|slow").
# COST: about how long the test runs (on the 2-core machines CI uses). A fresh build has no timing record, so
# CTest starts the tests in the order they were added; those given a COST start first, highest first, so that a
# minute-long test does not start last and run alone at the end.
function(mismatch_add_test)
  cmake_parse_arguments(T "" "NAME;CLASS;EXECUTABLE;TIMEOUT;COST" "SOURCES;LABELS;ENVIRONMENT" ${ARGN})
  if(NOT T_NAME OR NOT T_CLASS OR NOT T_EXECUTABLE OR NOT T_SOURCES OR NOT T_LABELS OR T_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "mismatch_add_test needs NAME, CLASS, EXECUTABLE, SOURCES and LABELS (and takes TIMEOUT, COST and ENVIRONMENT), got: ${ARGN}")
  endif()
  foreach(label IN LISTS T_LABELS)
    if(NOT label MATCHES "^(unit|model|ui|gpu|slow)$")
      message(FATAL_ERROR "mismatch_add_test(${T_NAME}): unknown label '${label}'")
    endif()
  endforeach()
  if(NOT TARGET Qt6::Test)
    return() # headless build without Qt (top-level CMakeLists.txt says so once)
  endif()
  if(NOT TARGET ${T_EXECUTABLE})
    message(FATAL_ERROR "mismatch_add_test(${T_NAME}): no test executable '${T_EXECUTABLE}' (tests/CMakeLists.txt lists them)")
  endif()
  target_sources(${T_EXECUTABLE} PRIVATE ${T_SOURCES})
  set_property(GLOBAL APPEND PROPERTY MISMATCH_TEST_CLASSES_${T_EXECUTABLE} ${T_CLASS})
  add_test(NAME ${T_NAME} COMMAND ${T_EXECUTABLE} ${T_CLASS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  # Qt Test aborts any one test function after QTEST_FUNCTION_TIMEOUT (default 300 s), below most TIMEOUTs here: a
  # test function that runs a whole job (a calibration, say) under ASan+UBSan, several times slower, was killed by
  # Qt's watchdog although the test as a whole was within its CTest limit. The CTest TIMEOUT is the one limit.
  math(EXPR function_timeout_ms "${T_TIMEOUT} * 1000")
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "QT_QPA_PLATFORM=offscreen;OMP_WAIT_POLICY=PASSIVE;QTEST_FUNCTION_TIMEOUT=${function_timeout_ms};MISMATCH_TEST_OUTPUT=${PROJECT_BINARY_DIR}/test-output;${T_ENVIRONMENT}")
  if(T_COST)
    set_tests_properties(${T_NAME} PROPERTIES COST ${T_COST})
  endif()
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
