"""Following a live kubelet checkpoint file (``podstore watch``): the loop that syncs the store
on every rewrite, the file trigger (inotify through watchdog, with a polling fallback), the
after-sync hook runner with backoff, the metrics textfile writer, and ``run.py``, which builds
a whole ``podstore watch`` from a WatchConfig (the follower's counters are metrics/stats.py).

Internal, like ``storage/``. watchdog is imported only when a trigger starts, so importing this
package costs nothing on a node that never follows a file.
"""
