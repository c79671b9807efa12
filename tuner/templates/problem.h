// The problem array the tuner hands every kernel (tuner/run.py writes it): int32[16] =
// {N, H, W, C, K, R, S, pad, stride, dilation, split_k, P, Q, raster, swizzle, reserved}.
// Tensors are NHWC (filters KRSC); C is the kernel's channel count (zero-padded where needed).
struct TunerProblem {
  int n, h, w, c, k, r, s, pad, stride, dilation, split_k, p, q, raster, swizzle;
  explicit TunerProblem(const int32_t *a)
      : n(a[0]), h(a[1]), w(a[2]), c(a[3]), k(a[4]), r(a[5]), s(a[6]), pad(a[7]), stride(a[8]),
        dilation(a[9]), split_k(a[10]), p(a[11]), q(a[12]), raster(a[13]), swizzle(a[14]) {}
};
