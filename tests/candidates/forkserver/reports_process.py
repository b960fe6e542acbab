"""Prints what its process holds (descriptors, environment, folder, how it was started), then fails to
import, so the worker's output comes back with the result."""

import json
import os
import sys
import tempfile

links = {}
for name in os.listdir("/proc/self/fd"):
    try:
        links[name] = os.readlink(f"/proc/self/fd/{name}")
    except OSError:  # the listing's own descriptor, closed by now
        pass
print("PROCESS " + json.dumps({"fds": links, "tmpdir": os.environ.get("TMPDIR"), "tempdir": tempfile.gettempdir(),
                               "cwd": os.getcwd(), "main": getattr(sys.modules["__main__"].__spec__, "name", None)}), flush=True)
raise RuntimeError("reported")
