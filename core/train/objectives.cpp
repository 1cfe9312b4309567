#include "core/train/objectives.h"

#include "core/metrics/mismatch.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#if defined(MISMATCH_HAVE_CUDA)
#include "cuda/fp8_ops.h"
#endif

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

namespace mismatch::train {

namespace {

// Programmer errors, not input: callers pass aligned tensors built by the trainer.
void require(bool condition, const char* what)
{
    if (!condition) {
        throw std::invalid_argument(std::string("objectives: ") + what);
    }
}

// The student's side of one batch, with padding rows made harmless: their logits, sampled ids and
// log-probabilities are replaced by zeros before any arithmetic, so that whatever the caller left there
// (garbage, -inf, a padding id) reaches neither the loss nor the gradient (masked_fill passes no gradient
// to the filled rows).
struct Prepared {
    at::Tensor real; // [N] bool: real response tokens
    at::Tensor padding; // [N] bool: !real
    at::Tensor logits; // [N, V] the student's logits, zero on padding rows, differentiable
    at::Tensor logProbs; // [N, V] log p_s, differentiable; undefined when the objective needs no [N, V] log p_s
    at::Tensor sampled; // [N] int64 y_t (0 on padding); undefined when not needed
    at::Tensor logProbSampled; // [N] log p_s(y_t), differentiable when logProbs is defined (else detached);
                               // undefined when not needed
    bool anyPadding = false; // whether masking changes anything (the trainer's batches have no padding rows)
    at::Tensor entropy; // [N] float64 H(p_s), when the objective computed it on its way (else finish does)
};

// `fullLogProbs`: whether the objective differentiates through log p_s of every token (all but the full KL,
// whose per-token KL has its own backward, FullKlFunction).
Prepared prepare(const at::Tensor& studentLogits, const at::Tensor& mask, const EngineTokens& engine, bool needSampled,
    bool fullLogProbs = true)
{
    require(studentLogits.dim() == 2, "studentLogits must be [N, V]");
    require(studentLogits.is_floating_point(), "studentLogits must be floating point");
    const std::int64_t n = studentLogits.size(0);
    require(mask.dim() == 1 && mask.size(0) == n, "mask must be [N]");
    Prepared p;
    p.real = mask.to(studentLogits.device()).to(at::kBool);
    p.padding = p.real.logical_not();
    p.anyPadding = p.padding.any().item<bool>();
    p.logits = p.anyPadding ? studentLogits.masked_fill(p.padding.unsqueeze(1), 0.0) : studentLogits;
    if (fullLogProbs) {
        p.logProbs = at::log_softmax(p.logits, -1);
    }
    if (needSampled) {
        require(engine.sampled.defined() && engine.sampled.dim() == 1 && engine.sampled.size(0) == n,
            "engine.sampled must be [N] token ids");
        p.sampled = engine.sampled.to(studentLogits.device()).to(at::kLong).masked_fill(p.padding, 0);
        const at::Tensor index = p.sampled.unsqueeze(1);
        if (fullLogProbs) {
            p.logProbSampled = p.logProbs.gather(1, index).squeeze(1);
        } else {
            const at::Tensor z = p.logits.detach();
            p.logProbSampled = z.gather(1, index).squeeze(1) - at::logsumexp(z, {-1});
        }
    }
    return p;
}

// Rows of an [N, V] tensor a group at a time, each group at most kChunkEntries elements (at least one row): the
// float64 statistics and the CPU forward of the full KL stay within a few such groups of memory instead of
// several [N, V] temporaries.
constexpr std::int64_t kChunkEntries = std::int64_t {1} << 22;

template <typename Function> void forRowGroups(const at::Tensor& rows, Function&& function)
{
    const std::int64_t n = rows.size(0);
    const std::int64_t group = std::max<std::int64_t>(1, kChunkEntries / std::max<std::int64_t>(1, rows.size(1)));
    for (std::int64_t begin = 0; begin < n; begin += group) {
        function(begin, std::min(n, begin + group));
    }
}

// The entropy per row, float64 [N], a row group at a time, of softmax(rows), or of the distributions whose
// log-probabilities `rows` already are (`logProbs`).
at::Tensor entropyRows(const at::Tensor& rows, bool logProbs)
{
    at::Tensor entropy = at::empty({rows.size(0)}, rows.options().dtype(at::kDouble));
    forRowGroups(rows, [&](std::int64_t begin, std::int64_t end) {
        const at::Tensor group = rows.slice(0, begin, end);
        const at::Tensor logP = logProbs ? group : at::log_softmax(group, -1);
        entropy.slice(0, begin, end).copy_(metrics::rowEntropy(logP, logP.exp()));
    });
    return entropy;
}

} // namespace

bool opdFullKlUsesFusedKernel(const at::Tensor& studentLogits)
{
#if defined(MISMATCH_HAVE_CUDA)
    const at::ScalarType type = studentLogits.scalar_type();
    return studentLogits.is_cuda() && (type == at::kFloat || type == at::kBFloat16 || type == at::kHalf);
#else
    (void)studentLogits;
    return false;
#endif
}

namespace {

// KL(softmax(z) || t) per row, z [N, V] logits, t [N, V] log-probabilities (detached), as an autograd function:
//   forward  sum_v p(v) (log p(v) - t(v)),  p = softmax(z)
//   backward dKL/dz_j = p(j) (log p(j) - t(j) - KL)   (d log p(v)/dz_j = [v = j] - p(j); sum_v p(v) (...) cancels)
// so that autograd keeps only z and t for the backward instead of log p, p and log p - t, and on a CUDA device the
// forward is one pass over each row (the fused kernel, within the bounds of tests/gpu/kl_bounds.h of the float64
// definition; it normalizes t, whose log-sum-exp is 0 up to rounding). The backward recomputes log p. Its second
// output is the student's entropy per row (float64, not differentiable), on the CPU from the same row groups' log p.
struct FullKlFunction : public torch::autograd::Function<FullKlFunction> {
    static torch::autograd::variable_list forward(
        torch::autograd::AutogradContext* context, at::Tensor logits, at::Tensor teacher)
    {
        context->save_for_backward({logits, teacher});
        at::Tensor kl;
        at::Tensor entropy;
#if defined(MISMATCH_HAVE_CUDA)
        if (opdFullKlUsesFusedKernel(logits)) {
            const at::Tensor noSample = at::zeros({logits.size(0)}, logits.options().dtype(at::kLong));
            kl = cuda::fusedMismatch(logits.contiguous(), teacher.to(logits.scalar_type()).contiguous(), noSample)
                     .kl.to(logits.scalar_type());
            entropy = entropyRows(logits, /*logProbs=*/false);
        }
#endif
        if (!kl.defined()) {
            kl = at::empty({logits.size(0)}, logits.options());
            entropy = at::empty({logits.size(0)}, logits.options().dtype(at::kDouble));
            forRowGroups(logits, [&](std::int64_t begin, std::int64_t end) {
                const at::Tensor logP = at::log_softmax(logits.slice(0, begin, end), -1);
                const at::Tensor p = logP.exp();
                kl.slice(0, begin, end).copy_((p * (logP - teacher.slice(0, begin, end))).sum(-1));
                entropy.slice(0, begin, end).copy_(metrics::rowEntropy(logP, p));
            });
        }
        context->mark_non_differentiable({entropy});
        return {kl, entropy};
    }

    static torch::autograd::variable_list backward(
        torch::autograd::AutogradContext* context, torch::autograd::variable_list gradients)
    {
        const torch::autograd::variable_list saved = context->get_saved_variables();
        const at::Tensor& logits = saved[0];
        const at::Tensor& teacher = saved[1];
        at::Tensor logP = at::log_softmax(logits, -1);
        at::Tensor gradient = logP - teacher; // log p - t, then the gradient in place
        const at::Tensor p = logP.exp_();
        const at::Tensor kl = (p * gradient).sum(-1, /*keepdim=*/true);
        gradient.sub_(kl).mul_(p).mul_(gradients[0].unsqueeze(1));
        return {gradient, at::Tensor()};
    }
};

// A [N] per-position input (engine or teacher log-probabilities) in `like`'s dtype, zero on padding, detached.
at::Tensor perPosition(const at::Tensor& values, const Prepared& p, const at::Tensor& like, const char* what)
{
    require(values.defined() && values.dim() == 1 && values.size(0) == p.real.size(0), what);
    return values.detach().to(like.device()).to(like.scalar_type()).masked_fill(p.padding, 0.0);
}

// Teacher log-probabilities [N, V] in the student's dtype, zero on padding rows, detached (the teacher is fixed).
at::Tensor teacherRows(const at::Tensor& teacherLogProbs, const Prepared& p)
{
    require(teacherLogProbs.dim() == 2 && teacherLogProbs.sizes() == p.logits.sizes(),
        "teacherLogProbs must be [N, V] like studentLogits");
    const at::Tensor rows = teacherLogProbs.detach().to(p.logits.device()).to(p.logits.scalar_type());
    return p.anyPadding ? rows.masked_fill(p.padding.unsqueeze(1), 0.0) : rows;
}

// log p_t(y_t) from either the teacher's full rows [N, V] or its sampled-token log-probabilities [N].
at::Tensor teacherSampled(const at::Tensor& teacherLogProbs, const Prepared& p)
{
    if (teacherLogProbs.dim() == 1) {
        return perPosition(teacherLogProbs, p, p.logProbSampled, "teacherLogProbs must be [N, V] or [N]");
    }
    return teacherRows(teacherLogProbs, p).gather(1, p.sampled.unsqueeze(1)).squeeze(1);
}

CorrectionWeights noCorrection(const Prepared& p)
{
    const auto options = at::TensorOptions().dtype(at::kDouble).device(p.real.device());
    return {at::ones({p.real.size(0)}, options), at::zeros({p.real.size(0)}, options.dtype(at::kBool))};
}

CorrectionWeights correctionFor(const Prepared& p, const EngineTokens& engine, CorrectionOptions options)
{
    if (options.kind == CorrectionOptions::None) {
        return noCorrection(p);
    }
    const at::Tensor logMu = perPosition(engine.logProbs, p, p.logProbSampled, "engine.logProbs must be [N]");
    const at::Tensor logOld = engine.oldLogProbs.defined()
        ? perPosition(engine.oldLogProbs, p, p.logProbSampled, "engine.oldLogProbs must be [N]")
        : p.logProbSampled.detach();
    return correctionWeights(logOld, logMu, options);
}

// Token mean of the real (and, under MIS, kept) tokens, plus the detached statistics.
//   loss = sum_t counted_t weight_t l_t / max(1, sum_t counted_t)
ObjectiveResult finish(const Prepared& p, const at::Tensor& perToken, const CorrectionWeights& correction,
    bool dropAffected, const at::Tensor& klPerToken)
{
    const at::Tensor counted = dropAffected ? p.real.logical_and(correction.affected.logical_not()) : p.real;
    const at::Tensor weighted = perToken * correction.weight.to(perToken.scalar_type());
    const at::Tensor denominator = counted.sum().clamp_min(1).to(perToken.scalar_type());
    ObjectiveResult result;
    result.loss = at::where(counted, weighted, at::zeros_like(weighted)).sum() / denominator;

    result.tokens = p.real.sum().item<std::int64_t>();
    const double tokens = static_cast<double>(result.tokens);
    auto realMean = [&](const at::Tensor& values) {
        if (result.tokens == 0) {
            return 0.0;
        }
        const at::Tensor v = values.detach().to(at::kDouble);
        return at::where(p.real, v, at::zeros_like(v)).sum().item<double>() / tokens;
    };
    // H = -sum_v p log p, with 0 log 0 = 0, summed in float64 a group of rows at a time.  nats
    const at::Tensor entropy = p.entropy.defined() ? p.entropy
        : p.logProbs.defined()                        ? entropyRows(p.logProbs.detach(), /*logProbs=*/true)
                                                      : entropyRows(p.logits.detach(), /*logProbs=*/false);
    result.studentEntropy = realMean(entropy);
    result.meanKl = klPerToken.defined() ? realMean(klPerToken) : 0.0;
    result.meanWeight = realMean(correction.weight);
    result.clippedFraction = realMean(correction.affected);
    return result;
}

// k3 estimate of KL(mu || pi) on the sampled token: r - 1 - log r, r = pi(y) / mu(y) (as metrics/mismatch.h).
at::Tensor mismatchK3(const Prepared& p, const EngineTokens& engine)
{
    if (!engine.logProbs.defined()) {
        return {};
    }
    const at::Tensor logMu = perPosition(engine.logProbs, p, p.logProbSampled, "engine.logProbs must be [N]");
    const at::Tensor logR = (p.logProbSampled.detach() - logMu).to(at::kDouble);
    return logR.exp() - 1.0 - logR;
}

// Per-token advantage of each position from per-sequence values [B].
at::Tensor perTokenFromSequences(const at::Tensor& perSequence, const at::Tensor& sequenceOf, const Prepared& p)
{
    require(sequenceOf.dim() == 1 && sequenceOf.size(0) == p.real.size(0), "sequenceOf must be [N]");
    const at::Tensor index = sequenceOf.to(p.real.device()).to(at::kLong).masked_fill(p.padding, 0);
    return perSequence.to(p.real.device()).index_select(0, index);
}

} // namespace

CorrectionWeights correctionWeights(
    const at::Tensor& oldLogProbs, const at::Tensor& engineLogProbs, CorrectionOptions options)
{
    require(oldLogProbs.sizes() == engineLogProbs.sizes(), "oldLogProbs and engineLogProbs must match");
    const at::Tensor logW = (oldLogProbs.detach().to(at::kDouble) - engineLogProbs.detach().to(at::kDouble));
    const at::Tensor w = logW.exp(); // pi_old(y) / mu(y)
    switch (options.kind) {
    case CorrectionOptions::None:
        return {at::ones_like(w), at::zeros_like(w, w.options().dtype(at::kBool))};
    case CorrectionOptions::Tis: {
        require(options.cap > 0.0, "the TIS cap must be positive");
        return {w.clamp_max(options.cap), w > options.cap};
    }
    case CorrectionOptions::Mis: {
        require(options.cap >= 1.0, "the MIS bound [1/C, C] needs C >= 1");
        const at::Tensor outside = (w < 1.0 / options.cap).logical_or(w > options.cap);
        return {outside.logical_not().to(at::kDouble), outside};
    }
    }
    throw std::invalid_argument("objectives: unknown correction kind");
}

ObjectiveResult opdFullKl(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine, CorrectionOptions correction)
{
    Prepared p = prepare(studentLogits, mask, engine, correction.kind != CorrectionOptions::None, false);
    const at::Tensor logT = teacherRows(teacherLogProbs, p);
    // KL(p_s || p_t) = sum_v p_s(v) (log p_s(v) - log p_t(v))  nats per token
    const torch::autograd::variable_list rows = FullKlFunction::apply(p.logits, logT);
    const at::Tensor& kl = rows[0];
    p.entropy = rows[1];
    return finish(p, kl, correctionFor(p, engine, correction), correction.kind == CorrectionOptions::Mis, kl.detach());
}

ObjectiveResult opdK1(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine, CorrectionOptions correction)
{
    const Prepared p = prepare(studentLogits, mask, engine, true);
    const at::Tensor logTy = teacherSampled(teacherLogProbs, p);
    // k1 = log p_s(y) - log p_t(y) (the negative per-token reward), held fixed; l = k1 log p_s(y).
    const at::Tensor k1 = (p.logProbSampled - logTy).detach();
    const at::Tensor perToken = k1 * p.logProbSampled;
    return finish(p, perToken, correctionFor(p, engine, correction), correction.kind == CorrectionOptions::Mis, k1);
}

ObjectiveResult opdK3(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine, CorrectionOptions correction)
{
    const Prepared p = prepare(studentLogits, mask, engine, true);
    const at::Tensor logTy = teacherSampled(teacherLogProbs, p);
    // k3 = rho - 1 - log rho, rho = p_t(y) / p_s(y), held fixed; advantage -k3, l = k3 log p_s(y).
    const at::Tensor logRho = (logTy - p.logProbSampled).detach();
    const at::Tensor k3 = logRho.exp() - 1.0 - logRho;
    const at::Tensor perToken = k3 * p.logProbSampled;
    return finish(p, perToken, correctionFor(p, engine, correction), correction.kind == CorrectionOptions::Mis, k3);
}

ObjectiveResult opdTopK(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    std::int64_t k, const EngineTokens& engine, CorrectionOptions correction)
{
    const Prepared p = prepare(studentLogits, mask, engine, correction.kind != CorrectionOptions::None);
    require(k >= 1 && k <= p.logProbs.size(1), "opdTopK needs 1 <= k <= V");
    const at::Tensor logT = teacherRows(teacherLogProbs, p);
    // S = the student's k most likely tokens; chosen without gradient.
    const at::Tensor top = std::get<1>(p.logProbs.detach().topk(k, -1));
    // Renormalised over S: log q(v) = log p(v) - logsumexp_{u in S} log p(u), which is log_softmax of the subset.
    const at::Tensor logQs = at::log_softmax(p.logProbs.gather(1, top), -1);
    const at::Tensor logQt = at::log_softmax(logT.gather(1, top), -1);
    const at::Tensor kl = (logQs.exp() * (logQs - logQt)).sum(-1);
    return finish(p, kl, correctionFor(p, engine, correction), correction.kind == CorrectionOptions::Mis, kl.detach());
}

ObjectiveResult reinforce(const at::Tensor& studentLogits, const at::Tensor& mask, const at::Tensor& sequenceOf,
    const at::Tensor& rewards, const EngineTokens& engine, CorrectionOptions correction)
{
    const Prepared p = prepare(studentLogits, mask, engine, true);
    require(rewards.dim() == 1 && rewards.size(0) >= 1, "rewards must be [B]");
    const at::Tensor r = rewards.detach().to(at::kDouble);
    // Batch-mean baseline over responses: A_b = R_b - mean_b' R_b'.
    const at::Tensor advantage = perTokenFromSequences(r - r.mean(), sequenceOf, p);
    const at::Tensor perToken = -advantage.to(p.logProbSampled.scalar_type()) * p.logProbSampled;
    return finish(p, perToken, correctionFor(p, engine, correction), correction.kind == CorrectionOptions::Mis,
        mismatchK3(p, engine));
}

at::Tensor grpoAdvantages(const at::Tensor& rewards, const GrpoOptions& options)
{
    require(options.groupSize >= 1, "GRPO groupSize must be >= 1");
    require(rewards.dim() == 1 && rewards.size(0) % options.groupSize == 0,
        "rewards must be [B] with B a multiple of groupSize");
    const at::Tensor r = rewards.detach().to(at::kDouble).view({-1, options.groupSize});
    const at::Tensor centred = r - r.mean(1, true);
    const at::Tensor deviation = centred.pow(2).mean(1, true).sqrt(); // population standard deviation
    return (centred / (deviation + options.advantageEpsilon)).view({-1});
}

ObjectiveResult grpo(const at::Tensor& studentLogits, const at::Tensor& mask, const at::Tensor& sequenceOf,
    const at::Tensor& rewards, const EngineTokens& engine, const GrpoOptions& options)
{
    const Prepared p = prepare(studentLogits, mask, engine, true);
    require(options.clipEpsilon > 0.0 && options.clipEpsilon < 1.0, "GRPO clipEpsilon must be in (0, 1)");
    const at::Tensor advantage
        = perTokenFromSequences(grpoAdvantages(rewards, options), sequenceOf, p).to(p.logProbSampled.scalar_type());
    const at::Tensor logMu = perPosition(engine.logProbs, p, p.logProbSampled, "engine.logProbs must be [N]");
    // r = pi_theta(y) / mu(y): the engine is the behaviour policy.
    const at::Tensor ratio = (p.logProbSampled - logMu).exp();
    const double low = 1.0 - options.clipEpsilon;
    const double high = 1.0 + options.clipEpsilon;
    const at::Tensor perToken = -at::minimum(ratio * advantage, ratio.clamp(low, high) * advantage);

    // The clip is active (the token's gradient is zero) where the ratio has left [1 - eps, 1 + eps] in the
    // direction its advantage pushes it.
    const at::Tensor r = ratio.detach();
    const at::Tensor clipped = (advantage > 0).logical_and(r > high).logical_or((advantage < 0).logical_and(r < low));
    CorrectionWeights unweighted = noCorrection(p);
    ObjectiveResult result = finish(p, perToken, unweighted, false, mismatchK3(p, engine));
    const double tokens = static_cast<double>(result.tokens);
    if (result.tokens > 0) {
        const at::Tensor rd = r.to(at::kDouble);
        result.meanWeight = at::where(p.real, rd, at::zeros_like(rd)).sum().item<double>() / tokens;
        result.clippedFraction = p.real.logical_and(clipped).sum().item<double>() / tokens;
    }
    return result;
}

} // namespace mismatch::train
