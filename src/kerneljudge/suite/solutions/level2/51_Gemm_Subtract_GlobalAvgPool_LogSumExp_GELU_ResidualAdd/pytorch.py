"""PyTorch solution for level2/51 (Gemm, Subtract, GlobalAvgPool, LogSumExp, GELU, ResidualAdd).

Exact algebraic simplification of the reference for a 2D input x of shape (B, in_features):

    mean_j (x W^T + b - s)_j = x . mean(W, dim=0) + mean(b) - mean(s)
    logsumexp over a size-1 dim is the identity
    => y = x + gelu(x . w_mean + c),  c = mean(b) - mean(s)   (c = -mean(s) without bias)

w_mean and c are derived from the parameters and cached in plain attributes. They are
recomputed whenever any parameter is changed in place (version counter), replaced by a new
object, has its .data swapped, or moves device/dtype. The refresh is the only time the big
weight is read. c stays a 0-d tensor on the device (no host sync in forward). Parameters made
under torch.inference_mode() are inference tensors, which have no version counter: for those the
values are derived anew on every call (one read of the weight per call, never stale).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._kj_key = None
        self._kj_pin = None
        self._kj_w_mean = None
        self._kj_c = None

    # ---- cached derived values -------------------------------------------------------
    def _kj_params(self):
        return (self.gemm.weight, self.gemm.bias, self.subtract)

    @staticmethod
    def _kj_param_key(p):
        if p is None:
            return None
        return (id(p), p._version, p.data_ptr(), p.device, p.dtype, tuple(p.shape))

    @staticmethod
    def _kj_compute(weight, bias, sub):
        """(w_mean, c) in float32 (float64 for float64 params). w_mean accumulates in that type, as the
        reference's own GEMM does: on an H200 this is 0.09 ms, float64 accumulation 0.45 ms, and
        parameters made under inference_mode pay it on every call. c (short vectors): float64."""
        with torch.no_grad():
            store = torch.float64 if weight.dtype == torch.float64 else torch.float32
            w_mean = weight.mean(dim=0, dtype=store).contiguous()
            c = -sub.mean(dtype=torch.float64)
            if bias is not None:
                c = c + bias.mean(dtype=torch.float64)
            return w_mean, c.to(store)

    def _kj_derived(self):
        params = self._kj_params()
        if any(p is not None and p.is_inference() for p in params):
            # Inference tensors (made under torch.inference_mode) have no version counter, so an
            # in-place change to one cannot be seen: derive the values anew on every call.
            self._kj_key = self._kj_pin = None
            return self._kj_compute(*params)
        key = tuple(self._kj_param_key(p) for p in params)
        if key != self._kj_key:
            self._kj_w_mean, self._kj_c = self._kj_compute(*params)
            self._kj_key = key
            # Pin the keyed objects/storages so a freed id()/data_ptr() cannot alias the key.
            self._kj_pin = tuple(p.detach() if p is not None else None for p in params) + params
        return self._kj_w_mean, self._kj_c

    # ---- forward ---------------------------------------------------------------------
    def _reference_forward(self, x):
        original_x = x.clone().detach()
        x = self.gemm(x)
        x = x - self.subtract
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.nn.functional.gelu(x)
        return x + original_x

    def forward(self, x):
        if x.dim() != 2 or not x.is_floating_point():
            # The simplification is only valid for (B, in_features) inputs.
            return self._reference_forward(x)
        w_mean, c = self._kj_derived()
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(compute)
        z = torch.mv(xf, w_mean.to(compute)) + c.to(compute)
        g = torch.nn.functional.gelu(z)
        return (xf + g.unsqueeze(1)).to(x.dtype)
