// The problem array the tuner hands every kernel (tuner/run.py writes it): int32[16] =
// {N, H, W, C, K, R, S, pad, stride, dilation, split_k, P, Q, raster, swizzle, reserved}.
// Tensors are NHWC (filters KRSC); C is the kernel's channel count (zero-padded where needed).
struct TunerProblem {
  int n, h, w, c, k, r, s, pad, stride, dilation, split_k, p, q, raster, swizzle;
  explicit TunerProblem(const int32_t *a)
      : n(a[0]), h(a[1]), w(a[2]), c(a[3]), k(a[4]), r(a[5]), s(a[6]), pad(a[7]), stride(a[8]),
        dilation(a[9]), split_k(a[10]), p(a[11]), q(a[12]), raster(a[13]), swizzle(a[14]) {}
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
