// The sm80_depthwise family's kernel: CUTLASS 2.x's direct depthwise convolution (conv/kernel/
// default_depthwise_fprop.h, DefaultDepthwiseDirect2dConvFprop with the fixed stride-and-dilation iterator) with
// an epilogue that knows each output vector's channel, so that it applies y = act(scale[c] * acc + bias[c]).
// CUTLASS's own epilogue for it (epilogue/threadblock/epilogue_depthwise.h) hands its output functor the
// accumulators alone: a LinearCombination's scalar alpha and beta, no per-channel vector. ChannelEpilogue is
// EpilogueDepthwise's path (accumulators through shared memory, then one store) with the channel passed on.
namespace sm80_depthwise {

// y = act(scale[c] * acc + bias[c]) for one vector of kCount channels from `channel` on. A null scale reads as
// 1 and a null bias as 0; channels at or past `channels` (a masked vector) read neither.
template <typename ElementOutput_, int Count, typename ElementAccumulator_, bool kScale_, bool kBias_,
          template <class> class Act>
struct ChannelAffine {
  using ElementOutput = ElementOutput_;
  using ElementAccumulator = ElementAccumulator_;
  using ElementCompute = float;
  static int const kCount = Count;
  static bool const kScale = kScale_;
  static bool const kBias = kBias_;
  using FragmentOutput = cutlass::Array<ElementOutput, kCount>;
  using FragmentAccumulator = cutlass::Array<ElementAccumulator, kCount>;
  using FragmentCompute = cutlass::Array<ElementCompute, kCount>;

  struct Params {
    float const *scale = nullptr;
    float const *bias = nullptr;
    int channels = 0;
  };

  Params params;

  CUTLASS_HOST_DEVICE ChannelAffine(Params const &params) : params(params) {}
  CUTLASS_HOST_DEVICE bool is_source_needed() const { return false; }

  CUTLASS_DEVICE FragmentOutput operator()(FragmentAccumulator const &accumulators, int channel) const {
    FragmentCompute value;
    bool inside = channel < params.channels;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kCount; ++i) {
      float v = float(accumulators[i]);
      if constexpr (kScale) v *= (inside && params.scale) ? params.scale[channel + i] : 1.0f;
      if constexpr (kBias) v += (inside && params.bias) ? params.bias[channel + i] : 0.0f;
      value[i] = v;
    }
    Act<FragmentCompute> activation;
    cutlass::NumericArrayConverter<ElementOutput, ElementCompute, kCount> convert;
    return convert(activation(value));
  }
};

// EpilogueDepthwise's iterators and shared storage (from its Default), its output functor called per vector with
// the vector's first channel: the output iterator's column, as PredicatedTileIteratorDirectConv stores it.
template <typename Default>
class ChannelEpilogue {
 public:
  using OutputOp = typename Default::OutputOp;
  using OutputTileIterator = typename Default::OutputTileIterator;
  using WarpTileIterator = typename Default::WarpTileIterator;
  using SharedLoadIterator = typename Default::SharedLoadIterator;
  using AccumulatorTile = typename Default::AccumulatorFragmentIterator::AccumulatorTile;
  using SharedStorage = typename Default::Epilogue::SharedStorage;
  using ThreadMap = typename OutputTileIterator::ThreadMap;
  static int const kElementsPerAccess = OutputTileIterator::kElementsPerAccess;
  using AccumulatorAccess = cutlass::Array<typename WarpTileIterator::Element, kElementsPerAccess>;
  using OutputAccess = cutlass::Array<typename OutputTileIterator::Element, kElementsPerAccess>;

  CUTLASS_DEVICE
  ChannelEpilogue(SharedStorage &shared_storage, int thread_idx, int warp_idx, int lane_idx)
      : shared_load_iterator_(shared_storage.reference(), thread_idx),
        warp_tile_iterator_(shared_storage.reference(), thread_idx, lane_idx) {}

  CUTLASS_DEVICE
  void operator()(OutputOp const &output_op, OutputTileIterator destination_iterator,
                  AccumulatorTile const &accumulators, OutputTileIterator, const int smem_base_offset) {
    warp_tile_iterator_.set_smem_base_address(smem_base_offset);
    shared_load_iterator_.set_smem_base_address(smem_base_offset);
    warp_tile_iterator_.store(accumulators);
    __syncthreads();
    typename SharedLoadIterator::Fragment aligned_accumulators;
    shared_load_iterator_.load(aligned_accumulators);
    // The next tile's cp.async (DepthwiseFpropDirectConvMultipleStage, at its first warp_mma_k) writes into the
    // stage this epilogue just read (smem_base_offset is the stage of `iterations % kStages`), and the main loop
    // has no barrier before it: without this one a fast warp overwrites what a slow warp has yet to load. On an
    // H200 43 of 736 trials of the direct kernels were wrong (with this race among the causes), some only on a
    // second launch.
    __syncthreads();
    typename OutputTileIterator::Fragment output;
    auto *output_access = reinterpret_cast<OutputAccess *>(&output);
    auto const *accumulator_access = reinterpret_cast<AccumulatorAccess const *>(&aligned_accumulators);
    CUTLASS_PRAGMA_UNROLL
    for (int s = 0; s < ThreadMap::Iterations::kStrided; ++s) {
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < ThreadMap::Iterations::kContiguous; ++c) {
        int index = s * ThreadMap::Iterations::kContiguous + c;
        int channel = destination_iterator.thread_start_column() + c * ThreadMap::Delta::kContiguous;
        output_access[index] = output_op(accumulator_access[index], channel);
      }
    }
    destination_iterator.store(output);
  }

 private:
  SharedLoadIterator shared_load_iterator_;
  WarpTileIterator warp_tile_iterator_;
};

// DefaultDepthwiseDirect2dConvFprop's kFixedStrideDilation kernel, its epilogue a ChannelEpilogue.
template <typename Element, typename ElementAccumulator, typename ThreadblockShape, typename ThreadBlockOutputShape,
          typename FilterShape, typename WarpShape, typename OutputOp, int Stages, typename StrideShape,
          typename DilationShape>
struct DefaultDirectFprop {
  using Layout = cutlass::layout::TensorNHWC;
  using Swizzle = cutlass::conv::threadblock::DepthwiseDirect2dConvIdentityThreadblockSwizzle<
      1, ThreadBlockOutputShape::kN, ThreadBlockOutputShape::kH, ThreadBlockOutputShape::kW>;
  using Base = cutlass::conv::kernel::DefaultDepthwiseDirect2dConvFprop<
      Element, Layout, Element, Layout, Element, Layout, ElementAccumulator, cutlass::arch::OpClassSimt,
      cutlass::arch::Sm80, ThreadblockShape, ThreadBlockOutputShape, FilterShape, WarpShape,
      cutlass::gemm::GemmShape<1, 1, 1>, OutputOp, Swizzle, Stages, cutlass::arch::OpMultiplyAdd,
      cutlass::conv::IteratorAlgorithm::kFixedStrideDilation, cutlass::conv::StrideSupport::kFixed, StrideShape,
      DilationShape>;
  using Default = cutlass::epilogue::threadblock::DefaultDirectConvEpilogueSimt<
      ThreadblockShape, typename Base::WarpMmaSimtOp, OutputOp, OutputOp::kCount, typename Base::ThreadOutputShape,
      ThreadBlockOutputShape>;
  using Epilogue = ChannelEpilogue<Default>;
  using Mma = cutlass::conv::threadblock::DepthwiseFpropDirectConvMultipleStage<
      ThreadblockShape, typename Base::IteratorA, typename Base::SmemIteratorA, Base::CacheOpA,
      typename Base::IteratorB, typename Base::SmemIteratorB, Base::CacheOpB, typename Base::MmaPolicy, Stages,
      Epilogue, cutlass::conv::IteratorAlgorithm::kFixedStrideDilation>;
  using Kernel = cutlass::conv::kernel::DirectConvolution<Mma, Epilogue, Swizzle, cutlass::conv::Operator::kFprop,
                                                          cutlass::conv::Conv2dProblemSize,
                                                          cutlass::conv::GroupMode::kDepthwise,
                                                          ThreadBlockOutputShape>;
};

}  // namespace sm80_depthwise
