"""The compose demo's reader: cdcd's Iceberg mirror read with PyIceberg through the same
SQLite catalog and warehouse cdcd writes (the cdcd-data volume), as any engine would.

  docker compose logs -f reader                     every 30 s: each table's rows and snapshot
  docker compose run --rm reader cdc.orders         one table: its row count and first rows

The catalog name must be cdcd's (sink.iceberg.catalog.name, default cdcd): the SQL
catalog's rows are keyed by it. Deletion vectors (format 3) are applied by the scan.
"""
import os
import sys
import time

from pyiceberg.catalog.sql import SqlCatalog

DATA = os.environ.get("CDCD_DATA", "/var/lib/cdcd")
CATALOG = os.environ.get("CDCD_CATALOG", "cdcd")
NAMESPACE = os.environ.get("CDCD_NAMESPACE", "cdc")
INTERVAL = float(os.environ.get("READ_INTERVAL", "30"))


def open_catalog():
    # SQLAlchemy's sqlite URI: four slashes before an absolute path.
    return SqlCatalog(CATALOG, uri=f"sqlite:///{DATA}/catalog.db", warehouse=f"file://{DATA}/warehouse")


def show(cat, name, rows):
    table = cat.load_table(name)
    data = table.scan().to_arrow()
    snap = table.current_snapshot()
    print(f"{name}: {data.num_rows} rows, format v{table.metadata.format_version}, "
          f"snapshot {snap.snapshot_id if snap else '-'}")
    for row in data.slice(0, rows).to_pylist():
        print("   ", {k: v for k, v in row.items() if not k.startswith("_cdc")})


def main(args):
    while not os.path.exists(f"{DATA}/catalog.db"):
        print(f"waiting for cdcd's catalog at {DATA}/catalog.db ...", flush=True)
        time.sleep(5)
    cat = open_catalog()
    if args:
        for name in args:
            show(cat, name, 10)
        return
    while True:
        try:
            names = sorted(".".join(ident) for ident in cat.list_tables(NAMESPACE))
            if not names:
                print(f"no tables in namespace {NAMESPACE} yet (cdcd creates them at its first commit)")
            for name in names:
                show(cat, name, 3)
        except Exception as e:  # a table being created or a commit racing the read: try again
            print(f"read failed, retrying: {e}")
        print(flush=True)
        time.sleep(INTERVAL)


if __name__ == "__main__":
    main(sys.argv[1:])
