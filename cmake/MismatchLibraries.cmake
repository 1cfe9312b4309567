# The C++ libraries besides LibTorch and Qt: found the same way by the project and by the device build kit's
# probe (tests/gpu/kit_probe), so that the probe checks exactly this. CMAKE_PREFIX_PATH comes first for all of
# them (the kit: tests/gpu/gather_device_deps.sh). MISMATCH_ICU (top-level option, default ON) decides on ICU.
find_package(SQLite3 REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(PCRE2 REQUIRED) # cmake/FindPCRE2.cmake: pkg-config is optional
find_package(CLI11 REQUIRED)
# ICU: Unicode normalization (NFC) for tokenizer.json normalizers (Qwen2/Qwen3).
if(MISMATCH_ICU)
  find_package(ICU 60 REQUIRED COMPONENTS uc)
else()
  message(STATUS "MISMATCH_ICU=OFF: building without ICU; tokenizers with an NFC normalizer are refused")
endif()
# Where each one was found (a build against the device kit shows that they come from the kit).
get_target_property(_yaml_cpp_location yaml-cpp LOCATION)
message(STATUS "Library SQLite3: ${SQLite3_LIBRARIES} (headers ${SQLite3_INCLUDE_DIRS})")
message(STATUS "Library yaml-cpp: ${_yaml_cpp_location} (package ${yaml-cpp_DIR})")
message(STATUS "Library PCRE2: ${PCRE2_LIBRARY} (headers ${PCRE2_INCLUDE_DIR})")
message(STATUS "Library CLI11: package ${CLI11_DIR}")
message(STATUS "Library nlohmann_json: package ${nlohmann_json_DIR}")
if(MISMATCH_ICU)
  message(STATUS "Library ICU: ${ICU_UC_LIBRARY} (headers ${ICU_INCLUDE_DIR})")
endif()
