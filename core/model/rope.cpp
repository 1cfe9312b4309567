#include "core/model/rope.h"

#include <ATen/ATen.h>

#include <cmath>

namespace mismatch::model {

std::vector<double> ropeInverseFrequencies(const ModelConfig& config)
{
    TORCH_CHECK(config.headDim > 0 && config.headDim % 2 == 0, "rotary embeddings need an even head dimension, got ",
        config.headDim);
    const std::int64_t half = config.headDim / 2;
    std::vector<double> inverse(static_cast<std::size_t>(half));
    for (std::int64_t i = 0; i < half; ++i) {
        inverse[static_cast<std::size_t>(i)]
            = std::pow(config.ropeTheta, -2.0 * static_cast<double>(i) / static_cast<double>(config.headDim));
    }
    const RopeScaling& scaling = config.ropeScaling;
    if (scaling.type == "llama3") {
        const double pi = std::acos(-1.0);
        const double original = static_cast<double>(scaling.originalMaxPositionEmbeddings);
        const double lowFrequencyWavelength = original / scaling.lowFreqFactor;
        const double highFrequencyWavelength = original / scaling.highFreqFactor;
        for (double& frequency : inverse) {
            const double wavelength = 2.0 * pi / frequency;
            if (wavelength < highFrequencyWavelength) {
                continue; // high frequencies: unchanged
            }
            if (wavelength > lowFrequencyWavelength) {
                frequency /= scaling.factor; // low frequencies: interpolated by the full factor
                continue;
            }
            const double smooth
                = (original / wavelength - scaling.lowFreqFactor) / (scaling.highFreqFactor - scaling.lowFreqFactor);
            frequency = (1.0 - smooth) * frequency / scaling.factor + smooth * frequency;
        }
    } else {
        TORCH_CHECK(scaling.type == "none", "unsupported rope scaling type '", scaling.type, "'");
    }
    return inverse;
}

RopeTables ropeTables(const std::vector<double>& inverseFrequencies, const at::Tensor& positions, at::ScalarType dtype)
{
    TORCH_CHECK(positions.dim() == 2, "positions must be [B, T], got ", positions.sizes());
    const auto doubleOptions = at::TensorOptions().dtype(at::kDouble).device(positions.device());
    const at::Tensor inverse
        = at::tensor(at::ArrayRef<double>(inverseFrequencies), at::TensorOptions().dtype(at::kDouble))
              .to(positions.device());
    // angles[b, t, i] = position * inv_freq[i], radians
    const at::Tensor angles = positions.to(doubleOptions).unsqueeze(-1) * inverse;
    const at::Tensor full = at::cat({angles, angles}, -1).unsqueeze(1); // [B, 1, T, headDim]
    return RopeTables {full.cos().to(dtype), full.sin().to(dtype)};
}

at::Tensor applyRope(const at::Tensor& x, const RopeTables& tables)
{
    const std::int64_t half = x.size(-1) / 2;
    const at::Tensor first = x.narrow(-1, 0, half);
    const at::Tensor second = x.narrow(-1, half, half);
    const at::Tensor rotated = at::cat({second.neg(), first}, -1);
    return x * tables.cos + rotated * tables.sin;
}

} // namespace mismatch::model
