// Precompiled header for core: the LibTorch headers that core uses. Narrow on purpose:
// <torch/torch.h> pulls in the whole C++ frontend and costs ~20 s per translation unit.
#pragma once
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>
#include <string>
#include <vector>
#include <optional>
#include <memory>
#include <functional>
