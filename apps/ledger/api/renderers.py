from rest_framework.renderers import BaseRenderer

from apps.ledger.exports import csv_text


class CSVRenderer(BaseRenderer):
    """Renders a table (a list of rows) as CSV; an error body becomes ``field,message`` lines."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, dict):
            data = [["field", "message"]] + [
                [name, message]
                for name, messages in data.items()
                for message in (messages if isinstance(messages, list) else [messages])
            ]
        return csv_text(data).encode(self.charset)
