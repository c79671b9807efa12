// The tuner's epilogue operands into a CUTLASS 3.x epilogue's arguments (sm90_conv, sm90_gemm and
// sm90_s2d). A bare kernel's LinearCombination takes alpha and beta only; a fused kernel's
// PerColLinCombPerColBiasEltAct (epilogue/fusion/operations.hpp) takes the scale as a per-column
// (per output channel) alpha vector, a bias vector, and beta for the source tensor C: the residual.
// ElementSource is void unless the kernel was built to read a residual.
template <class Thread, class = void> struct TunerFusesVectors : std::false_type {};
template <class Thread>
struct TunerFusesVectors<Thread, std::void_t<decltype(std::declval<Thread &>().bias_ptr)>> : std::true_type {};

template <class Thread, class = void> struct TunerPrefetchesResidual : std::false_type {};
template <class Thread>
struct TunerPrefetchesResidual<Thread, std::void_t<decltype(std::declval<Thread &>().residual_prefetch)>>
    : std::true_type {};

// A residual is prefetched into L2 whole at kernel start (prefetch_fusion.h) when it takes at most a
// quarter of L2: then it is still there when the epilogue reads it, and the mainloop's operands keep room.
inline bool tuner_residual_fits_l2(int64_t bytes) {
  int device = 0, l2_bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return bytes > 0 && bytes <= int64_t(l2_bytes) / 4;
}

template <class ElementSource>
int64_t tuner_residual_bytes(const TunerProblem &p) {
  if constexpr (std::is_void_v<ElementSource>) {
    return 0;
  } else {
    return int64_t(p.n) * p.p * p.q * p.k * int64_t(sizeof(ElementSource));
  }
}

// residual_bytes: the residual's size (the output's), which decides the prefetch.
template <class ElementSource, class Thread>
cutlass::Status tuner_fill_epilogue(Thread &thread, const TunerEpilogue &e, int64_t residual_bytes = 0) {
  constexpr bool kReadsResidual = !std::is_void_v<ElementSource>;
  if constexpr (TunerPrefetchesResidual<Thread>::value) {
    const bool prefetch = kReadsResidual && e.residual != nullptr && tuner_residual_fits_l2(residual_bytes);
    thread.residual_prefetch = prefetch ? e.residual : nullptr;
    thread.residual_prefetch_bytes = prefetch ? residual_bytes : 0;
  }
  thread.alpha = 1.0f;
  thread.beta = kReadsResidual ? e.beta : 0.0f;
  if constexpr (TunerFusesVectors<Thread>::value) {
    thread.alpha_ptr = e.scale;  // null: alpha 1
    thread.beta_ptr = nullptr;
    thread.bias_ptr = e.bias;    // null: no bias
  } else if (e.scale || e.bias) {
    return cutlass::Status::kErrorNotSupported;
  }
  return cutlass::Status::kSuccess;
}

// Where the tuner hands real buffers: a residual exactly when the kernel reads one (an unused or a
// missing one would be a silent wrong answer).
template <class ElementSource>
bool tuner_residual_matches(const TunerEpilogue &e) {
  return std::is_void_v<ElementSource> == (e.residual == nullptr);
}
