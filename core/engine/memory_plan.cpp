#include "core/engine/memory_plan.h"

#include "core/engine/module_names.h"
#include "core/model/model_files.h"
#include "core/model/transformer.h"
#include "core/quant/formats.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace mismatch::engine {

StoredWeights storedWeights(const std::string& modelDir)
{
    const model::Checkpoint checkpoint = model::Checkpoint::open(modelDir);
    const model::CheckpointStats stats = model::checkpointStats(checkpoint);
    StoredWeights stored;
    stored.bytes = stats.bytes;
    stored.parameters = stats.parameterCount;
    std::size_t widest = 0;
    for (const auto& [dtype, count] : stats.parametersByDtype) {
        if (count > 0 && model::byteSize(dtype) > widest) {
            widest = model::byteSize(dtype);
            stored.dtype = dtype;
        }
    }
    return stored;
}

namespace {

// Calls visit(module, weight tensor name, [out, in] shape, precision) for every module of `config`, with the plan's
// precision (nullptr: the BF16 engine's defaults).
template <typename Visit>
void forEachModuleWeight(const model::ModelConfig& config, const quant::RecipePlan* plan, Visit&& visit)
{
    std::map<std::string, std::vector<std::int64_t>> shapes;
    for (const model::ExpectedTensor& tensor : model::expectedTensors(config)) {
        shapes[tensor.name] = tensor.shape;
    }
    for (const std::string& module : model::moduleNames(config)) {
        const std::string tensor = weightTensorName(config, module);
        const quant::ModulePrecision precision
            = plan ? plan->modules.at(planModuleName(module)) : quant::ModulePrecision {};
        visit(module, tensor, shapes.at(tensor), precision);
    }
}

} // namespace

std::uint64_t engineExtraBytes(const model::ModelConfig& config, const quant::RecipePlan* plan, model::DType stored,
    const at::Device& device, EngineKernels kernels, const std::map<std::string, at::ScalarType>& givenAs)
{
    const EngineKernels deviceKernels
        = device.is_cpu() ? EngineKernels::Float32 : engineKernels(kernels, device, config); // unused on the CPU
    std::uint64_t bytes = 0;
    std::set<std::string> viewed; // a tied embedding serving the embedding and lm_head has one BF16 view
    forEachModuleWeight(config, plan, [&](const std::string& module, const std::string& tensor,
                                          const std::vector<std::int64_t>& shape,
                                          const quant::ModulePrecision& precision) {
        const std::uint64_t elements = static_cast<std::uint64_t>(shape[0] * shape[1]);
        const quant::WeightPrecision& weights = precision.weights;
        const auto given = givenAs.find(tensor);
        const bool givenBf16 = given != givenAs.end() ? given->second == at::kBFloat16 : stored == model::DType::BF16;
        if (!device.is_cpu()) {
            // The weights stay as given there (no BF16 view); each module keeps its deviceWeightLayout.
            const DeviceWeightLayout layout = deviceWeightLayout(module, precision, deviceKernels);
            if (layout == DeviceWeightLayout::Fp8Codes) {
                bytes += elements
                    + 4 * static_cast<std::uint64_t>(quant::weightScaleCount(shape, weights.format, weights.granularity));
            } else if (layout == DeviceWeightLayout::Bf16) {
                // The given tensor itself when stored in bf16, else one bf16 copy (shared by a tied module).
                if (!givenBf16 && viewed.insert(tensor + " bf16").second) {
                    bytes += 2 * elements;
                }
            } else if (weights.format != quant::WeightFormat::Bf16 || viewed.insert(tensor + " float32").second) {
                bytes += 4 * elements;
            }
            return;
        }
        if (!givenBf16 && viewed.insert(tensor).second) {
            bytes += 2 * elements;
        }
        if (weights.format == quant::WeightFormat::Bf16) {
            return; // the view itself
        }
        if (!quant::hasScales(weights.format)) {
            bytes += 2 * elements; // fp16 values
            return;
        }
        bytes += elements // codes or integers, one a byte
            + 4 * static_cast<std::uint64_t>(quant::weightScaleCount(shape, weights.format, weights.granularity));
    });
    return bytes;
}

std::uint64_t engineProductTemporaryBytes(const model::ModelConfig& config, const quant::RecipePlan* plan,
    const at::Device& device, EngineKernels kernels)
{
    if (device.is_cpu() || plan == nullptr) {
        return 0;
    }
    const EngineKernels deviceKernels = engineKernels(kernels, device, config);
    std::uint64_t largest = 0;
    forEachModuleWeight(config, plan, [&](const std::string& module, const std::string& /*tensor*/,
                                          const std::vector<std::int64_t>& shape,
                                          const quant::ModulePrecision& precision) {
        if (deviceWeightLayout(module, precision, deviceKernels) == DeviceWeightLayout::Fp8Codes
            && !fp8TensorCoresTake(precision.weights, shape[0], shape[1])) {
            largest = std::max(largest, 4 * static_cast<std::uint64_t>(shape[0] * shape[1]));
        }
    });
    return largest;
}

std::uint64_t measurementBytes(
    std::int64_t vocab, std::int64_t maxNewTokens, std::int64_t batch, std::uint64_t distributionBytes)
{
    const std::uint64_t prompt = static_cast<std::uint64_t>(std::max<std::int64_t>(1, maxNewTokens))
        * static_cast<std::uint64_t>(vocab) * sizeof(float);
    const std::uint64_t chunk = std::max<std::uint64_t>(
        prompt, std::min<std::uint64_t>(distributionBytes, prompt * static_cast<std::uint64_t>(std::max<std::int64_t>(1, batch))));
    return chunk + chunk / 4 + 2 * prompt; // + the float64 log-probabilities of one row
}

std::uint64_t trainerBytes(std::int64_t parameters, std::int64_t staleness)
{
    const auto count = static_cast<std::uint64_t>(parameters);
    return count * 4 * 4 + count * 4 * static_cast<std::uint64_t>(std::max<std::int64_t>(0, staleness) + 1);
}

} // namespace mismatch::engine
