"""fetchlat.analysis: the PySpark job behind ``fetchlat analyze``.

Shares only the trace schema and its vocabulary (``metrics/trace_schema.py``,
``metrics/vocabulary.py``) with the rest of fetchlat; ``cli`` parses ``fetchlat analyze``. ``schema`` maps it to Spark,
``transforms`` holds pure DataFrame -> DataFrame functions (built-in Spark SQL only), ``job``
does all the I/O, ``report`` renders the HTML page from small collected tables.
"""
