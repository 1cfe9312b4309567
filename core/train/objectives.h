#pragma once
// Training objectives on per-token tensors: on-policy distillation (OPD) toward a fixed teacher, REINFORCE
// and GRPO with a verifiable per-sequence reward, and per-token importance corrections (TIS, MIS) from the
// engine's log-probabilities. All in nats.
//
// Every objective works on the flattened response positions of a batch: row t of a [N, V] tensor is the
// next-token distribution at response position t (prefix h_t sampled by the engine mu), and `mask` [N]
// (bool or 0/1) selects the real response tokens; padding rows are ignored completely (they change neither
// the loss nor any gradient). The loss is a token mean over the counted tokens (the spec's token mean).
//
// Notation: p_s = softmax(studentLogits) = pi_theta (the trainable student), p_t = the fixed teacher,
// mu = the engine that sampled y_t, pi_old = the trainer at the weights the engine rolled out with.
//
//   opdFullKl  l_t = KL(p_s || p_t) = sum_v p_s(v) (log p_s(v) - log p_t(v))            exact, full vocabulary
//   opdK1      l_t = sg[log p_s(y) - log p_t(y)] * log p_s(y)                              score function, k1 reward
//   opdK3      l_t = sg[rho - 1 - log rho] * log p_s(y),  rho = p_t(y) / p_s(y)            score function, k3 reward
//   opdTopK    l_t = sum_{v in S} q_s(v) (log q_s(v) - log q_t(v)),  S = the student's top-k tokens,
//              q_s = p_s / p_s(S), q_t = p_t / p_t(S)  (both renormalised over S)
//   reinforce  l_t = -(R_b - mean_b' R_b') * log p_s(y)        b = the sequence of position t, batch-mean baseline
//   grpo       l_t = -min(r A_b, clip(r, 1 - eps, 1 + eps) A_b),  r = p_s(y) / mu(y),
//              A_b = (R_b - mean_group R) / (std_group R + epsilon)
// (sg = stop-gradient.) Expected gradients over y ~ p_s, per position, with softmax logits z:
//   k1: E[(log p_s(y) - log p_t(y)) grad log p_s(y)] = grad_z KL(p_s || p_t)    unbiased for the full-KL gradient
//   k3: E[(rho - 1 - log rho) grad log p_s(y)]       = grad_z KL(p_s || p_t) + (p_t - p_s)
//                                                    = grad_z KL(p_s || p_t) - grad_z KL(p_t || p_s)
//       i.e. k3 used as a reward is a biased estimator of the reverse-KL gradient (its E_p_s[rho grad log p_s]
//       term does not vanish); it is offered because external OPD trainers use it, and the bias is tested.
// The k1/k3 losses' values are not KLs (they only carry the gradient); ObjectiveResult::meanKl reports the
// estimator's KL value instead.
//
// Corrections (OPD and REINFORCE), per token, detached, from w_t = pi_old(y_t) / mu(y_t):
//   Tis  l_t <- min(w_t, C) l_t; the mean still divides by all counted tokens.
//   Mis  two-sided: tokens with w_t outside [1/C, C] are dropped from the loss and from the mean's
//        denominator; kept tokens have weight 1.
#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mismatch::train {

struct CorrectionOptions {
    enum Kind { None, Tis, Mis };
    Kind kind = None;
    double cap = 2.0; // C: the TIS cap (> 0) and the MIS bound [1/C, C] (C >= 1)
};

// What the engine returned for each flattened response position.
struct EngineTokens {
    at::Tensor sampled; // [N] int64: the token y_t the engine sampled
    at::Tensor logProbs; // [N] log mu(y_t | h_t), the engine's log-probability of it
    at::Tensor oldLogProbs; // [N] optional log pi_old(y_t | h_t); undefined: the current student's, detached
                            // (the synchronous on-policy case, where pi_old = pi_theta)
};

struct ObjectiveResult {
    at::Tensor loss; // scalar, differentiable with respect to studentLogits; dtype of studentLogits
    // Detached statistics, token means over the real response tokens (mask), nats where a KL or entropy:
    double meanKl = 0.0; // OPD: the objective's KL to the teacher (full: exact reverse KL; k1/k3: the
                         // sampled-token estimate; topK: the renormalised top-k KL).
                         // REINFORCE/GRPO: k3 estimate of the mismatch KL(mu || pi_theta) on y_t
                         // (0 for REINFORCE without engine.logProbs).
    double studentEntropy = 0.0; // H(p_s) over the full vocabulary
    double meanWeight = 1.0; // correction weight (TIS: min(w, C); MIS: 1 kept, 0 dropped; None: 1);
                             // GRPO: the ratio p_s(y) / mu(y)
    double clippedFraction = 0.0; // TIS: w > C; MIS: dropped; GRPO: the clip is active (zero gradient)
    std::int64_t tokens = 0; // real response tokens (mask)
};

// Per-token correction weights from log pi_old(y) and log mu(y), both [N]; detached, float64.
struct CorrectionWeights {
    at::Tensor weight; // [N] TIS: min(w, C); MIS: 1 inside [1/C, C], 0 outside; None: 1
    at::Tensor affected; // [N] bool: TIS w > C; MIS outside [1/C, C]; None: false
};
CorrectionWeights correctionWeights(
    const at::Tensor& oldLogProbs, const at::Tensor& engineLogProbs, CorrectionOptions options);

// OPD. studentLogits [N, V] (requires grad), teacherLogProbs [N, V] log-probabilities of the teacher's full
// distribution (finite; detached here). `engine` is needed by opdK1/opdK3 (sampled) and by any correction.
// opdFullKl's per-token KL has its own backward (p_s (log p_s - log p_t - KL), log p_s recomputed), so autograd
// keeps the logits and the teacher's rows instead of three [N, V] intermediates; on a CUDA device its forward is the
// fused one-pass kernel (cuda::fusedMismatch) when opdFullKlUsesFusedKernel says so (float32, bf16 or fp16 logits).
ObjectiveResult opdFullKl(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine = {}, CorrectionOptions correction = {});
bool opdFullKlUsesFusedKernel(const at::Tensor& studentLogits);
// teacherLogProbs may also be [N]: the teacher's log-probability of the sampled token only.
ObjectiveResult opdK1(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine, CorrectionOptions correction = {});
ObjectiveResult opdK3(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    const EngineTokens& engine, CorrectionOptions correction = {});
// 1 <= k <= V; the top-k set is chosen without gradient, the KL is differentiated through the renormalised
// student probabilities on it. k = V gives opdFullKl.
ObjectiveResult opdTopK(const at::Tensor& studentLogits, const at::Tensor& teacherLogProbs, const at::Tensor& mask,
    std::int64_t k, const EngineTokens& engine = {}, CorrectionOptions correction = {});

// REINFORCE. sequenceOf [N] int64 in [0, B): the response each position belongs to; rewards [B] (the
// exact-match reward of each response, 1 correct / 0 not, computed by the task); baseline = mean of rewards.
ObjectiveResult reinforce(const at::Tensor& studentLogits, const at::Tensor& mask, const at::Tensor& sequenceOf,
    const at::Tensor& rewards, const EngineTokens& engine, CorrectionOptions correction = {});

struct GrpoOptions {
    std::int64_t groupSize = 8; // responses b in [g G, (g + 1) G) answer the same prompt g
    double clipEpsilon = 0.2; // ratio clipped to [1 - eps, 1 + eps]
    double advantageEpsilon = 1e-6; // A = (R - mean) / (std + advantageEpsilon)
};

// A_b = (R_b - mean_group) / (std_group + advantageEpsilon) with the population standard deviation of each
// group (so a group's advantages have mean 0 and standard deviation std / (std + epsilon)); a group whose
// rewards are all equal gets advantages 0. rewards [B], B a multiple of groupSize; returns [B] float64.
at::Tensor grpoAdvantages(const at::Tensor& rewards, const GrpoOptions& options);

// GRPO with the engine as the behaviour policy: the ratio is p_s(y) / mu(y) with mu = engine.logProbs.
ObjectiveResult grpo(const at::Tensor& studentLogits, const at::Tensor& mask, const at::Tensor& sequenceOf,
    const at::Tensor& rewards, const EngineTokens& engine, const GrpoOptions& options = {});

} // namespace mismatch::train
