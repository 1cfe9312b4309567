#pragma once
// MISMATCH_VECTOR_CLONES before a function compiles it twice, for AVX2 and for the baseline, and picks the one the
// CPU runs at load time: for element loops on the engine's hot path (conversions, gathers), which vectorize far
// better with AVX2. The arithmetic is the same in both clones.
#if defined(__x86_64__) && defined(__GNUC__)
#define MISMATCH_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define MISMATCH_VECTOR_CLONES
#endif
