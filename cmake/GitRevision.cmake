# Run at every build (core/CMakeLists.txt, target mismatch_git_revision): writes OUT, the definition of
# mismatch::gitRevision(), with the checkout's commit ("<short hash>", "-dirty" when tracked files differ from it;
# "unknown" outside a git checkout). The file is rewritten only when the text changes, so a build at the same commit
# recompiles nothing.
execute_process(COMMAND git -C ${SOURCE_DIR} describe --always --abbrev=12 --dirty
  OUTPUT_VARIABLE revision OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE failed)
if(failed OR NOT revision)
  set(revision "unknown")
endif()
set(text "// Generated at build time by cmake/GitRevision.cmake.\n#include \"core/common/version.h\"\n\nconst char* mismatch::gitRevision()\n{\n    return \"${revision}\";\n}\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
