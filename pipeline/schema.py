"""Explicit schemas of the DataFrames the pipeline builds (Spark and Arrow side by side, kept in step).

Arrow batches come out of the Python workers (``mapInArrow``), so every Spark type here has its Arrow twin;
``check_schemas`` (run by the tests) proves the two lists agree.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

_SPARK = {
    "string": StringType(),
    "int": IntegerType(),
    "long": LongType(),
    "bool": BooleanType(),
    "binary": BinaryType(),
    "strings": ArrayType(StringType(), containsNull=False),
    "ints": ArrayType(IntegerType(), containsNull=False),
    "props": MapType(StringType(), StringType(), valueContainsNull=False),
}
_ARROW = {
    "string": pa.string(),
    "int": pa.int32(),
    "long": pa.int64(),
    "bool": pa.bool_(),
    "binary": pa.binary(),
    "strings": pa.list_(pa.field("element", pa.string(), nullable=False)),
    "ints": pa.list_(pa.field("element", pa.int32(), nullable=False)),
    "props": pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False)),
}

# (name, type, nullable)
MESSAGE_FIELDS: list[tuple[str, str, bool]] = [
    ("topic", "string", False),
    ("queueId", "int", False),
    ("queueOffset", "long", False),
    ("physicalOffset", "long", False),
    ("storeSize", "int", False),
    ("storeTimestamp", "long", False),
    ("bornTimestamp", "long", False),
    ("bornHost", "string", False),
    ("storeHost", "string", False),
    ("sysFlag", "int", False),
    ("flag", "int", False),
    ("reconsumeTimes", "int", False),
    ("preparedTransactionOffset", "long", False),
    ("bodyCrc", "int", False),
    ("bodyCrcOk", "bool", False),
    ("tags", "string", True),
    ("keys", "strings", False),
    ("uniqKey", "string", True),
    ("msgId", "string", False),
    ("properties", "props", False),
    ("body", "binary", False),
]

# What reput's dispatchers need, per record, in commit-log order (``split`` + ``seq`` give that order).
DISPATCH_FIELDS: list[tuple[str, str, bool]] = [
    ("split", "int", False),
    ("seq", "int", False),
    ("topic", "string", False),
    ("queueId", "int", False),
    ("queueOffset", "long", False),
    ("physicalOffset", "long", False),
    ("size", "int", False),
    ("tagsCode", "long", False),
    ("storeTimestamp", "long", False),
    ("sysFlag", "int", False),
    ("toConsumeQueue", "bool", False),
    ("toIndex", "bool", False),
    ("keyBase", "int", False),  # index keys of the earlier records of this split
    ("keyHashes", "ints", False),  # index hashes in the order the index service puts them (uniq key first)
]


def spark_schema(fields: list[tuple[str, str, bool]]) -> StructType:
    return StructType([StructField(n, _SPARK[t], nullable) for n, t, nullable in fields])


def arrow_schema(fields: list[tuple[str, str, bool]]) -> pa.Schema:
    return pa.schema([pa.field(n, _ARROW[t], nullable) for n, t, nullable in fields])


MESSAGE_SCHEMA = spark_schema(MESSAGE_FIELDS)
MESSAGE_ARROW = arrow_schema(MESSAGE_FIELDS)
DISPATCH_SCHEMA = spark_schema(DISPATCH_FIELDS)
DISPATCH_ARROW = arrow_schema(DISPATCH_FIELDS)

SPLIT_FIELDS: list[tuple[str, str, bool]] = [
    ("index", "int", False),
    ("path", "string", False),
    ("base", "long", False),
    ("size", "long", False),
    ("first", "long", False),
    ("stop", "long", False),
    ("gapFrom", "ints", False),
    ("gapTo", "ints", False),
]
SPLIT_SCHEMA = spark_schema(SPLIT_FIELDS)
