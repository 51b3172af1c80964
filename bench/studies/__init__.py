"""One-off measurements that the docs cite, each run as `python -m bench.studies.NAME`.

They are not part of `python -m bench`; each prints its own table (see bench/README.md).
"""
