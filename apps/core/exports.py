"""Exports to spreadsheets. A cell that starts with ``=``, ``+``, ``-`` or ``@`` is a formula to
Excel and LibreOffice; names people choose (groups, projects, users, tasks) are written with a
leading apostrophe instead, so an export never runs what someone typed."""

import re

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def spreadsheet_safe(value):
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not NUMBER.fullmatch(value):
        return "'" + value
    return value
