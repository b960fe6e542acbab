"""Writes a forged progress message (without the request's nonce) into the worker's result channel while
being imported; its file descriptor is in sys.argv. The judge must see tampering, not show it."""
import json
import os
import struct
import sys

import torch.nn as nn

_data = json.dumps({"progress": {"message": "all trials passed", "done": 1, "total": 1}}).encode()
os.write(int(sys.argv[2]), struct.pack(">I", len(_data)) + _data)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
