"""A tiny problem (a scaled ReLU with one parameter) and candidate sources, shared by the store, MCP and
RL tests, which pass candidates as source text."""

PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return torch.relu(x * self.scale)

batch = 8
n = 64
PRESETS = {"tiny": {"batch": 2, "n": 16}}

def get_inputs():
    return [torch.randn(batch, n)]

def get_init_inputs():
    return [n]
"""

HEADER = "import os\nimport torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n" \
         "    def __init__(self, n):\n        super().__init__()\n        self.scale = nn.Parameter(torch.randn(n))\n\n"
GOOD = HEADER + "    def forward(self, x):\n        return torch.clamp_min(x * self.scale, 0.0)\n"
WRONG = HEADER + "    def forward(self, x):\n        return x * self.scale\n"
EXITS = HEADER + "    def forward(self, x):\n        os._exit(3)\n"
SYNTAX = HEADER + "    def forward(self x):\n        return x\n"
# the right answer, but it writes into its input: caught by the judge, and worth nothing
MUTATES = HEADER + ("    def forward(self, x):\n        out = torch.relu(x * self.scale)\n        x.zero_()\n"
                    "        return out\n")
