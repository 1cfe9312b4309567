// Fused full-vocabulary mismatch: KL(mu || pi), k1 and k3 per row from the engine's and the trainer's logits in
// one pass over each row (online log-sum-exp, cuda/online_kl_state.h: a group's exps against fixed maxima,
// float32 partial sums, a float64 running state), without writing any log-softmax. One block per row; each thread
// reads 16-byte vectors i, i + blockDim, ... of both rows (coalesced; element by element when a row is not 16-byte
// aligned), each vector one group, into kStates independent partials, merged in the thread, then across the block
// pairwise (warp shuffles, then shared memory). Memory traffic: both rows read once.
#include "cuda/online_kl_state.h"
#include "cuda/check.h"
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mismatch::cuda::kernels {

namespace {

constexpr int kThreads = 512;

template <typename T> __device__ __forceinline__ float toFloat(T value);
template <> __device__ __forceinline__ float toFloat(float value) { return value; }
template <> __device__ __forceinline__ float toFloat(__nv_bfloat16 value) { return __bfloat162float(value); }
template <> __device__ __forceinline__ float toFloat(__half value) { return __half2float(value); }

__device__ __forceinline__ metrics::OnlineKlState shuffleDown(const metrics::OnlineKlState& s, int offset)
{
    metrics::OnlineKlState o;
    o.maxA = __shfl_down_sync(0xFFFFFFFFu, s.maxA, offset);
    o.sumA = __shfl_down_sync(0xFFFFFFFFu, s.sumA, offset);
    o.weighted = __shfl_down_sync(0xFFFFFFFFu, s.weighted, offset);
    o.maxB = __shfl_down_sync(0xFFFFFFFFu, s.maxB, offset);
    o.sumB = __shfl_down_sync(0xFFFFFFFFu, s.sumB, offset);
    return o;
}

// Independent running states per thread: each vector's update depends on its state's previous one (the float64
// sums), so one state per thread serializes the row; the two vectors loaded per iteration go to two states that
// merge at the end.
constexpr int kStates = 2;

// One 16-byte vector of each row as one group of the online state (fixed maxima within it, float32 partial sums).
template <typename T, int N>
__device__ __forceinline__ void addVector(metrics::OnlineKlState& state, const T* a, const T* b)
{
    float fa[N];
    float fb[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        fa[j] = toFloat(a[j]);
        fb[j] = toFloat(b[j]);
    }
    metrics::onlineKlAddGroup<N>(state, fa, fb);
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fusedMismatchKernel(const T* engine, const T* trainer,
    std::int64_t vocab, const std::int64_t* sampled, float* kl, float* k1, float* k3)
{
    __shared__ metrics::OnlineKlState warpStates[kThreads / 32];
    const std::int64_t row = blockIdx.x;
    const T* a = engine + row * vocab;
    const T* b = trainer + row * vocab;
    metrics::OnlineKlState states[kStates];
    // 16-byte loads (8 bf16/fp16 or 4 float32 values) when both rows start 16-byte aligned: thread i takes
    // vectors i, i + blockDim, ... (coalesced), two vectors of each row in flight per iteration.
    constexpr int kPerVector = 16 / static_cast<int>(sizeof(T));
    const bool aligned = (reinterpret_cast<std::uintptr_t>(a) % 16 == 0) && (reinterpret_cast<std::uintptr_t>(b) % 16 == 0);
    std::int64_t scalarFrom = 0;
    if (aligned) {
        const std::int64_t vectors = vocab / kPerVector;
        const uint4* a4 = reinterpret_cast<const uint4*>(a);
        const uint4* b4 = reinterpret_cast<const uint4*>(b);
        std::int64_t i = threadIdx.x;
        for (; i + kThreads < vectors; i += 2 * kThreads) {
            const uint4 ra0 = __ldg(a4 + i);
            const uint4 rb0 = __ldg(b4 + i);
            const uint4 ra1 = __ldg(a4 + i + kThreads);
            const uint4 rb1 = __ldg(b4 + i + kThreads);
            const T* ea0 = reinterpret_cast<const T*>(&ra0); // vectors i and i + kThreads: two states
            const T* eb0 = reinterpret_cast<const T*>(&rb0);
            const T* ea1 = reinterpret_cast<const T*>(&ra1);
            const T* eb1 = reinterpret_cast<const T*>(&rb1);
            addVector<T, kPerVector>(states[0], ea0, eb0);
            addVector<T, kPerVector>(states[1 % kStates], ea1, eb1);
        }
        if (i < vectors) {
            const uint4 ra = __ldg(a4 + i);
            const uint4 rb = __ldg(b4 + i);
            addVector<T, kPerVector>(states[0], reinterpret_cast<const T*>(&ra), reinterpret_cast<const T*>(&rb));
        }
        scalarFrom = vectors * kPerVector; // the row's last vocab % kPerVector elements
    }
    for (std::int64_t v = scalarFrom + threadIdx.x; v < vocab; v += kThreads) {
        metrics::onlineKlAdd(states[0], toFloat(a[v]), toFloat(b[v]));
    }
    metrics::OnlineKlState state = states[0];
#pragma unroll
    for (int k = 1; k < kStates; ++k) {
        metrics::onlineKlMerge(state, states[k]);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        metrics::onlineKlMerge(state, shuffleDown(state, offset));
    }
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x / 32;
    if (lane == 0) {
        warpStates[warp] = state;
    }
    __syncthreads();
    if (warp == 0) {
        state = lane < kThreads / 32 ? warpStates[lane] : metrics::OnlineKlState {};
        for (int offset = 16; offset > 0; offset /= 2) {
            metrics::onlineKlMerge(state, shuffleDown(state, offset));
        }
        if (lane == 0) {
            kl[row] = static_cast<float>(metrics::onlineKl(state));
            const std::int64_t token = sampled[row];
            if (token < 0 || token >= vocab) {
                k1[row] = NAN;
                k3[row] = NAN;
            } else {
                const double logMu = toFloat(a[token]) - metrics::onlineLogSumExpA(state);
                const double logPi = toFloat(b[token]) - metrics::onlineLogSumExpB(state);
                k1[row] = static_cast<float>(logMu - logPi);
                k3[row] = static_cast<float>(metrics::k3FromK1(logMu - logPi));
            }
        }
    }
}

} // namespace

void fusedMismatch(const void* engineLogits, const void* trainerLogits, InputType type, std::int64_t rows,
    std::int64_t vocab, const std::int64_t* sampled, float* kl, float* k1, float* k3)
{
    if (rows == 0) {
        return;
    }
    const unsigned grid = static_cast<unsigned>(rows);
    switch (type) {
    case InputType::BFloat16:
        fusedMismatchKernel<<<grid, kThreads>>>(static_cast<const __nv_bfloat16*>(engineLogits),
            static_cast<const __nv_bfloat16*>(trainerLogits), vocab, sampled, kl, k1, k3);
        break;
    case InputType::Float16:
        fusedMismatchKernel<<<grid, kThreads>>>(static_cast<const __half*>(engineLogits),
            static_cast<const __half*>(trainerLogits), vocab, sampled, kl, k1, k3);
        break;
    default:
        fusedMismatchKernel<<<grid, kThreads>>>(static_cast<const float*>(engineLogits),
            static_cast<const float*>(trainerLogits), vocab, sampled, kl, k1, k3);
        break;
    }
    MISMATCH_CUDA_CHECK(cudaGetLastError());
}

} // namespace mismatch::cuda::kernels
