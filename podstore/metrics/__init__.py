"""Prometheus metrics of a store (``podstore metrics``, ``podstore watch --metrics-addr``):
a collector that reads the store at scrape time, the text exposition, an atomic textfile for
node_exporter, and the HTTP endpoint.

Internal. Needs ``prometheus_client`` (the ``watch`` extra); ``import podstore`` never
imports this package.
"""
