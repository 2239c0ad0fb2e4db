#pragma once
// GRIDTRAIN_FLOAT_LOOP marks a loop over a chunk's floats, run over the whole model every round.
//
// Each such loop is a function that is not inlined and takes __restrict parameters, so that it vectorizes (GCC drops
// __restrict on local pointers and when it inlines, and would then leave the loop scalar or guard it with aliasing
// checks). Where GCC builds for x86-64 without a sanitizer, each is built twice, for AVX2 and for any x86-64, and the
// loader picks one by the CPU (an ifunc; such a function is never inlined): one binary runs everywhere, with twice
// the floats per instruction where AVX2 is. Not with FMA: a fused multiply-add rounds once where the plain code
// rounds twice, and replicas on different CPUs, like a chunk folded and one reduced over a snapshot, must compute
// the same floats. (Clang does not clone templates; the fuzz build uses it, and the sanitizers' runtimes are not set
// up when an ifunc is resolved.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define GRIDTRAIN_FLOAT_LOOP [[gnu::target_clones("avx2", "default")]]
#else
#define GRIDTRAIN_FLOAT_LOOP [[gnu::noinline]]
#endif
