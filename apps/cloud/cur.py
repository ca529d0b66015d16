"""Reading an AWS Cost and Usage Report 2.0 file (CSV, gzip'd CSV or Parquet) with pyarrow: only the
columns reconciliation needs, filtered in Arrow to EC2 instance usage before any row reaches Python
(``docs/cloud.md``, "Reconciling the cloud bill"). Amounts stay exact: CSV cells are read as text
and become ``Decimal``; Parquet's doubles become the shortest decimal that reads back as them."""

import gzip
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

RESOURCE, START, END = "line_item_resource_id", "line_item_usage_start_date", "line_item_usage_end_date"
AMOUNT, COST, RATE = "line_item_usage_amount", "line_item_unblended_cost", "line_item_unblended_rate"
CURRENCY, LINE_TYPE = "line_item_currency_code", "line_item_line_item_type"
PRODUCT, INSTANCE_TYPE, TAGS = "line_item_product_code", "product_instance_type", "resource_tags"
REQUIRED = [RESOURCE, START, END, AMOUNT, COST, RATE, CURRENCY, LINE_TYPE, PRODUCT, INSTANCE_TYPE]
WANTED = [*REQUIRED, TAGS]
PLACES = Decimal("1e-10")  # what the lines store; CUR's own amounts have at most 10 decimals
POOL_TAG = "user_klique_pool"  # the klique:pool tag as CUR 2.0 names the keys of resource_tags
BATCH_ROWS = 65_536


class BillFileError(ValueError):
    """A file that is not a CUR 2.0 report Klique can read; the message says why, for a person."""


@dataclass(frozen=True)
class BillRow:
    """One EC2 instance usage row."""

    instance_id: str
    instance_type: str
    start: datetime
    end: datetime
    hours: Decimal
    cost: Decimal
    rate: Decimal | None
    currency: str
    tagged_pool: str


@dataclass
class BillRows:
    """What a file holds for [start, end): the usage rows of instances inside it, and counts."""

    file_format: str
    rows: list[BillRow] = field(default_factory=list)
    read: int = 0
    other: int = 0
    outside: int = 0


def file_format(head: bytes) -> str:
    if head.startswith(b"PAR1"):
        return "parquet"
    return "csv.gz" if head.startswith(b"\x1f\x8b") else "csv"


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower())


def _pool_tag(tags) -> str:
    """The klique:pool tag from resource_tags: a map (Parquet) or its JSON text (CSV)."""
    if not tags:
        return ""
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            return ""
    pairs = tags.items() if isinstance(tags, dict) else tags
    try:
        return next((str(value) for key, value in pairs if _key(str(key)) == POOL_TAG), "")
    except (TypeError, ValueError):
        return ""


def _decimal(value, column: str, row: int) -> Decimal:
    try:
        number = Decimal(repr(value) if isinstance(value, float) else str(value).strip())
    except InvalidOperation:
        raise BillFileError(f"row {row}: {column} {str(value)[:40]!r} is not a number") from None
    if not number.is_finite() or abs(number) >= Decimal("1e14"):
        raise BillFileError(f"row {row}: {column} {str(value)[:40]!r} is not a finite amount below 10^14")
    return number.quantize(PLACES, rounding=ROUND_HALF_UP)


def _moment(value, column: str, row: int) -> datetime:
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise BillFileError(f"row {row}: {column} {str(value)[:40]!r} is not a date and time") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _batches(stream, kind: str):
    """(column names, batches of the wanted columns) of a seekable binary file."""
    try:
        if kind == "parquet":
            parquet = pq.ParquetFile(stream)
            names = parquet.schema_arrow.names
            present = [name for name in WANTED if name in names]
            return names, parquet.iter_batches(batch_size=BATCH_ROWS, columns=present)
        source = gzip.GzipFile(fileobj=stream) if kind == "csv.gz" else stream
        names = pa_csv.open_csv(source).schema.names
        stream.seek(0)
        source = gzip.GzipFile(fileobj=stream) if kind == "csv.gz" else stream
        present = [name for name in WANTED if name in names]
        options = pa_csv.ConvertOptions(
            include_columns=present,
            column_types={name: pa.string() for name in present},
            strings_can_be_null=True,
        )
        return names, pa_csv.open_csv(source, convert_options=options)
    except (pa.ArrowException, OSError, EOFError, gzip.BadGzipFile) as error:
        raise BillFileError(f"not a readable {kind} file: {error}") from None


def _kept(batch: pa.RecordBatch) -> pa.Array:
    """EC2 usage rows of an instance: product AmazonEC2, type Usage, an i- resource, a type."""

    def text(name):
        column = batch.column(name)
        return column if pa.types.is_string(column.type) else pc.cast(column, pa.string())

    return pc.fill_null(
        pc.and_(
            pc.and_(
                pc.equal(text(PRODUCT), "AmazonEC2"),
                pc.equal(text(LINE_TYPE), "Usage"),
            ),
            pc.and_(
                pc.starts_with(text(RESOURCE), "i-"),
                pc.greater(pc.utf8_length(pc.fill_null(text(INSTANCE_TYPE), "")), 0),
            ),
        ),
        False,
    )


def read(stream, start: datetime, end: datetime) -> BillRows:
    """The EC2 instance usage rows of a CUR 2.0 file whose usage starts in [start, end)."""
    kind = file_format(stream.read(4))
    stream.seek(0)
    names, batches = _batches(stream, kind)
    missing = [name for name in REQUIRED if name not in names]
    if missing:
        raise BillFileError(f"not a CUR 2.0 file: missing the columns {', '.join(missing)}")
    found = BillRows(file_format=kind)
    try:
        for batch in batches:
            offset = found.read + 1
            found.read += batch.num_rows
            mask = _kept(batch)
            at = pc.indices_nonzero(mask).to_pylist()
            kept = batch.filter(mask)
            found.other += batch.num_rows - kept.num_rows
            columns = {name: kept.column(name).to_pylist() for name in kept.schema.names}
            for i in range(kept.num_rows):
                row = offset + at[i]
                moment = _moment(columns[START][i], START, row)
                if not start <= moment < end:
                    found.outside += 1
                    continue
                rate = columns[RATE][i]
                found.rows.append(
                    BillRow(
                        instance_id=columns[RESOURCE][i].strip(),
                        instance_type=str(columns[INSTANCE_TYPE][i]).strip(),
                        start=moment,
                        end=_moment(columns[END][i], END, row),
                        hours=_decimal(columns[AMOUNT][i], AMOUNT, row),
                        cost=_decimal(columns[COST][i], COST, row),
                        rate=None if rate in (None, "") else _decimal(rate, RATE, row),
                        currency=str(columns[CURRENCY][i] or "").strip().upper(),
                        tagged_pool=_pool_tag(columns.get(TAGS, [None] * kept.num_rows)[i]),
                    )
                )
    except (pa.ArrowException, OSError, EOFError, gzip.BadGzipFile) as error:
        raise BillFileError(f"not a readable {kind} file: {error}") from None
    return found
