"""Problem lint (issue 19): find degenerate, redundant and mis-sized problems before anyone optimises them.

A problem whose output a trivial tensor matches, or whose heavy operation collapses algebraically, makes
both verdicts and speedups mean little. The judge side (`judge.py`: which problems, the cache, the notice
every evaluation carries) never imports torch; the analysis runs in the referee (`analysis.py`: the
numeric checks, `graph.py`: the traced graph, `sizes.py`: the sizes it runs at and the footprint), and
`static.py` reads the source for sizes `--set` cannot reach.
"""
