"""Turn a Kestra 1.x text Ion file into the JSON lines IonToJson gives.

Usage: python ion_to_jsonl.py IN.ion OUT.jsonl

Stands in for the seed flow's decode_batch task
(io.kestra.plugin.serdes.json.IonToJson, newLine: true): one JSON object per
top-level Ion value, read with amazon.ion (an implementation independent of
the ion-go writer that made the file). The rendering follows IonToJson's
Jackson path: ints and decimals as JSON numbers with their exact text
(BigDecimal.toString, which Python's Decimal str matches), floats as JSON
numbers, strings and symbols as strings, blobs as base64, timestamps as ISO
8601 strings, annotations dropped, nulls as null. Non-ASCII text is written
as UTF-8, not escaped. The seed's scripts only read the row columns and
metadata.source{db,schema,table,lsn}, so the timestamp rendering (which the
research note marks unconfirmed for IonToJson) does not reach any result.

The whole file is parsed at once (not line by line): a string may hold
U+2028, which Python's str.splitlines() would treat as a line break.
"""

import base64
import json
import math
import sys

from amazon.ion import simpleion
from amazon.ion.core import IonType


def render(value):
    ion_type = getattr(value, "ion_type", None)
    # simpleion gives null and typed nulls (null.int, null.string) as IonPyNull.
    if value is None or ion_type is IonType.NULL or type(value).__name__ == "IonPyNull":
        return "null"
    if ion_type is IonType.BOOL:
        return "true" if value else "false"
    if ion_type is IonType.INT:
        return str(int(value))
    if ion_type is IonType.DECIMAL:
        return str(value)
    if ion_type is IonType.FLOAT:
        f = float(value)
        if math.isnan(f) or math.isinf(f):
            raise ValueError("non-finite float has no JSON form")
        return json.dumps(f)
    if ion_type in (IonType.STRING, IonType.SYMBOL):
        text = value.text if ion_type is IonType.SYMBOL and hasattr(value, "text") else str(value)
        return json.dumps(text, ensure_ascii=False)
    if ion_type in (IonType.BLOB, IonType.CLOB):
        return json.dumps(base64.b64encode(bytes(value)).decode("ascii"))
    if ion_type is IonType.TIMESTAMP:
        return json.dumps(value.isoformat())
    if ion_type in (IonType.LIST, IonType.SEXP):
        return "[" + ",".join(render(v) for v in value) + "]"
    if ion_type is IonType.STRUCT:
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + render(v) for k, v in value.items()) + "}"
    raise ValueError(f"unsupported Ion value {value!r} ({ion_type})")


def main():
    source, target = sys.argv[1], sys.argv[2]
    with open(source, "rb") as f:
        data = f.read()
    values = simpleion.loads(data, single_value=False) if data.strip() else []
    with open(target, "w", encoding="utf-8") as out:
        for value in values:
            line = render(value)
            json.loads(line)  # every line must be JSON the seed can read
            out.write(line + "\n")


if __name__ == "__main__":
    main()
