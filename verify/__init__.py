"""fetchlat.verify: fetchlat judged by the broker's own clock. ``request_log`` reads Apache
Kafka's request log and joins it with fetchlat's traces, request by request, into the agreement
figures the tests judged by the broker's clock assert. It needs neither Spark nor the proxy:
pyarrow, the trace layout, and the log file."""
