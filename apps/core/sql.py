"""Helpers for the few statements written by hand on PostgreSQL: bulk writes fed from arrays
(``unnest``), one statement whatever the number of rows."""


def array_literal(values) -> str:
    """Integers, decimals or booleans (``t``/``f``) as a PostgreSQL array literal, sent as one
    parameter (None is NULL): psycopg adapts a list of ten thousand numbers element by element,
    several times slower."""
    return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"
