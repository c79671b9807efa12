"""What the tuned kernels are compared with, measured the tuner's way (CUDA-graph replay over
copies larger than 3x L2, median of the replays): cuDNN through PyTorch, and the device's own
matrix and copy ceilings. Runs inside the worker process; PyTorch is optional.

An e4m3 layer: PyTorch reaches no fp8 convolution of cuDNN's (CUDNN_FP8_ABSENT), so cuDNN and the PyTorch layer
are timed on its f16 twin (torch_problem) and say so; the GEMM of a 1x1 stride-1 one runs in fp8, cuBLASLt's
through torch._scaled_mm with the layer's two per-tensor scales."""
from __future__ import annotations

from dataclasses import replace

from tuner.measure.timing import launches_per_replay, rotation_copies, time_replays
from tuner.core.dtypes import DataType, dtype_fields
from tuner.core.problem import ConvProblem

CEILING_MATMUL_SIZE = 8192
CEILING_COPY_BYTES = 2 << 30
REPEATS = 20
CUDNN_FP8_ABSENT = "cuDNN's fp8 convolution is not reachable from PyTorch: the f16 convolution is timed in its place"
# cuBLASLt's fp8 GEMM (torch._scaled_mm) takes K and N (the conv's C and K) in multiples of 16
SCALED_MM_MULTIPLE = 16


def _graph_time_us(torch, step, launches: int, repeats: int = REPEATS) -> float:
    """Median device time of one `step(index)` over graph replays of `launches` steps (measure's loop)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for index in range(3):  # warm-up outside capture (cuDNN picks its algorithm here)
            step(index)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for index in range(launches):
            step(index)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed_ms(replay) -> float:
        start.record()
        replay()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    return time_replays(graph.replay, timed_ms, launches, copies=1, repeats=repeats).median_us


# the torch dtype, by its attribute name, that a problem's input type is timed in (tf32: f32 tensors read as TF32)
TORCH_DTYPE_NAMES = {DataType.f16: "float16", DataType.bf16: "bfloat16", DataType.tf32: "float32",
                     DataType.f32: "float32"}


def torch_dtype(torch, problem: ConvProblem):
    """The torch dtype of the problem's inputs; cuDNN's and cuBLAS's TF32 switches set to the problem's math
    (on for tf32 inputs: f32 tensors read as TF32, off otherwise)."""
    tf32 = problem.input_type is DataType.tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    return getattr(torch, TORCH_DTYPE_NAMES[problem.input_type])


def torch_problem(problem: ConvProblem) -> ConvProblem:
    """The problem cuDNN and the PyTorch layer are timed on: the problem, or an e4m3 one's f16 twin
    (CUDNN_FP8_ABSENT)."""
    return replace(problem, **dtype_fields("f16")) if problem.input_type is DataType.e4m3 else problem


def library_dtype(problem: ConvProblem) -> str | None:
    """The type cuDNN and the PyTorch layer are timed in where it is not the problem's (an e4m3 problem's f16,
    CUDNN_FP8_ABSENT), or None: what a table of their figures says of the layer."""
    twin = torch_problem(problem)
    return twin.input_type.value if twin != problem else None


def fp8_absence(problem: ConvProblem) -> dict:
    """What a cuDNN or PyTorch figure of the problem adds to say it is not of the problem's type: {} or, for e4m3,
    the type timed and why."""
    timed = library_dtype(problem)
    return {"timed_dtype": timed, "note": CUDNN_FP8_ABSENT} if timed else {}


def torch_weight_shape(problem: ConvProblem) -> tuple[int, int, int, int]:
    """The weight as torch holds it: Conv2d's K, C/groups, R, S; ConvTranspose2d's C, K, R, S."""
    if problem.transposed:
        return problem.c, problem.k, problem.r, problem.s
    return problem.k, problem.channels_per_group, problem.r, problem.s


def torch_conv(torch, problem: ConvProblem, x, w):
    """The problem's convolution in torch: conv2d, or conv_transpose2d (cuDNN's dgrad) for a transposed one."""
    functional = torch.nn.functional
    if problem.transposed:
        return functional.conv_transpose2d(x, w, stride=problem.strides, padding=problem.pads,
                                           output_padding=problem.output_paddings, dilation=problem.dilations)
    return functional.conv2d(x, w, stride=problem.strides, padding=problem.pads, dilation=problem.dilations,
                             groups=problem.groups)


def cudnn_fprop_us(problem: ConvProblem, l2_bytes: int) -> dict:
    """cuDNN's conv2d fprop for the problem (conv_transpose2d for a transposed one): NHWC (channels_last) in the
    problem's input type (f16, bf16, or f32 with TF32 math), f32 accumulation, cudnn.benchmark on. cuDNN writes
    the input's type whatever the problem's output type. An e4m3 problem's f16 twin (CUDNN_FP8_ABSENT)."""
    import torch

    absence, problem = fp8_absence(problem), torch_problem(problem)
    torch.backends.cudnn.benchmark = True
    dtype = torch_dtype(torch, problem)
    device = torch.device("cuda")
    x = torch.empty(problem.n, problem.c, problem.h, problem.w, device=device, dtype=dtype)
    x = x.uniform_(-1, 1).to(memory_format=torch.channels_last)
    w = torch.empty(*torch_weight_shape(problem), device=device, dtype=dtype)
    w = w.uniform_(-1, 1).to(memory_format=torch.channels_last)
    bytes_per_set = problem.bytes_moved
    free, _ = torch.cuda.mem_get_info()
    copies = rotation_copies(bytes_per_set, l2_bytes, free)
    inputs = [(x.clone(memory_format=torch.channels_last), w.clone(memory_format=torch.channels_last))
              for _ in range(copies)]
    outputs = [None] * copies

    def step(index: int) -> None:
        xi, wi = inputs[index % copies]
        outputs[index % copies] = torch_conv(torch, problem, xi, wi)

    us = _graph_time_us(torch, step, launches_per_replay(copies))
    return {"cudnn_us": us, "cudnn_version": torch.backends.cudnn.version(), "copies": copies, **absence}


def cublas_gemm_us(problem: ConvProblem, l2_bytes: int) -> dict:
    """cuBLAS (through torch.matmul) on the GEMM a 1x1, stride-1, unpadded conv is in NHWC:
    [N*H*W, C] x [C, K] -> [N*H*W, K], in and out in the problem's input type (cudnn_fprop_us's), f32
    accumulation. An e4m3 layer's in fp8: scaled_gemm_us."""
    import torch

    if problem.input_type is DataType.e4m3:
        return scaled_gemm_us(problem, l2_bytes)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    dtype = torch_dtype(torch, problem)
    m, n, k = problem.gemm_mnk
    device = torch.device("cuda")
    a = torch.empty(m, k, device=device, dtype=dtype).uniform_(-1, 1)
    b = torch.empty(n, k, device=device, dtype=dtype).uniform_(-1, 1)  # KRSC filters: C contiguous
    free, _ = torch.cuda.mem_get_info()
    copies = rotation_copies(problem.bytes_moved, l2_bytes, free)
    inputs = [(a.clone(), b.clone()) for _ in range(copies)]
    outputs = [torch.empty(m, n, device=device, dtype=dtype) for _ in range(copies)]

    def step(index: int) -> None:
        ai, bi = inputs[index % copies]
        torch.matmul(ai, bi.t(), out=outputs[index % copies])

    us = _graph_time_us(torch, step, launches_per_replay(copies))
    return {"cublas_us": us, "copies": copies}


def scaled_mm_problem(problem: ConvProblem) -> str | None:
    """Why torch._scaled_mm cannot run the e4m3 layer's GEMM, or None."""
    _, n, k = problem.gemm_mnk
    if n % SCALED_MM_MULTIPLE or k % SCALED_MM_MULTIPLE:
        return (f"torch._scaled_mm (cuBLASLt's fp8 GEMM) takes K and N in multiples of {SCALED_MM_MULTIPLE}: "
                f"this GEMM's are C={k} and K={n}")
    return None


def scaled_gemm(torch, a, b, input_scale, filter_scale, out) -> None:
    """out[M, N] (f16) = input_scale * filter_scale * a[M, K] @ b[N, K]^T of e4m3 a and b (b, the KRSC filter, read
    column-major, as cuBLASLt's fp8 GEMM takes its second operand); the scales are one-element f32 tensors on the
    device. Fast accumulation: the tensor cores' own, as the sm90_dsl kernel's e4m3 wgmma chain accumulates."""
    torch._scaled_mm(a, b.t(), scale_a=input_scale, scale_b=filter_scale, out_dtype=torch.float16,
                     use_fast_accum=True, out=out)


def scaled_gemm_us(problem: ConvProblem, l2_bytes: int) -> dict:
    """cuBLASLt's fp8 GEMM (torch._scaled_mm) on an e4m3 1x1 stride-1 layer's GEMM, e4m3 in, f16 out, with the
    two per-tensor scales; {"reason": ...} where it takes no such GEMM (scaled_mm_problem)."""
    import torch

    if (reason := scaled_mm_problem(problem)):
        return {"reason": reason}
    m, n, k = problem.gemm_mnk
    device = torch.device("cuda")
    a = torch.empty(m, k, device=device).uniform_(-1, 1).to(torch.float8_e4m3fn)
    b = torch.empty(n, k, device=device).uniform_(-1, 1).to(torch.float8_e4m3fn)
    input_scale, filter_scale = (torch.tensor(value, device=device) for value in (0.75, 1.5))
    free, _ = torch.cuda.mem_get_info()
    copies = rotation_copies(problem.bytes_moved, l2_bytes, free)
    inputs = [(a.clone(), b.clone()) for _ in range(copies)]
    outputs = [torch.empty(m, n, device=device, dtype=torch.float16) for _ in range(copies)]

    def step(index: int) -> None:
        ai, bi = inputs[index % copies]
        scaled_gemm(torch, ai, bi, input_scale, filter_scale, outputs[index % copies])

    us = _graph_time_us(torch, step, launches_per_replay(copies))
    return {"cublas_us": us, "copies": copies, "cublas_op": "torch._scaled_mm e4m3 -> f16"}


def ceilings() -> dict:
    """Measured f16 matrix-product rate (f32 accumulation) and device-to-device copy bandwidth."""
    import torch

    n = CEILING_MATMUL_SIZE
    a = torch.empty(n, n, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    b = torch.empty(n, n, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    matmul_us = _graph_time_us(torch, lambda i: torch.matmul(a, b, out=c), 10)
    source = torch.empty(CEILING_COPY_BYTES // 2, device="cuda", dtype=torch.float16).uniform_(-1, 1)
    target = torch.empty_like(source)
    copy_us = _graph_time_us(torch, lambda i: target.copy_(source), 10)
    return {"matmul_tflops": 2 * n ** 3 / (matmul_us * 1e-6) / 1e12,
            "copy_gbps": 2 * CEILING_COPY_BYTES / (copy_us * 1e-6) / 1e9,
            "torch_version": torch.__version__}


def pytorch_layer_us(problem: ConvProblem, l2_bytes: int, compiled: bool = False) -> dict:
    """The layer as a PyTorch model writes it, channels_last in the problem's input type (cudnn_fprop_us's),
    timed the tuner's way: the conv (Conv2d or ConvTranspose2d, cuDNN,
    with its bias where there is no scale), a BatchNorm2d in eval mode for a per-channel scale and bias
    (what a folded batch-norm is before folding), the residual added, the activation in place, as
    torchvision's ResNet does. `compiled`: torch.compile of the same module (Inductor fuses the
    elementwise tail; the conv stays cuDNN's), compiled before timing. An e4m3 problem's f16 twin
    (CUDNN_FP8_ABSENT)."""
    import torch

    from tuner.core.epilogue import Activation

    absence, problem = fp8_absence(problem), torch_problem(problem)
    torch.backends.cudnn.benchmark = True
    dtype = torch_dtype(torch, problem)
    epilogue = problem.epilogue
    activations = {Activation.none: None, Activation.relu: torch.nn.ReLU(inplace=True),
                   Activation.gelu: torch.nn.GELU(), Activation.silu: torch.nn.SiLU(inplace=True)}

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            options = dict(stride=problem.strides, padding=problem.pads, dilation=problem.dilations,
                           groups=problem.groups, bias=epilogue.bias and not epilogue.scale)
            if problem.transposed:
                self.conv = torch.nn.ConvTranspose2d(problem.c, problem.k, (problem.r, problem.s),
                                                     output_padding=problem.output_paddings, **options)
            else:
                self.conv = torch.nn.Conv2d(problem.c, problem.k, (problem.r, problem.s), **options)
            self.norm = torch.nn.BatchNorm2d(problem.k) if epilogue.scale else None
            self.activation = activations[epilogue.activation]

        def forward(self, x, residual=None):
            y = self.conv(x)
            if self.norm is not None:
                y = self.norm(y)
            if residual is not None:
                y = y.add_(residual, alpha=epilogue.residual_scale)
            return self.activation(y) if self.activation is not None else y

    device = torch.device("cuda")
    module = Layer().to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()
    if module.norm is not None:  # running statistics that make a non-trivial scale and shift
        module.norm.running_mean.uniform_(-1, 1)
        module.norm.running_var.uniform_(0.5, 2)
        module.norm.weight.data.uniform_(0.5, 1.5)
        module.norm.bias.data.uniform_(-1, 1)
    if compiled:
        # Dynamo recompiles the module's forward for each new shape and, past its cache size limit (8),
        # silently runs it eagerly: start each layer from a clean slate, as a program compiling one
        # model would.
        torch._dynamo.reset()
    run = torch.compile(module) if compiled else module
    x = torch.empty(problem.n, problem.c, problem.h, problem.w, device=device, dtype=dtype)
    x = x.uniform_(-1, 1).to(memory_format=torch.channels_last)
    residual = None
    if epilogue.residual:
        residual = torch.empty(problem.n, problem.k, problem.p, problem.q, device=device, dtype=dtype)
        residual = residual.uniform_(-1, 1).to(memory_format=torch.channels_last)
    bytes_per_set = problem.bytes_moved + (problem.output_elements * dtype.itemsize if epilogue.residual else 0)
    free, _ = torch.cuda.mem_get_info()
    copies = rotation_copies(bytes_per_set, l2_bytes, free)
    inputs = [(x.clone(memory_format=torch.channels_last),
               None if residual is None else residual.clone(memory_format=torch.channels_last))
              for _ in range(copies)]
    outputs = [None] * copies

    def step(index: int) -> None:
        xi, ri = inputs[index % copies]
        with torch.no_grad():
            outputs[index % copies] = run(xi, ri)

    if compiled:
        step(0)  # compile outside the timing and the capture
    us = _graph_time_us(torch, step, launches_per_replay(copies))
    key = "compiled_us" if compiled else "eager_us"
    return {key: us, "copies": copies, "torch_version": torch.__version__, **absence}
