#pragma once
// What a job will hold, estimated before anything is loaded (model::checkJobFits compares it with the memory
// available). The parts, in bytes:
//   weights as stored        each checkpoint the job loads, in its stored dtype: the FP32 reference forward of
//                            the analyses multiplies them as they are and the BF16 engine shares them
//                            (model::LoadPrecision::Stored)
//   trainer                  training: FP32 master weights, their gradients and AdamW's two moments (16 bytes a
//                            parameter), plus k + 1 FP32 weight snapshots for staleness k (the rollout engine
//                            shares the one it is synced to); with rollout noise, the noisy version a sync draws
//                            (engine::noisyCopyBytes) beside the engine's view of the last one, and the
//                            backward's [vocab, hidden] gradients before they are added (two when tied)
//   engine weights           what an engine holds beyond the weights it shares. On the CPU: the BF16 view of
//                            weights not stored in BF16 (2 bytes an element of the module weights) plus each
//                            quantized module's codes (1 byte an element; int4, mxfp4 and nvfp4 too, the
//                            emulation does not pack them) and float32 scales (one per block for the microscaling
//                            formats; EngineModel, quant::QuantizedWeight). On a CUDA device
//                            (EngineModel::moduleState): a module the native FP8 GEMM multiplies (e4m3 weights and
//                            activations, not the embedding; builds with the cuda/ kernels) its e4m3 codes and
//                            float32 scales; under BFloat16 kernels a bf16 module with bf16 activations nothing
//                            when stored in bf16 (the given tensor), else a bf16 copy (2 bytes an element); every
//                            other module its float32 rounded weight (4 bytes an element); a copy once for a
//                            tensor two bf16 modules share (a tied embedding)
//   product temporary        on a CUDA device, the float32 weight a module kept as e4m3 codes is dequantized into
//                            for a product the FP8 tensor cores do not take (engineProductTemporaryBytes)
//   KV cache                 the paged cache's budget (its storage grows with use up to it: bf16 2 bytes, fp8 1,
//                            the FP32 engine 4 an element, as the budget counts them)
//   distributions, logits    the [T, vocab] float32 rows a mismatch measurement holds between generating and
//                            scoring (engine::MismatchOptions::distributionBytes) and the scoring logits
//   teacher                  its weights as stored
#include "core/engine/engine_model.h"
#include "core/model/config.h"
#include "core/model/memory_check.h"
#include "core/model/safetensors.h"
#include "core/quant/recipe_plan.h"

#include <cstdint>
#include <map>
#include <string>

namespace mismatch::engine {

// The stored dtype shared by every tensor of the checkpoint in `modelDir` (from the safetensors headers, nothing
// read), and their bytes. A checkpoint mixing dtypes reports the widest.
struct StoredWeights {
    model::DType dtype = model::DType::F32;
    std::uint64_t bytes = 0;
    std::int64_t parameters = 0;
};
StoredWeights storedWeights(const std::string& modelDir);

// Bytes an engine on weights stored as `stored` holds beyond them, for `plan` (nullptr: the BF16 engine), on
// `device`, with the engine's `kernels` option (on a device, resolved as the engine resolves it: engineKernels).
// `givenAs`: weight tensors the engine is given in another dtype than `stored` (noisy copies, in the dtype the
// engine reads each in: engine::noisyTensorDtypes); a BF16 view is made of those not given in bf16.
std::uint64_t engineExtraBytes(const model::ModelConfig& config, const quant::RecipePlan* plan, model::DType stored,
    const at::Device& device = at::Device(at::kCPU), EngineKernels kernels = EngineKernels::Auto,
    const std::map<std::string, at::ScalarType>& givenAs = {});

// Bytes an engine on `device` allocates during one product beyond what it keeps (engineExtraBytes): on a CUDA device
// a module kept as e4m3 codes whose product the FP8 tensor cores do not take (block-128 weights, or in or out
// features not a multiple of 16) is dequantized into a float32 weight at each call (EngineModel::linear), 4 bytes an
// element of the largest such module. 0 on the CPU (the emulation dequantizes a block of rows at a time) and without
// such modules. Products run one at a time, so a job counts it once, for the engine with the largest.
std::uint64_t engineProductTemporaryBytes(const model::ModelConfig& config, const quant::RecipePlan* plan,
    const at::Device& device = at::Device(at::kCPU), EngineKernels kernels = EngineKernels::Auto);

// Bytes a mismatch measurement holds in distributions and logits: the chunk's [T, vocab] float32 rows (at most
// `distributionBytes`, at most `batch` prompts of `maxNewTokens`) plus the trainer's scoring logits (a quarter of
// that) and one row of float64 log-probabilities.
std::uint64_t measurementBytes(
    std::int64_t vocab, std::int64_t maxNewTokens, std::int64_t batch, std::uint64_t distributionBytes);

// A training run's trainer: FP32 master weights, gradients, AdamW moments, staleness + 1 snapshots.
std::uint64_t trainerBytes(std::int64_t parameters, std::int64_t staleness);

} // namespace mismatch::engine
