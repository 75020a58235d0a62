"""The state database's two schemas, SQLite's and PostgreSQL's, written apart (their types
differ), hold the same tables and columns: a column added to one and not the other would
fail only on the installations that use the other. PostgreSQL's own parts are named
here: what nodes sharing one server need (their liveness, the leaders, the outbox's
leases) and the id its bindings are deleted by."""

from __future__ import annotations

import re

from callhook.store import database, postgres

#: Tables only nodes sharing a PostgreSQL server need.
POSTGRES_TABLES = {"nodes", "leaders"}
#: Columns only PostgreSQL has, by table.
POSTGRES_COLUMNS = {"notifications": {"lease_owner", "lease_until"}, "bindings": {"id"}}
#: A table's lines that are not columns.
CONSTRAINTS = {"PRIMARY", "UNIQUE", "CHECK", "CONSTRAINT", "FOREIGN"}


def tables(schema: str) -> dict[str, set[str]]:
    """Each ``CREATE TABLE``'s columns, and those ``ALTER TABLE ... ADD COLUMN`` adds."""
    found: dict[str, set[str]] = {}
    for name, body in re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*?)\n\);", schema, re.S):
        columns = {line.split()[0].strip('"') for line in body.strip().splitlines()}
        found[name] = columns - CONSTRAINTS
    # (A table written otherwise, "...) WITHOUT ROWID;", would be read into the next.)
    assert len(found) == schema.count("CREATE TABLE"), "a table this parser cannot read"
    for name, column in re.findall(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)", schema):
        found[name].add(column)
    return found


def test_both_schemas_have_the_same_tables_and_columns() -> None:
    sqlite = tables(database.SCHEMA)
    for table, column in database._ADDED:  # (added to state files older than them)
        sqlite[table].add(column)
    server = tables(postgres.SCHEMA)
    assert set(sqlite) == set(server) - POSTGRES_TABLES
    for table, columns in sqlite.items():
        assert columns == server[table] - POSTGRES_COLUMNS.get(table, set()), table


def test_every_column_added_later_is_in_each_schema_as_made_today() -> None:
    """A state file (or server) from before a column gets it at start: the column is also
    in the table as a new one is made."""
    sqlite = tables(database.SCHEMA)
    for table, column in database._ADDED:
        assert column in sqlite[table], (table, column)
    made = tables(re.sub(r"ALTER TABLE .*\n", "", postgres.SCHEMA))
    for table, column in re.findall(
        r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)", postgres.SCHEMA
    ):
        assert column in made[table], (table, column)
