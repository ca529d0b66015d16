"""``/api/v1/usage/report/``: a usage report as JSON or CSV (``?format=csv`` or ``Accept:
text/csv``), with the parameters of the report page."""

from django import forms
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.ledger import exports, selectors, visibility
from apps.ledger.api.renderers import CSVRenderer
from apps.ledger.api.serializers import REPORT_EXTRAS, report_data
from apps.ledger.forms import ReportForm


def parameter(name: str, field: forms.Field) -> OpenApiParameter:
    """The report form's field as a query parameter; a choice lists its values (empty: the default)."""
    choices = None
    if isinstance(field, forms.ChoiceField) and not isinstance(field, forms.ModelChoiceField):
        choices = list(dict.fromkeys(["", *(str(value) for value, _ in field.choices)]))
    return OpenApiParameter(name, str, enum=choices, description=str(field.help_text or field.label or name))


PARAMETERS = [parameter(name, field) for name, field in ReportForm.base_fields.items()]


class UsageReportView(APIView):
    """GPU-hours, budget hours and cost of the usage you may see, by group (with its subtree),
    project, user, GPU type or pool, for a UTC day, week, month, quarter or custom range. IT, and
    leadership and finance at the organisation's root, also get ``cloud_spend``: what every cloud
    node cost in the range; finance and leadership of a business unit see its subtree only."""

    renderer_classes = [JSONRenderer, CSVRenderer]
    error_statuses = {"get": (403, 404)}  # 404: an unknown ?format=

    @extend_schema(summary="A usage and cost report", parameters=PARAMETERS, responses=OpenApiTypes.OBJECT)
    def get(self, request):
        form = ReportForm(request.query_params)
        if not form.is_valid():
            raise serializers.ValidationError({name: list(errors) for name, errors in form.errors.items()})
        spec = form.spec()
        reason = visibility.refusal(request.user, spec)
        if reason:
            raise PermissionDenied(reason)
        report = selectors.usage_report(request.user, spec)
        if request.accepted_renderer.format == "csv":
            name = exports.filename(report, "csv")
            return Response(
                exports.table(report), headers={"Content-Disposition": f'attachment; filename="{name}"'}
            )
        data = report_data(report)
        for extra in REPORT_EXTRAS:
            data.update(extra(request.user, spec))
        return Response(data)
