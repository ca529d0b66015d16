"""CSV and XLSX exports of a usage report: the page's columns and numbers, then the total and the
unused capacity lines. The API's CSV is the same table. Each column has one format whatever the
database returned (``klique.numbers.exact_*``): hours to three decimals, money to two, per cent
to one; the XLSX holds the numbers themselves, formatted the same way."""

import csv
import io

from django.http import HttpResponse
from openpyxl import Workbook
from openpyxl.styles import Font

from apps.core.exports import spreadsheet_safe
from apps.ledger.selectors import Report
from klique import numbers

XLSX_TYPE = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
NUMBER_FORMATS = {"hours": "0.000", "money": "0.00", "percent": "0.0"}
PLACES = {"hours": 3, "money": 2, "percent": 1}


def _cell(value, kind: str, exact: bool):
    if value is None:
        return ""
    if kind in PLACES:
        return numbers.exact(value, PLACES[kind]) if exact else value
    return spreadsheet_safe(value)


def table(report: Report, *, exact: bool = True) -> list[list]:
    """Header, rows, then the summary lines; empty cells are ``""``. ``exact``: figures as text in
    their column's one format (CSV); otherwise the numbers themselves (XLSX)."""
    columns = report.columns()
    lines = [[title for _, title, _ in columns]]
    for record in [*report.records(), *report.summary_records()]:
        lines.append([_cell(record[key], kind, exact) for key, _, kind in columns])
    return lines


def filename(report: Report, extension: str) -> str:
    spec = report.spec
    return f"usage-by-{'-'.join(spec.dims)}-{spec.start:%Y%m%dT%H}-{spec.end:%Y%m%dT%H}.{extension}"


def csv_text(lines: list[list]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer).writerows(lines)
    return buffer.getvalue()


def csv_response(report: Report) -> HttpResponse:
    response = HttpResponse(csv_text(table(report)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename(report, "csv")}"'
    return response


def xlsx_response(report: Report) -> HttpResponse:
    workbook = Workbook()
    sheet = workbook.active
    sheet.title = "Usage"
    lines = table(report, exact=False)
    sheet.append(lines[0])
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    formats = [NUMBER_FORMATS.get(kind) for _, _, kind in report.columns()]
    for line in lines[1:]:
        sheet.append([None if value == "" else value for value in line])
        for number_format, cell in zip(formats, sheet[sheet.max_row], strict=True):
            if number_format:
                cell.number_format = number_format
    about = workbook.create_sheet("About")
    spec = report.spec
    for line in [
        ("From (UTC)", f"{spec.start:%Y-%m-%d %H:%M}"),
        ("Until (UTC, not included)", f"{report.stop:%Y-%m-%d %H:%M}"),
        ("Rows by", ", ".join(spec.dims)),
        ("Currency", spec.currency),
        ("Unused capacity", spec.idle or "not shown"),
        *([("Utilisation of capacity in force (%)", report.utilisation)] if spec.idle else []),
    ]:
        about.append(line)
    buffer = io.BytesIO()
    workbook.save(buffer)
    response = HttpResponse(buffer.getvalue(), content_type=XLSX_TYPE)
    response["Content-Disposition"] = f'attachment; filename="{filename(report, "xlsx")}"'
    return response
