// Precompiled header of the command files (mismatch_cli): core's LibTorch headers and CLI11, which every command
// file includes through context.h or job_options.h (~5.5 s of parsing per file before).
#pragma once
#include "core/common/torch_pch.h"

#include <CLI/CLI.hpp>
