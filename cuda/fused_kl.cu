// Fused full-vocabulary mismatch: KL(mu || pi), k1 and k3 per row from the engine's and the trainer's logits in
// one pass over each row (online log-sum-exp, core/metrics/online_kl_state.h), without writing any
// log-softmax. One block per row; thread i takes v = i, i + blockDim, ... (coalesced), then the block merges
// the partials pairwise (warp shuffles, then shared memory). Memory traffic: both rows read once.
#include "core/metrics/online_kl_state.h"
#include "cuda/check.h"
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

template <typename T>
__global__ void __launch_bounds__(kThreads) fusedMismatchKernel(const T* engine, const T* trainer,
    std::int64_t vocab, const std::int64_t* sampled, float* kl, float* k1, float* k3)
{
    __shared__ metrics::OnlineKlState warpStates[kThreads / 32];
    const std::int64_t row = blockIdx.x;
    const T* a = engine + row * vocab;
    const T* b = trainer + row * vocab;
    metrics::OnlineKlState state;
    std::int64_t v = threadIdx.x;
    // Two elements in flight per iteration: both loads are issued before the first update.
    for (; v + kThreads < vocab; v += 2 * kThreads) {
        const float a0 = toFloat(a[v]);
        const float b0 = toFloat(b[v]);
        const float a1 = toFloat(a[v + kThreads]);
        const float b1 = toFloat(b[v + kThreads]);
        metrics::onlineKlAdd(state, a0, b0);
        metrics::onlineKlAdd(state, a1, b1);
    }
    if (v < vocab) {
        metrics::onlineKlAdd(state, toFloat(a[v]), toFloat(b[v]));
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
            kl[row] = metrics::onlineKl(state);
            const std::int64_t token = sampled[row];
            if (token < 0 || token >= vocab) {
                k1[row] = NAN;
                k3[row] = NAN;
            } else {
                const float logMu = toFloat(a[token]) - metrics::onlineLogSumExpA(state);
                const float logPi = toFloat(b[token]) - metrics::onlineLogSumExpB(state);
                k1[row] = logMu - logPi;
                k3[row] = metrics::k3FromK1(logMu - logPi);
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
