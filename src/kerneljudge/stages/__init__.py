"""The judge's side of the stages that need both torch processes: check, probe, time.

Each stage module has one public entry taking a `Judging` (the two processes and what the evaluation has
gathered). The judge relays data between the referee and the candidate's worker and decides from what
the referee computed; a worker reply is a claim, validated before use.
"""
