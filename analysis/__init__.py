"""fetchlat.analysis: the PySpark job behind ``fetchlat analyze``.

Shares only the trace schema, layout and vocabulary (``metrics/trace_schema.py``,
``metrics/trace_layout.py``, ``metrics/vocabulary.py``) with the rest of fetchlat. Who does what:

- ``cli`` parses ``fetchlat analyze`` and shows progress; ``follow`` reruns it (``--every``);
- ``job`` (one run) and ``state`` (the kept per-hour products, the listing of trace files) do
  all the I/O: the session, the traces read, the tables, the report and the state written;
- ``schema`` maps the trace schema to Spark; ``transforms`` holds pure DataFrame -> DataFrame
  functions (built-in Spark SQL only);
- ``tables`` (the keys, columns and histogram buckets both sides agree on) and ``finish`` (the
  tables finished in the driver with numpy and pyarrow) need no Spark: they import without it;
- ``report`` renders the HTML page from the small finished tables.
"""
