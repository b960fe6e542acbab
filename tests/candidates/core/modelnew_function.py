"""Defines ModelNew, but as a function returning a model, not as the class the judge constructs."""
import torch.nn as nn


def ModelNew(*args):
    return nn.Identity()
