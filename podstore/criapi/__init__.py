"""The Container Runtime Interface messages podstore reads (``runtime.proto``; ``runtime_pb2``
is generated from it and a test regenerates it and compares bytes). Internal: the watch's CRI
client (watch/cri.py) and the tests' CRI server use it."""
