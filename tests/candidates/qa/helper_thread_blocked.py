"""Honest: a helper thread started in __init__ waits, blocked on a queue, until forward hands it the work, and
forward waits for its answer; between calls it runs nothing."""
import queue
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.jobs, self.answers = queue.Queue(), queue.Queue()
        threading.Thread(target=self._serve, daemon=True, name="helper").start()

    def _serve(self):
        while True:
            x = self.jobs.get()
            with torch.inference_mode():
                self.answers.put(torch.relu(x))

    def forward(self, x):
        self.jobs.put(x)
        return self.answers.get()
