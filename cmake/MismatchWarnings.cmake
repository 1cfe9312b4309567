# Common warnings for the project's own targets.
function(mismatch_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  endif()
endfunction()

# Precompiled headers. LibTorch's headers are most of every translation unit that includes a core header (a test
# file took 55 s to compile on two cores, 30 s with them precompiled), and Qt's and CLI11's are most of the rest:
#   core/common/torch_pch.h   mismatch_core, and reused by the targets with no header of their own (mismatch,
#                             store_writer, benchmarks, tests/gpu, fuzz targets): ATen, nlohmann-json, SQLite
#   app/cli/cli_pch.h         mismatch_cli: the above and CLI11
#   ui/ui_pch.h               mismatch_ui, reused by mismatch-lab: the above and Qt Widgets, QCustomPlot
#   tests/common/test_pch.h   every Qt Test executable (cmake/MismatchTest.cmake): the above and Qt Test
# A precompiled header is used only when the flags that shape it match (GCC falls back to parsing with an
# -Winvalid-pch warning, clang refuses): every target with or reusing one builds with -fPIC, as core does
# (POSITION_INDEPENDENT_CODE; Debian's compilers otherwise default to -fPIE for executables). Macros a reusing
# target adds are fine as long as the header never reads them (torch_pch.h includes no Qt).

# mismatch_pch(<target> <header>): <target> precompiles <header>.
function(mismatch_pch target header)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
  target_precompile_headers(${target} PRIVATE ${header})
endfunction()

# mismatch_reuse_pch(<target> <owner>): <target> reuses <owner>'s precompiled header.
function(mismatch_reuse_pch target owner)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
  target_precompile_headers(${target} REUSE_FROM ${owner})
endfunction()

# mismatch_core_pch(<target>): <target> reuses core's precompiled header.
function(mismatch_core_pch target)
  mismatch_reuse_pch(${target} mismatch_core)
endfunction()

# mismatch_light_optimization(<target>): in Release builds, compile <target> at -O1 instead of -O3. For the code
# whose speed nobody waits on: the command files, the GUI library and binary, and the tests' own code (they call
# core, which keeps -O3 for the engine, trainer and metrics). Measured on 2 cores (2026-12-06, one file at a time):
# a command file 12.9 -> 7.6 s, a test file 12.8 -> 9.6 s; -O2 saved only 7-9%. Floating-point results do not
# change with the level (no -ffast-math anywhere), so the tests check the same numbers the -O3 library computes.
function(mismatch_light_optimization target)
  target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
endfunction()
