#include "core/train/adamw.h"

#include "core/common/error.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mismatch::train {

namespace {

// The update's one temporary, the denominator, is made for a block of at most this many elements at a time (and a
// gradient's norm is summed so: gradientNorm): every op is elementwise (IEEE sqrt, division, multiply-add in the
// same order), so the values are those of the whole tensor at once, without a second copy of the largest tensor (a
// 152k-token embedding: 0.6 GB at hidden 1024, 2.5 GB at 4096). A multiple of every SIMD width, so blocks start
// where the whole tensor's vector loop would.
constexpr std::int64_t kUpdateBlock = std::int64_t(1) << 22;

} // namespace

AdamW::AdamW(std::vector<at::Tensor> parameters, AdamWOptions options)
    : parameters_(std::move(parameters)), options_(options)
{
    for (const at::Tensor& p : parameters_) {
        expAvg_.push_back(at::zeros_like(p, p.options().requires_grad(false)));
        expAvgSq_.push_back(at::zeros_like(p, p.options().requires_grad(false)));
    }
}

void AdamW::step(double learningRate)
{
    at::NoGradGuard noGrad;
    ++step_;
    const double correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
    const double correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
    for (size_t i = 0; i < parameters_.size(); ++i) {
        at::Tensor& p = parameters_[i];
        const at::Tensor& g = p.grad();
        if (!g.defined()) {
            continue;
        }
        expAvg_[i].mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
        expAvgSq_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
        if (options_.weightDecay != 0.0) {
            p.mul_(1.0 - learningRate * options_.weightDecay);
        }
        const double stepSize = -learningRate / correction1;
        const bool flat = p.is_contiguous() && expAvg_[i].is_contiguous() && expAvgSq_[i].is_contiguous();
        const std::int64_t block = flat ? kUpdateBlock : p.numel();
        const at::Tensor values = flat ? p.view({-1}) : p;
        const at::Tensor m = flat ? expAvg_[i].view({-1}) : expAvg_[i];
        const at::Tensor v = flat ? expAvgSq_[i].view({-1}) : expAvgSq_[i];
        for (std::int64_t first = 0; first < p.numel(); first += block) {
            const std::int64_t size = std::min(block, p.numel() - first);
            const auto part = [&](const at::Tensor& t) { return size == p.numel() ? t : t.narrow(0, first, size); };
            const at::Tensor denominator = (part(v) / correction2).sqrt_().add_(options_.epsilon);
            part(values).addcdiv_(part(m), denominator, stepSize);
        }
    }
}

void AdamW::zeroGrad()
{
    for (at::Tensor& p : parameters_) {
        if (p.grad().defined()) {
            p.mutable_grad().zero_();
        }
    }
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state() const
{
    std::vector<std::pair<std::string, at::Tensor>> state;
    for (size_t i = 0; i < parameters_.size(); ++i) {
        state.emplace_back("exp_avg." + std::to_string(i), expAvg_[i]);
        state.emplace_back("exp_avg_sq." + std::to_string(i), expAvgSq_[i]);
    }
    state.emplace_back("step", at::full({1}, static_cast<double>(step_), at::kFloat));
    return state;
}

void AdamW::loadState(const std::vector<std::pair<std::string, at::Tensor>>& state)
{
    std::size_t loaded = 0;
    for (const auto& [name, tensor] : state) {
        if (name == "step") {
            step_ = static_cast<std::int64_t>(tensor.item<float>());
            continue;
        }
        const auto dot = name.rfind('.');
        const std::string kind = name.substr(0, dot);
        const auto index = static_cast<size_t>(std::stoul(name.substr(dot + 1)));
        if (index >= parameters_.size() || tensor.sizes() != parameters_[index].sizes()) {
            throw Error("optimizer state '" + name + "' does not match the model's parameters");
        }
        at::NoGradGuard noGrad;
        (kind == "exp_avg" ? expAvg_ : expAvgSq_)[index].copy_(tensor);
        ++loaded;
    }
    if (loaded != 2 * parameters_.size()) {
        throw Error("optimizer state holds " + std::to_string(loaded) + " moment tensors; expected " +
                    std::to_string(2 * parameters_.size()));
    }
}

double gradientNorm(const std::vector<at::Tensor>& parameters)
{
    at::NoGradGuard noGrad;
    double squared = 0.0;
    for (const at::Tensor& p : parameters) {
        if (!p.grad().defined()) {
            continue;
        }
        const at::Tensor flat = p.grad().reshape({-1});
        for (std::int64_t first = 0; first < flat.numel(); first += kUpdateBlock) {
            const std::int64_t size = std::min(kUpdateBlock, flat.numel() - first);
            squared += flat.narrow(0, first, size).to(at::kDouble).pow(2).sum().item<double>();
        }
    }
    return std::sqrt(squared);
}

double clipGradientNorm(const std::vector<at::Tensor>& parameters, double maxNorm)
{
    at::NoGradGuard noGrad;
    const double norm = gradientNorm(parameters);
    if (maxNorm > 0 && norm > maxNorm) {
        const double scale = maxNorm / (norm + 1e-6);
        for (const at::Tensor& p : parameters) {
            if (p.grad().defined()) {
                p.grad().mul_(scale);
            }
        }
    }
    return norm;
}

double warmupCosineLearningRate(std::int64_t step, std::int64_t warmupSteps, std::int64_t totalSteps, double peak,
    double finalFraction)
{
    if (warmupSteps > 0 && step < warmupSteps) {
        return peak * static_cast<double>(step + 1) / static_cast<double>(warmupSteps);
    }
    const double span = static_cast<double>(std::max<std::int64_t>(1, totalSteps - warmupSteps));
    const double progress = std::min(1.0, static_cast<double>(step - warmupSteps) / span);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    return peak * (finalFraction + (1.0 - finalFraction) * cosine);
}

}  // namespace mismatch::train
