"""Following a live kubelet checkpoint file (``podstore watch``; docs/watch.md, "Where the
code is"). Internal; watchdog is imported only when a trigger starts.
"""
