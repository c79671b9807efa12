// A candidate that speaks the tuner's C ABI but whose kernel misbehaves, for the GPU tests of
// fault survival. Build with -DMISBEHAVIOUR=1 (illegal address) or 2 (never returns) and
// -DTUNER_ABI=<tuner.run.ABI_VERSION>, so that it speaks the ABI of the tuner that loads it.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void misbehave(int *target) {
#if MISBEHAVIOUR == 1
  target[threadIdx.x] = 1;  // target is an address nothing allocated
#else
  while (true) { __nanosleep(1000); }
#endif
}

extern "C" {
int32_t tuner_abi_version() { return TUNER_ABI; }
int32_t tuner_kernel_count() { return 1; }
int32_t tuner_k0_can_implement(const int32_t *) { return 0; }
int64_t tuner_k0_workspace_bytes(const int32_t *) { return 0; }
void tuner_k0_grid(const int32_t *, int32_t *grid) { for (int i = 0; i < 6; ++i) grid[i] = 1; }
int32_t tuner_k0_kernel_attributes(int32_t *attrs) {
  cudaFuncAttributes attributes;
  cudaError_t error = cudaFuncGetAttributes(&attributes, misbehave);
  if (error != cudaSuccess) return error;
  attrs[0] = attributes.numRegs; attrs[1] = 0; attrs[2] = 0; attrs[3] = 0; attrs[4] = 32; attrs[5] = 1;
  return 0;
}
void *tuner_k0_create(const int32_t *, void *, void *, void *, const void *, void *, void *, int32_t *status) {
  *status = 0;
  return reinterpret_cast<void *>(0x1);
}
int32_t tuner_k0_launch(void *, void *stream) {
  misbehave<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>(reinterpret_cast<int *>(0x10));
  return cudaGetLastError() == cudaSuccess ? 0 : 7;
}
void tuner_k0_destroy(void *) {}
}
