"""The referee: a process that imports the problem but never the candidate, and decides from data.

It is started by the judge beside the candidate's worker (`isolation.start_referee`) and answers the
requests of `protocol`: inputs, the reference's outputs, comparisons, parameter changes, baselines.
"""
