"""Code shared by the two kinds of torch process the judge starts: the candidate's worker and the referee.

Neither the judge process nor anything here imports candidate code; the worker imports it after all of
this is loaded. What crosses between processes is JSON and raw tensor bytes (`tensorwire`).
"""
