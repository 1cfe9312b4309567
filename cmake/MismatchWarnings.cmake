# Common warnings for the project's own targets.
function(mismatch_warnings target)
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  endif()
endfunction()

# mismatch_core_pch(<target>): a target built on mismatch_core reuses core's precompiled header
# (core/common/torch_pch.h: ATen, nlohmann-json, SQLite). LibTorch's headers are most of every translation unit
# that includes a core header: a test file took 55 s to compile on two cores, 30 s with the header precompiled.
# A precompiled header is used only when the flags that shape it match (GCC falls back to parsing with an
# -Winvalid-pch warning, clang refuses): core builds with -fPIC (POSITION_INDEPENDENT_CODE), so every consumer
# does too (Debian's compilers otherwise default to -fPIE for executables). Macros a consumer adds (Qt's
# QT_TESTCASE_BUILDDIR, say) are fine as long as the header never reads them: torch_pch.h includes no Qt.
function(mismatch_core_pch target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fPIC>)
  target_precompile_headers(${target} REUSE_FROM mismatch_core)
endfunction()
