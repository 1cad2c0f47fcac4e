"""The CUDA-graph capture the PyTorch baselines share (bench/ops/torch_attention.py, bench/graph/torch_mlp.py,
bench/graph/torch_block.py): warm-up calls on a side stream, as PyTorch's capture rules ask, then `calls`
calls captured as one graph."""
import torch


def capture(fn, calls=1, warmup=3):
    """A torch.cuda.CUDAGraph of `calls` calls of fn, after `warmup` calls on a side stream."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph
