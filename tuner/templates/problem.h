// The problem array the tuner hands every kernel (tuner/run.py writes it): int32[kTunerProblemFields] =
// {N, H, W, C, K, R, S, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups, split_k, P, Q,
//  raster, swizzle, reserved}. Padding is per side (top = bottom = pad_h, left = right = pad_w).
// Tensors are NHWC (filters KRSC); C is the kernel's channel count (zero-padded where needed).
constexpr int kTunerProblemFields = 20;

struct TunerProblem {
  int n, h, w, c, k, r, s, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, groups, split_k, p, q, raster,
      swizzle;
  explicit TunerProblem(const int32_t *a)
      : n(a[0]), h(a[1]), w(a[2]), c(a[3]), k(a[4]), r(a[5]), s(a[6]), pad_h(a[7]), pad_w(a[8]), stride_h(a[9]),
        stride_w(a[10]), dilation_h(a[11]), dilation_w(a[12]), groups(a[13]), split_k(a[14]), p(a[15]), q(a[16]),
        raster(a[17]), swizzle(a[18]) {}

  void to_array(int32_t out[kTunerProblemFields]) const {
    const int32_t values[kTunerProblemFields] = {n, h, w, c, k, r, s, pad_h, pad_w, stride_h, stride_w, dilation_h,
                                                 dilation_w, groups, split_k, p, q, raster, swizzle, 0};
    for (int i = 0; i < kTunerProblemFields; ++i) out[i] = values[i];
  }
};

// The epilogue's operands (tuner/run.py fills them; tuner/epilogue.py says what they mean):
// y = act(scale[k] * conv + bias[k] + beta * residual). scale and bias are f32[K]; the residual has the
// output's type and shape (NHWC). Each is null where the layer has none. Which parts and which
// activation a kernel applies is compiled into it: a kernel refuses operands it was not built for.
struct TunerEpilogue {
  const float *scale;
  const float *bias;
  const void *residual;
  float beta;
};
