"""Brokers fetchlat runs on this machine for its tests, demo and benchmarks: Apache Kafka from
its own jars (``kafka.py``). Tansu, the demo's fast default, is started where it is used."""
