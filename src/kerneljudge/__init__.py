"""kerneljudge: is this candidate kernel a correct replacement for the reference, for any inputs and
parameters, and how much faster is it, honestly measured?

Python API: `evaluate` (everything), `check` (correctness and integrity), `bench` (timing), `submit`.
"""

__version__ = "0.1.0"
