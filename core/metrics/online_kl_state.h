#pragma once
// One-pass ("online") full-vocabulary KL(mu || pi) from two logit rows a (engine) and b (trainer), shared by the
// CPU implementation (core/metrics/online_kl.cpp) and the fused CUDA kernel (cuda/fused_kl.cu). Plain C++ with
// no LibTorch, so that nvcc compiles it too.
//
// With mu = softmax(a), pi = softmax(b), lse = log-sum-exp:
//   KL(mu || pi) = sum_v mu_v (a_v - b_v) - (lse(a) - lse(b))
// One pass keeps, per partial range of the vocabulary, the running maxima mA, mB and
//   sA = sum exp(a_v - mA),   sB = sum exp(b_v - mB),   w = sum exp(a_v - mA) (a_v - b_v)
// rescaling sA and w by exp(old mA - new mA) when mA grows (sB likewise). Partials over disjoint ranges merge
// by the same rescaling, so any split of the vocabulary (threads, warps, blocks) gives the same function:
//   KL = w / sA - (mA + log sA) + (mB + log sB)                                   nats
// No log-softmax is materialized. Logits of -inf (masked tokens) contribute nothing to their side; a token
// with mu > 0 and pi = 0 gives KL = +inf, as it should.
#include <cmath>

#if defined(__CUDACC__)
#define MISMATCH_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MISMATCH_HOST_DEVICE inline
#endif

namespace mismatch::metrics {

struct OnlineKlState {
    float maxA = -INFINITY;
    float sumA = 0.0f; // sum exp(a - maxA)
    float weighted = 0.0f; // sum exp(a - maxA) (a - b)
    float maxB = -INFINITY;
    float sumB = 0.0f; // sum exp(b - maxB)
};

// exp(from - to) for to >= from, where from = -inf (an empty partial) gives 0 instead of NaN.
MISMATCH_HOST_DEVICE float onlineRescale(float from, float to)
{
    return from == -INFINITY ? 0.0f : expf(from - to);
}

MISMATCH_HOST_DEVICE void onlineKlAdd(OnlineKlState& s, float a, float b)
{
    if (a != -INFINITY) {
        if (a > s.maxA) {
            const float rescale = onlineRescale(s.maxA, a);
            s.sumA *= rescale;
            s.weighted *= rescale;
            s.maxA = a;
        }
        const float e = expf(a - s.maxA);
        s.sumA += e;
        s.weighted += e * (a - b);
    }
    if (b != -INFINITY) {
        if (b > s.maxB) {
            s.sumB *= onlineRescale(s.maxB, b);
            s.maxB = b;
        }
        s.sumB += expf(b - s.maxB);
    }
}

MISMATCH_HOST_DEVICE void onlineKlMerge(OnlineKlState& s, const OnlineKlState& o)
{
    const float maxA = fmaxf(s.maxA, o.maxA);
    if (maxA != -INFINITY) {
        const float self = onlineRescale(s.maxA, maxA);
        const float other = onlineRescale(o.maxA, maxA);
        s.sumA = s.sumA * self + o.sumA * other;
        s.weighted = s.weighted * self + o.weighted * other;
        s.maxA = maxA;
    }
    const float maxB = fmaxf(s.maxB, o.maxB);
    if (maxB != -INFINITY) {
        s.sumB = s.sumB * onlineRescale(s.maxB, maxB) + o.sumB * onlineRescale(o.maxB, maxB);
        s.maxB = maxB;
    }
}

MISMATCH_HOST_DEVICE float onlineLogSumExpA(const OnlineKlState& s)
{
    return s.maxA + logf(s.sumA);
}

MISMATCH_HOST_DEVICE float onlineLogSumExpB(const OnlineKlState& s)
{
    return s.maxB + logf(s.sumB);
}

// KL(mu || pi) of a finished state, nats.
MISMATCH_HOST_DEVICE float onlineKl(const OnlineKlState& s)
{
    return s.weighted / s.sumA - onlineLogSumExpA(s) + onlineLogSumExpB(s);
}

// k3 = r - 1 - log r with log r = log pi(y) - log mu(y) = -k1: expm1(-k1) + k1 (no cancellation for small k1).
MISMATCH_HOST_DEVICE float k3FromK1(float k1)
{
    return expm1f(-k1) + k1;
}

} // namespace mismatch::metrics
