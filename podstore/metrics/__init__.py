"""Prometheus metrics of a store (``podstore metrics``, ``podstore watch --metrics-addr``):
the follower's sync counters, a collector that reads the store at scrape time, the text
exposition, an atomic textfile for node_exporter, and the HTTP endpoint.

Internal. Needs ``prometheus_client`` (the ``watch`` extra), except ``stats.py``, which the
follower imports; ``import podstore`` never imports this package.
"""
