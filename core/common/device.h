#pragma once
// Where a job computes: "cpu" or "cuda:N" (spec: every job takes a device). The model's weights are placed there
// when the job loads them, and everything that follows (the engine's KV cache and forwards, the trainer's
// forward, backward and AdamW, the mismatch and scoring) runs where the weights are; results come back to the
// host. Sampling draws are made on the host in float64 from the device's logits, so a seeded draw gives the same
// token for the same logits on any device (what differs across devices is the logits' own rounding: see
// tests/gpu/test_gpu_parity.cpp for the tolerances).
#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace mismatch {

// Devices LibTorch can compute on here: "cpu" first, then "cuda:0", "cuda:1", ... (only in a build with CUDA,
// against a LibTorch with CUDA, with a device present).
std::vector<std::string> availableDevices();
// One line per device for --help and dialogs: "cpu", "cuda:0 (NVIDIA H200, sm_90, 141 GiB)".
std::vector<std::string> deviceDescriptions();

// "cpu", "cuda" (= cuda:0) or "cuda:N" as its canonical name ("cpu", "cuda:N"); InputError(source, place, ...)
// for another spelling. Checks the spelling only (a run file naming cuda:0 still parses on a machine without it).
std::string canonicalDevice(const std::string& text, const std::string& source, const std::string& place);
// canonicalDevice, and also an InputError for a CUDA device that this build, its LibTorch or this machine does not
// have (naming the devices that are available): what a job checks before it loads anything.
at::Device parseDevice(const std::string& text, const std::string& source, const std::string& place);
// The device a stored analysis computed on (its settings' "device"), when this machine has it; else the CPU: a
// resume continues where the run started when it can, and on another machine on its CPU.
at::Device resumeDevice(const std::string& stored);
// "cpu", "cuda:0": the canonical name (what run files, job files and the store record).
std::string deviceName(const at::Device& device);

} // namespace mismatch
