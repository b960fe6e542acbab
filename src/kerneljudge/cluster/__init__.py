"""kerneljudge on a Ray cluster: judge actors (one per GPU), the driver's loop, and a reward service.

Ray is an optional extra (`pip install 'kerneljudge[ray]'`): nothing outside this package imports it,
and `require_ray()` turns its absence into a UsageError that says what to install. The actors are judge
processes like `kerneljudge eval` (they start workers and referees, never import torch or candidate
code); the driver alone writes the store and the exports (docs/ray.md).
"""

from __future__ import annotations

from kerneljudge.errors import UsageError


def require_ray():
    """The `ray` module, or a UsageError naming the extra to install."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError("the Ray backend needs Ray: pip install 'kerneljudge[ray]'") from exc
    return ray
