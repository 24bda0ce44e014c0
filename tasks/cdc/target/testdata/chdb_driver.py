"""Run SQL that changesink generates in chdb (the current ClickHouse engine, in-process).

Used by target/chdb_test.go. Reads one JSON document on stdin:

    {"steps": [
        {"sql": "CREATE ..."},                                     # run, no result
        {"sql": "SELECT ...", "format": "JSONEachRow"},            # run, result returned
        {"keys": {"columns": [["id", "Int64"], ...], "rows": [{"id": 1}, ...]}},
        {"insert": "INSERT INTO db.t (a, b)", "rows": [{"a": 1, "b": "x"}, ...]}
    ]}

"keys" stands in for the external table clickhouse-go sends with a query: it (re)creates the
Memory table _cdc_keys in the session's current database, so the statement text is the same.
"insert" runs the INSERT statement with FORMAT JSONEachRow and the rows. Prints
{"version": ..., "results": [one string per step that has a format]} on stdout; on a failing
step prints {"error": ..., "step": i} and exits 1.
"""
import json
import sys

from chdb import session


def main():
    doc = json.load(sys.stdin)
    s = session.Session()
    out = {"version": s.query("SELECT version()", "CSV").bytes().decode().strip().strip('"'), "results": []}
    for i, step in enumerate(doc["steps"]):
        try:
            if "keys" in step:
                cols = step["keys"]["columns"]
                s.query("DROP TABLE IF EXISTS _cdc_keys")
                s.query("CREATE TABLE _cdc_keys (" + ", ".join(f"`{n}` {t}" for n, t in cols) + ") ENGINE = Memory")
                rows = "\n".join(json.dumps(r) for r in step["keys"]["rows"])
                s.query("INSERT INTO _cdc_keys FORMAT JSONEachRow " + rows)
            elif "insert" in step:
                rows = "\n".join(json.dumps(r) for r in step["rows"])
                s.query(step["insert"] + " FORMAT JSONEachRow " + rows)
            elif step.get("format"):
                out["results"].append(s.query(step["sql"], step["format"]).bytes().decode())
            else:
                s.query(step["sql"])
        except Exception as e:  # report which statement failed
            json.dump({"error": str(e), "step": i}, sys.stdout)
            sys.exit(1)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
