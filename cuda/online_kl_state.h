#pragma once
// One-pass ("online") full-vocabulary KL(mu || pi) from two logit rows a (engine) and b (trainer), shared by the
// CPU implementation (core/metrics/online_kl.cpp) and the fused CUDA kernel (cuda/fused_kl.cu). Plain C++ with
// no LibTorch, so that nvcc compiles it too.
//
// With mu = softmax(a), pi = softmax(b), L = log mu - log pi. One pass keeps, per partial range of the vocabulary,
// the running maxima mA, mB (float values, held exactly) and
//   sA = sum exp(a_v - mA),   sB = sum exp(b_v - mB),   w = sum exp(a_v - mA) d_v,   d_v = (a_v - mA) - (b_v - mB)
// so that L_v = d_v - log sA + log sB and
//   KL = w / sA + log sB - log sA                                                 nats
// Elements come in groups (a 16-byte vector of the kernel: 8 bf16 or 4 float32; the CPU twin's groups of 8):
// the group's maxima raise the running ones first (rare after the first groups: sA and w are rescaled by
// exp(old mA - new mA), sB likewise, and w moves by ((new mB - old mB) - (new mA - old mA)) sA since every d_v
// does), so the group's exps use fixed maxima: a subtract, a multiply and exp2f each, no branch per element. No
// log-softmax is materialized. Logits of -inf (masked tokens) contribute nothing to their side; a token with
// mu > 0 and pi = 0 gives KL = +inf, as it should. Partials over disjoint ranges merge by raising both to common
// maxima, so any split of the vocabulary (threads, warps, blocks) gives the same function.
//
// Precision. The KL between a BF16 engine and its FP32 trainer is ~1e-5 nats, what remains of log-sum-exps of the
// size of the logits (tens of nats): the first form of this state (float32 sums of exp(a - mA) (a - b), KL = w / sA
// - lse(a) + lse(b)) lost it in that cancellation, ~1e-6 nats per row (151,936-token rows: mean |error| 2-4e-6, max
// 3e-5, a mean bias of -4e-7 against a mean KL of 7e-5). Here w is taken against both maxima, so neither it nor
// log sB - log sA carries the logits' offset, and the running state is float64 (each group's float32 partial sums
// are added into it once); per element there is float32 work only. Its errors, first order, for a row:
//   each exp (exp2f within 2 ulp; the argument a - mA rounded, then times log2 e) and each partial sum of <= 8
//   terms perturb a term of sA or w by a relative alpha_v <= 2^-22 (3 + |a_v - mA|), of sB by beta_v (b likewise),
//   which moves the KL by sum_v mu_v alpha_v (L_v - KL - 1) + sum_v pi_v beta_v;
//   d_v rounded in float32 and summed in groups of 8: at most 2^-20 E_mu(|a - mA| + |b - mB|);
//   float64 sums and the float32 output.
// tests/gpu/kl_bounds.h computes that bound per row and holds the CPU twin and the kernel to it (measured errors: 1-9%
// of it), and, on rows as close as a BF16 engine and its trainer, a mean error under 0.1% of their mean KL (the twin:
// ~1e-8 nats against ~7e-5).
#include <cmath>

#if defined(__CUDACC__)
#define MISMATCH_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MISMATCH_HOST_DEVICE inline
#endif

namespace mismatch::metrics {

struct OnlineKlState {
    double maxA = -INFINITY;
    double sumA = 0.0; // sum exp(a - maxA)
    double weighted = 0.0; // sum exp(a - maxA) ((a - maxA) - (b - maxB))
    double maxB = -INFINITY;
    double sumB = 0.0; // sum exp(b - maxB)
};

// Raises the running maxima to at least (a, b) (NaN leaves them), rescaling what is summed so far.
MISMATCH_HOST_DEVICE void onlineKlRaise(OnlineKlState& s, double a, double b)
{
    const double maxA = a > s.maxA ? a : s.maxA;
    const double maxB = b > s.maxB ? b : s.maxB;
    if (maxA == s.maxA && maxB == s.maxB) {
        return;
    }
    if (s.sumA > 0.0) { // some finite a is summed, so s.maxA is finite
        // Every d so far moves by (maxB - s.maxB) - (maxA - s.maxA). With no finite b yet (s.maxB = -inf), every term
        // so far had pi = 0 and w is already +inf.
        if (s.maxB != -INFINITY) {
            s.weighted += ((maxB - s.maxB) - (maxA - s.maxA)) * s.sumA;
        }
        const double rescale = exp(s.maxA - maxA);
        s.sumA *= rescale;
        s.weighted *= rescale;
    }
    if (s.sumB > 0.0) {
        s.sumB *= exp(s.maxB - maxB);
    }
    s.maxA = maxA;
    s.maxB = maxB;
}

// exp(x) for x <= 0 (a float32 difference from the running maximum): one multiply and exp2f.
MISMATCH_HOST_DEVICE float onlineExp(float x)
{
    return exp2f(x * 1.44269504088896341f);
}

// Adds a group of N element pairs (N <= 8).
template <int N> MISMATCH_HOST_DEVICE void onlineKlAddGroup(OnlineKlState& s, const float* a, const float* b)
{
    float groupA = -INFINITY;
    float groupB = -INFINITY;
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int j = 0; j < N; ++j) {
        groupA = fmaxf(groupA, a[j]); // NaN skipped: it reaches the sums below instead
        groupB = fmaxf(groupB, b[j]);
    }
    onlineKlRaise(s, groupA, groupB);
    const float maxA = static_cast<float>(s.maxA); // exact: a float32 value, or -inf
    const float maxB = static_cast<float>(s.maxB);
    float partA = 0.0f;
    float partB = 0.0f;
    float partW = 0.0f;
    bool unreachable = false; // a term with mu > 0 and pi = 0
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int j = 0; j < N; ++j) {
        if (a[j] != -INFINITY) {
            const float x = a[j] - maxA;
            const float e = onlineExp(x);
            partA += e;
            if (b[j] == -INFINITY) {
                unreachable = true;
            } else {
                partW = fmaf(e, x - (b[j] - maxB), partW);
            }
        }
        if (b[j] != -INFINITY) {
            partB += onlineExp(b[j] - maxB);
        }
    }
    s.sumA += partA;
    s.sumB += partB;
    s.weighted += unreachable ? INFINITY : partW;
}

MISMATCH_HOST_DEVICE void onlineKlAdd(OnlineKlState& s, float a, float b)
{
    onlineKlAddGroup<1>(s, &a, &b);
}

MISMATCH_HOST_DEVICE void onlineKlMerge(OnlineKlState& s, OnlineKlState o)
{
    const double maxA = fmax(s.maxA, o.maxA);
    const double maxB = fmax(s.maxB, o.maxB);
    onlineKlRaise(s, maxA, maxB);
    onlineKlRaise(o, maxA, maxB);
    s.sumA += o.sumA;
    s.sumB += o.sumB;
    s.weighted += o.weighted;
}

MISMATCH_HOST_DEVICE double onlineLogSumExpA(const OnlineKlState& s)
{
    return s.maxA + log(s.sumA);
}

MISMATCH_HOST_DEVICE double onlineLogSumExpB(const OnlineKlState& s)
{
    return s.maxB + log(s.sumB);
}

// KL(mu || pi) of a finished state, nats.
MISMATCH_HOST_DEVICE double onlineKl(const OnlineKlState& s)
{
    return s.weighted / s.sumA + log(s.sumB) - log(s.sumA);
}

// k3 = r - 1 - log r with log r = log pi(y) - log mu(y) = -k1: expm1(-k1) + k1 (no cancellation for small k1).
MISMATCH_HOST_DEVICE double k3FromK1(double k1)
{
    return expm1(-k1) + k1;
}

} // namespace mismatch::metrics
