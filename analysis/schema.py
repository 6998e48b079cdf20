"""The trace schema as Spark sees it: derived from ``fetchlat.metrics.trace_schema`` (the
writer's, versioned) and never inferred from files."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T

from ..metrics.trace_schema import SCHEMA_VERSION, TABLES

_TYPES = {
    pa.int64(): T.LongType(), pa.int32(): T.IntegerType(), pa.int16(): T.ShortType(),
    pa.string(): T.StringType(), pa.bool_(): T.BooleanType(), pa.float64(): T.DoubleType(),
}


def spark_schema(table: str) -> T.StructType:
    return T.StructType([T.StructField(f.name, _TYPES[f.type], nullable=True) for f in TABLES[table]])


__all__ = ["SCHEMA_VERSION", "TABLES", "spark_schema"]
