// cuBLASLt GEMMs: FP8 e4m3 with scalar or outer-vector scales and BF16 output, FP8 without scales and float32
// output (for the scale epilogue), and the BF16 baseline. Row-major D[M, N] = A[M, K] B[N, K]^T is computed as
// the column-major D^T[N, M] = op(B) A with cuBLASLt's A := our B transposed (ld K) and its B := our A (ld K):
// the "TN" layout that Hopper's FP8 kernels require. FP32 accumulation; FP8 fast accumulation left off.
#include "cuda/check.h"
#include "cuda/kernels.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <map>
#include <mutex>
#include <tuple>

namespace mismatch::cuda::kernels {

namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;
constexpr int kMaxDevices = 64;

struct LtContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
};

std::mutex& contextMutex()
{
    static std::mutex mutex;
    return mutex;
}

LtContext& context()
{
    static LtContext contexts[kMaxDevices];
    const int device = currentDevice();
    std::lock_guard<std::mutex> lock(contextMutex());
    LtContext& c = contexts[device % kMaxDevices];
    if (c.handle == nullptr) {
        const cublasStatus_t status = cublasLtCreate(&c.handle);
        if (status != CUBLAS_STATUS_SUCCESS) {
            throw CudaError("cublasLtCreate failed with status " + std::to_string(static_cast<int>(status)));
        }
        MISMATCH_CUDA_CHECK(cudaMalloc(&c.workspace, kWorkspaceBytes));
    }
    return c;
}

// Owns the descriptors of one call.
struct LtCall {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr;
    cublasLtMatrixLayout_t b = nullptr;
    cublasLtMatrixLayout_t d = nullptr;
    cublasLtMatmulPreference_t preference = nullptr;
    ~LtCall()
    {
        if (preference) cublasLtMatmulPreferenceDestroy(preference);
        if (d) cublasLtMatrixLayoutDestroy(d);
        if (b) cublasLtMatrixLayoutDestroy(b);
        if (a) cublasLtMatrixLayoutDestroy(a);
        if (desc) cublasLtMatmulDescDestroy(desc);
    }
};

#define MISMATCH_LT_STRING2(x) #x
#define MISMATCH_LT_STRING(x) MISMATCH_LT_STRING2(x)
// Every cuBLASLt call of a GEMM: a failure returns its status with the call, file and line (the caller decides
// between a fallback and an error).
#define MISMATCH_LT_TRY(call)                                                                                       \
    do {                                                                                                            \
        const cublasStatus_t mismatchLtStatus_ = (call);                                                            \
        if (mismatchLtStatus_ != CUBLAS_STATUS_SUCCESS) {                                                           \
            return LtStatus {false, static_cast<int>(mismatchLtStatus_),                                            \
                #call " at " __FILE__ ":" MISMATCH_LT_STRING(__LINE__)};                                            \
        }                                                                                                           \
    } while (0)

// Algorithm cache: the heuristic query costs more than a small decode GEMM.
using AlgoKey = std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, int, bool>;
std::map<AlgoKey, cublasLtMatmulHeuristicResult_t>& algoCache()
{
    static std::map<AlgoKey, cublasLtMatmulHeuristicResult_t> cache;
    return cache;
}

enum class Kind { Fp8Bf16Out, Fp8FloatOut, Bf16 };

LtStatus runLt(Kind kind, const void* a, const void* b, std::int64_t m, std::int64_t n, std::int64_t k,
    const float* aScales, const float* bScales, ScaleMode mode, const void* bias, void* out)
{
    LtContext& ctx = context();
    LtCall call;
    const cudaDataType_t inputType = kind == Kind::Bf16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    const cudaDataType_t outputType = kind == Kind::Fp8FloatOut ? CUDA_R_32F : CUDA_R_16BF;
    MISMATCH_LT_TRY(cublasLtMatmulDescCreate(&call.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t transposed = CUBLAS_OP_T;
    const cublasOperation_t plain = CUBLAS_OP_N;
    MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof transposed));
    MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof plain));
    if (kind == Kind::Fp8Bf16Out) {
        // cuBLASLt's A is our B (weights): its scales are ours for B, and vice versa.
        MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &bScales, sizeof bScales));
        MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &aScales, sizeof aScales));
        if (mode == ScaleMode::OuterVector) {
            const std::int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
            MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof outer));
            MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof outer));
        }
    }
    if (bias != nullptr) {
        const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const std::int32_t biasType = CUDA_R_16BF;
        MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
        MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        MISMATCH_LT_TRY(cublasLtMatmulDescSetAttribute(call.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &biasType, sizeof biasType));
    }
    MISMATCH_LT_TRY(cublasLtMatrixLayoutCreate(&call.a, inputType, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), k));
    MISMATCH_LT_TRY(cublasLtMatrixLayoutCreate(&call.b, inputType, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(m), k));
    MISMATCH_LT_TRY(cublasLtMatrixLayoutCreate(&call.d, outputType, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(m), n));

    const AlgoKey key {static_cast<int>(kind), static_cast<int>(mode), m, n, k, currentDevice(), bias != nullptr};
    cublasLtMatmulHeuristicResult_t heuristic {};
    bool cached = false;
    {
        std::lock_guard<std::mutex> lock(contextMutex());
        const auto found = algoCache().find(key);
        if (found != algoCache().end()) {
            heuristic = found->second;
            cached = true;
        }
    }
    if (!cached) {
        MISMATCH_LT_TRY(cublasLtMatmulPreferenceCreate(&call.preference));
        const std::size_t workspace = kWorkspaceBytes;
        MISMATCH_LT_TRY(cublasLtMatmulPreferenceSetAttribute(
            call.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
        int found = 0;
        MISMATCH_LT_TRY(cublasLtMatmulAlgoGetHeuristic(
            ctx.handle, call.desc, call.a, call.b, call.d, call.d, call.preference, 1, &heuristic, &found));
        if (found == 0) {
            return LtStatus {false, 0, "cublasLtMatmulAlgoGetHeuristic found no algorithm"};
        }
        std::lock_guard<std::mutex> lock(contextMutex());
        algoCache()[key] = heuristic;
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    MISMATCH_LT_TRY(cublasLtMatmul(ctx.handle, call.desc, &alpha, b, call.a, a, call.b, &beta, out, call.d, out, call.d,
        &heuristic.algo, ctx.workspace, kWorkspaceBytes, 0));
    return LtStatus {true, 0, ""};
}

} // namespace

LtStatus fp8GemmLt(const std::uint8_t* a, const std::uint8_t* b, std::int64_t m, std::int64_t n, std::int64_t k,
    const float* aScales, const float* bScales, ScaleMode mode, const std::uint16_t* bias, std::uint16_t* out)
{
    return runLt(Kind::Fp8Bf16Out, a, b, m, n, k, aScales, bScales, mode, bias, out);
}

LtStatus fp8GemmLtFloatOut(
    const std::uint8_t* a, const std::uint8_t* b, std::int64_t m, std::int64_t n, std::int64_t k, float* out)
{
    return runLt(Kind::Fp8FloatOut, a, b, m, n, k, nullptr, nullptr, ScaleMode::Scalar, nullptr, out);
}

LtStatus bf16GemmLt(const std::uint16_t* a, const std::uint16_t* b, std::int64_t m, std::int64_t n, std::int64_t k,
    const std::uint16_t* bias, std::uint16_t* out)
{
    return runLt(Kind::Bf16, a, b, m, n, k, nullptr, nullptr, ScaleMode::Scalar, bias, out);
}

} // namespace mismatch::cuda::kernels
