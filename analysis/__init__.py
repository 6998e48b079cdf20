"""fetchlat.analysis: the PySpark job behind ``fetchlat analyze``.

Shares only the trace schema with the rest of fetchlat. ``schema`` maps it to Spark,
``transforms`` holds pure DataFrame -> DataFrame functions (built-in Spark SQL only), ``job``
does all the I/O, ``report`` renders the HTML page from small collected tables.
"""
