// Binds a CUTLASS 2.x direct depthwise convolution (the sm80_depthwise family: templates/direct_conv_fused.h) to
// the tuner's problem array. The filter size, stride and dilation are compiled in; the problem's split_k is the
// number of CTAs that share one channel slice's output tiles. The workspace holds the filter reordered from KRS1
// to RSK, which the kernel reads: each run reorders it again (CUTLASS's ReorderKernel), so that a filter changed
// between launches is never read stale.
template <typename Conv>
class Sm80DepthwiseRunner {
 public:
  using ElementA = typename Conv::ElementA;
  using ElementB = typename Conv::ElementB;
  using ElementC = typename Conv::ElementC;
  using Kernel = typename Conv::UnderlyingKernel;
  using OutputOp = typename Conv::EpilogueOutputOp;
  using FilterShape = typename Kernel::Mma::IteratorB::Shape;  // MatrixShape<channels a CTA, R * S>
  using Stride = typename Kernel::Mma::IteratorA::StrideShape;
  using Dilation = typename Kernel::Mma::IteratorA::DilationShape;

  static cutlass::Status can_implement(const TunerProblem &p) {
    if (p.groups != p.c || p.k != p.c || p.r * p.s != FilterShape::kColumn || !built_for(p)) {
      return cutlass::Status::kErrorNotSupported;
    }
    return Conv::can_implement(arguments(p, nullptr, nullptr, nullptr, TunerEpilogue{}, nullptr));
  }

  static size_t workspace_bytes(const TunerProblem &p) { return size_t(p.k) * p.r * p.s * sizeof(ElementB); }

  // grid[6] = {grid x, y, z in blocks, cluster x, y, z}: channel slices along y, their CTAs along z.
  static void grid(const TunerProblem &p, int32_t *grid) {
    typename Kernel::ThreadblockSwizzle swizzle;
    dim3 launch = swizzle.get_grid_shape(swizzle.get_tiled_shape(
        Kernel::kConvolutionalOperator, problem_size(p),
        {Conv::ThreadblockShape::kM, Conv::ThreadblockShape::kN, Conv::ThreadblockShape::kK}, p.split_k));
    grid[0] = launch.x; grid[1] = launch.y; grid[2] = launch.z;
    grid[3] = 1; grid[4] = 1; grid[5] = 1;
  }

  // attrs[6] = {registers per thread, static smem, dynamic smem, local bytes per thread,
  //             threads per block, max active blocks per SM}. The shared memory is the kernel's for any problem
  // it was built for (its input window and filter are compile-time shapes): here one of 16x16 pixels.
  static cudaError_t attributes(int32_t *attrs) {
    int smem = int(typename Kernel::Params(
        arguments(nominal_problem(), nullptr, nullptr, nullptr, TunerEpilogue{}, nullptr)).get_smem_size());
    cudaError_t error = cudaFuncSetAttribute(cutlass::Kernel<Kernel>,
        cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (error != cudaSuccess) return error;
    cudaFuncAttributes attributes;
    error = cudaFuncGetAttributes(&attributes, cutlass::Kernel<Kernel>);
    if (error != cudaSuccess) return error;
    int blocks = 0;
    error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, cutlass::Kernel<Kernel>, Kernel::kThreadCount, smem);
    if (error != cudaSuccess) return error;
    attrs[0] = attributes.numRegs;
    attrs[1] = int32_t(attributes.sharedSizeBytes);
    attrs[2] = smem;
    attrs[3] = int32_t(attributes.localSizeBytes);
    attrs[4] = Kernel::kThreadCount;
    attrs[5] = blocks;
    return cudaSuccess;
  }

  // No residual (the epilogue reads none); a scale or a bias only where the kernel was built with it.
  cutlass::Status initialize(const TunerProblem &p, void *x, void *w, void *y, const TunerEpilogue &epilogue,
                             void *workspace, cudaStream_t stream) {
    if (epilogue.residual || (epilogue.scale && !OutputOp::kScale) || (epilogue.bias && !OutputOp::kBias)) {
      return cutlass::Status::kErrorNotSupported;
    }
    if (!workspace) return cutlass::Status::kErrorWorkspaceNull;
    return op_.initialize(arguments(p, x, w, y, epilogue, workspace), workspace, stream);
  }

  cutlass::Status run(cudaStream_t stream) { return op_.run(stream); }

 private:
  static bool built_for(const TunerProblem &p) {
    return p.stride_h == Stride::kRow && p.stride_w == Stride::kColumn && p.dilation_h == Dilation::kRow &&
           p.dilation_w == Dilation::kColumn;
  }

  // A problem of the kernel's stride and dilation, 16x16 pixels of one channel slice: the shared memory of its
  // Params is every such problem's.
  static TunerProblem nominal_problem() {
    constexpr int kChannels = Conv::ThreadblockShape::kN, kSize = 16;
    const int32_t fields[kTunerProblemFields] = {
        1, kSize, kSize, kChannels, kChannels, 1, 1, 0, 0, Stride::kRow, Stride::kColumn, Dilation::kRow,
        Dilation::kColumn, kChannels, 1, (kSize - 1) / Stride::kRow + 1, (kSize - 1) / Stride::kColumn + 1, 0, 1, 0};
    return TunerProblem(fields);
  }

  static cutlass::conv::Conv2dProblemSize problem_size(const TunerProblem &p) {
    return cutlass::conv::Conv2dProblemSize(
        p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.p, p.q, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
        p.dilation_w, cutlass::conv::Mode::kCrossCorrelation, p.split_k, p.groups);
  }

  static typename Conv::Arguments arguments(const TunerProblem &p, void *x, void *w, void *y,
                                            const TunerEpilogue &epilogue, void *workspace) {
    using Layout = cutlass::layout::TensorNHWC;
    Layout layout_y = Layout::packed({p.n, p.p, p.q, p.k});
    typename OutputOp::Params output{epilogue.scale, epilogue.bias, p.k};
    return typename Conv::Arguments(
        problem_size(p),
        {static_cast<ElementA *>(x), Layout::packed({p.n, p.h, p.w, p.c})},
        {static_cast<ElementB *>(w), Layout::packed({p.k, p.r, p.s, 1})},
        {nullptr, layout_y},
        {static_cast<ElementC *>(y), layout_y},
        output,
        {static_cast<ElementB *>(workspace), Layout::packed({p.k, p.r, p.s, 1})});
  }

  Conv op_;
};
