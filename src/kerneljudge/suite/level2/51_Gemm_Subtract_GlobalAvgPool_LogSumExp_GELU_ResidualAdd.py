"""KernelBench level 2, problem 51: Gemm -> Subtract -> GlobalAvgPool -> LogSumExp -> GELU -> ResidualAdd.

The seed problem of kerneljudge, written exactly as KernelBench defines it. Note that the
GlobalAvgPool (mean over out_features) makes the whole GEMM collapse algebraically to a
matrix-vector product with mean(W, dim=0), and LogSumExp over a size-1 dim is the identity.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Model that performs a series of operations: Gemm, Subtract, GlobalAvgPool, LogSumExp, GELU, and ResidualAdd.
    """

    def __init__(self, in_features, out_features, bias=True):
        super(Model, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        original_x = x.clone().detach()
        # Gemm
        x = self.gemm(x)

        # Subtract
        x = x - self.subtract

        # GlobalAvgPool
        x = torch.mean(x, dim=1, keepdim=True)

        # LogSumExp
        x = torch.logsumexp(x, dim=1, keepdim=True)

        # GELU
        x = torch.nn.functional.gelu(x)

        # ResidualAdd
        x = x + original_x

        return x


batch_size = 2048
in_features = 8192
out_features = 8192

PRESETS = {"small": {"batch_size": 64, "in_features": 256, "out_features": 128}}


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
