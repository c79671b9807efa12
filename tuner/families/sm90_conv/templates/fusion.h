// The tuner's epilogue operands into a CUTLASS 3.x epilogue's arguments (sm90_conv, sm90_gemm and
// sm90_s2d). A bare kernel's LinearCombination takes alpha and beta only; a fused kernel's
// PerColLinCombPerColBiasEltAct (epilogue/fusion/operations.hpp) takes the scale as a per-column
// (per output channel) alpha vector, a bias vector, and beta for the source tensor C: the residual.
// ElementSource is void unless the kernel was built to read a residual.
template <class Thread, class = void> struct TunerFusesVectors : std::false_type {};
template <class Thread>
struct TunerFusesVectors<Thread, std::void_t<decltype(std::declval<Thread &>().bias_ptr)>> : std::true_type {};

template <class ElementSource, class Thread>
cutlass::Status tuner_fill_epilogue(Thread &thread, const TunerEpilogue &e) {
  constexpr bool kReadsResidual = !std::is_void_v<ElementSource>;
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
