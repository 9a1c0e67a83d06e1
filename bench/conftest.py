"""Keep pytest out of the benchmark package (it measures, it does not assert)."""

collect_ignore_glob = ["*"]
