// Binds a CUTLASS 2.x dgrad ImplicitGemmConvolution (the sm80_dgrad family) to the tuner's problem array as a
// transposed convolution: the array's N, H, W, C are its input x, K and P, Q its output y[N,P,Q,K], w is
// [C,R,S,K]. CUTLASS's dgrad problem is the convolution y -> x: Conv2dProblemSize(N, H=P, W=Q, C=K, K=C, R, S,
// P=H, Q=W, the same pad, stride and dilation), A = x as its dy, B = w as its KRSC filter, D = y as its dx.
// Its launch attributes are those of any 2.x kernel (Sm80Runner's).
template <typename Conv>
class Sm80DgradRunner {
 public:
  using ElementA = typename Conv::ElementA;
  using ElementB = typename Conv::ElementB;
  using ElementC = typename Conv::ElementC;
  using Kernel = typename Conv::UnderlyingKernel;
  static_assert(Kernel::kConvolutionalOperator == cutlass::conv::Operator::kDgrad, "a dgrad kernel");

  static cutlass::Status can_implement(const TunerProblem &p) {
    if (p.groups != 1) return cutlass::Status::kErrorNotSupported;
    // The array must describe a transposed convolution: the convolution y -> x maps P, Q back onto H, W.
    // (CUTLASS takes H and P independently, so it cannot tell an fprop problem handed to it.)
    if (conv_extent(p.p, p.r, p.pad_h, p.stride_h, p.dilation_h) != p.h ||
        conv_extent(p.q, p.s, p.pad_w, p.stride_w, p.dilation_w) != p.w) {
      return cutlass::Status::kErrorInvalidProblem;
    }
    return Conv::can_implement(arguments(p, nullptr, nullptr, nullptr));
  }

  static size_t workspace_bytes(const TunerProblem &p) {
    return Conv::get_workspace_size(arguments(p, nullptr, nullptr, nullptr));
  }

  // grid[6] = {grid x, y, z in blocks, cluster x, y, z}: no clusters before sm90.
  static void grid(const TunerProblem &p, int32_t *grid) {
    auto size = problem_size(p);
    typename Kernel::ThreadblockSwizzle swizzle;
    cutlass::gemm::GemmCoord tiled = swizzle.get_tiled_shape(
        Kernel::kConvolutionalOperator, size,
        {Conv::ThreadblockShape::kM, Conv::ThreadblockShape::kN, Conv::ThreadblockShape::kK},
        size.split_k_slices);
    dim3 launch = swizzle.get_grid_shape(tiled);
    grid[0] = launch.x; grid[1] = launch.y; grid[2] = launch.z;
    grid[3] = 1; grid[4] = 1; grid[5] = 1;
  }

  static cudaError_t attributes(int32_t *attrs) { return Sm80Runner<Conv>::attributes(attrs); }

  // A bare kernel: it takes no epilogue operands.
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if (epilogue.scale || epilogue.bias || epilogue.residual) return cutlass::Status::kErrorNotSupported;
    return op_.initialize(arguments(p, x, w, y), workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) { return op_.run(stream); }

 private:
  static int conv_extent(int size, int taps, int pad, int stride, int dilation) {
    return (size + 2 * pad - dilation * (taps - 1) - 1) / stride + 1;
  }

  static cutlass::conv::Conv2dProblemSize problem_size(const TunerProblem &p) {
    return cutlass::conv::Conv2dProblemSize(
        p.n, p.p, p.q, p.k, p.c, p.r, p.s, p.h, p.w, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
        p.dilation_w, cutlass::conv::Mode::kCrossCorrelation, p.split_k, 1);
  }

  static typename Conv::Arguments arguments(const TunerProblem &p, void *x, void *w, void *y) {
    using Layout = cutlass::layout::TensorNHWC;
    using Compute = typename Conv::EpilogueOutputOp::ElementCompute;
    Layout layout_x = Layout::packed({p.n, p.h, p.w, p.c});
    Layout layout_w = Layout::packed({p.c, p.r, p.s, p.k});
    Layout layout_y = Layout::packed({p.n, p.p, p.q, p.k});
    // beta = 0 and C aliases D: serial split-K partitions after the first read D back themselves.
    return typename Conv::Arguments(
        problem_size(p),
        {static_cast<ElementA *>(x), layout_x},
        {static_cast<ElementB *>(w), layout_w},
        {static_cast<ElementC *>(y), layout_y},
        {static_cast<ElementC *>(y), layout_y},
        {Compute(1), Compute(0)},
        cutlass::conv::SplitKMode::kSerial);
  }

  Conv op_;
};
