"""Networks in: ONNX and PyTorch models as layers with their fused epilogues."""
