"""Following a live kubelet checkpoint file (``podstore watch``): the loop that syncs the store
on every rewrite, the file trigger (inotify through watchdog, with a polling fallback), the
counters the metrics report, and the after-sync hook runner with backoff.

Internal, like ``storage/``. watchdog is imported only when a trigger starts, so importing this
package costs nothing on a node that never follows a file.
"""
