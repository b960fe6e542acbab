"""Right outputs; its first call starts a thread that keeps running the candidate's code for good."""
import threading
import time

import torch
import torch.nn as nn


def _spin():
    while True:
        time.sleep(0.001)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.started = False

    def forward(self, x):
        if not self.started:
            self.started = True
            threading.Thread(target=_spin, daemon=True).start()
        return torch.relu(x)
