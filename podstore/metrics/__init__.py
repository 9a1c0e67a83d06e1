"""Prometheus metrics of a store (``podstore metrics``, ``watch --metrics-addr``). Internal;
needs ``prometheus_client`` (the ``watch`` extra), except ``stats.py``, which the follower
and ``ship`` import; ``import podstore`` never imports this package.
"""
