"""Code that runs inside the worker process, where candidate code is imported and called.

The judge process starts `python -m kerneljudge.worker READ_FD WRITE_FD JUDGE_PID`, sends requests over that
private channel and gets data back. Every module here may touch candidate objects; nothing outside
this package does.
"""
