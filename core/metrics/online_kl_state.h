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
//
// Precision. The last line subtracts log-sum-exps of the size of the logits (tens of nats) to leave a KL that,
// between a BF16 engine and its FP32 trainer, is ~1e-5 nats: in float32 that cancellation alone costs ~1e-6 nats
// per row (measured on 151,936-token rows: mean |error| 2-4e-6, max 3e-5, a mean bias of -4e-7 against a mean KL of
// 7e-5), a few percent of the BF16 unit. So the running sums, maxima, a - b and the final combination are float64
// (logits convert exactly), and only each element's exp is float32 (CUDA's expf is within 2 ulp, relative
// 2^-22; glibc's within 1): perturbing each term of sA and w by a relative alpha_v and of sB by beta_v, both
// <= eta = 2^-22, moves the KL to first order by sum_v mu_v alpha_v (L_v - KL) + sum_v (pi_v - mu_v) beta_v with
// L = log mu - log pi, so by at most eta (2 + E_mu|L - KL|): tests/gpu/kl_bounds.h holds both implementations to
// that, plus float64 summation and the float32 outputs' rounding. Float64 adds and FMAs per element are far
// below a GPU's float64 rate at memory bandwidth, and the exps stay on the float32 units.
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
    double weighted = 0.0; // sum exp(a - maxA) (a - b)
    double maxB = -INFINITY;
    double sumB = 0.0; // sum exp(b - maxB)
};

// exp(from - to) for to >= from, where from = -inf (an empty partial) gives 0 instead of NaN. Float64: it runs
// only when a maximum grows, and it scales everything summed so far.
MISMATCH_HOST_DEVICE double onlineRescale(double from, double to)
{
    return from == -INFINITY ? 0.0 : exp(from - to);
}

// exp(x) for x <= 0 through float32's expf (the one float32 step; see Precision above). The argument's rounding to
// float32 (relative 2^-24 of x, so up to ~1e-6 for x of tens) is corrected to first order with the part the
// rounding left out: exp(head + tail) = exp(head) (1 + tail + O(tail^2)), |tail| <= 2^-24 |x|.
MISMATCH_HOST_DEVICE double onlineExp(double shifted)
{
    const float head = static_cast<float>(shifted);
    const double e = static_cast<double>(expf(head));
    return e == 0.0 ? 0.0 : e + e * (shifted - static_cast<double>(head));
}

MISMATCH_HOST_DEVICE void onlineKlAdd(OnlineKlState& s, float a, float b)
{
    const double x = a;
    const double y = b;
    if (a != -INFINITY) {
        if (x > s.maxA) {
            const double rescale = onlineRescale(s.maxA, x);
            s.sumA *= rescale;
            s.weighted *= rescale;
            s.maxA = x;
        }
        const double e = onlineExp(x - s.maxA);
        s.sumA += e;
        s.weighted += e * (x - y);
    }
    if (b != -INFINITY) {
        if (y > s.maxB) {
            s.sumB *= onlineRescale(s.maxB, y);
            s.maxB = y;
        }
        s.sumB += onlineExp(y - s.maxB);
    }
}

MISMATCH_HOST_DEVICE void onlineKlMerge(OnlineKlState& s, const OnlineKlState& o)
{
    const double maxA = fmax(s.maxA, o.maxA);
    if (maxA != -INFINITY) {
        const double self = onlineRescale(s.maxA, maxA);
        const double other = onlineRescale(o.maxA, maxA);
        s.sumA = s.sumA * self + o.sumA * other;
        s.weighted = s.weighted * self + o.weighted * other;
        s.maxA = maxA;
    }
    const double maxB = fmax(s.maxB, o.maxB);
    if (maxB != -INFINITY) {
        s.sumB = s.sumB * onlineRescale(s.maxB, maxB) + o.sumB * onlineRescale(o.maxB, maxB);
        s.maxB = maxB;
    }
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
    return s.weighted / s.sumA - onlineLogSumExpA(s) + onlineLogSumExpB(s);
}

// k3 = r - 1 - log r with log r = log pi(y) - log mu(y) = -k1: expm1(-k1) + k1 (no cancellation for small k1).
MISMATCH_HOST_DEVICE double k3FromK1(double k1)
{
    return expm1(-k1) + k1;
}

} // namespace mismatch::metrics
