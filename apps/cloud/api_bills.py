"""The cloud bill over the API (``/api/v1/cloud/bills/``): finance and IT at the organisation's
root import a month's AWS CUR 2.0 file (multipart ``POST``), read the month's reconciliation and
book a closed month's difference of one pool. Anyone else gets 403 (``docs/cloud.md``)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import parsers, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from apps.cloud import bill_reconcile, bills
from apps.cloud.bills import MONTH, month_of
from apps.cloud.models import CloudBill, CloudBillBooking, CloudPool
from apps.core.errors import refusal
from apps.core.parsers import JSONParser

MONTH_HELP = "The UTC month, as 2026-11."


class MayReconcile(permissions.BasePermission):
    message = "Only finance and IT of the whole organisation reconcile the cloud bill."

    def has_permission(self, request, view) -> bool:
        return bills.may_reconcile(request.user)


class MonthField(serializers.RegexField):
    def __init__(self, **kwargs):
        super().__init__(MONTH.pattern, help_text=MONTH_HELP, **kwargs)
        self.error_messages["invalid"] = "Give the month as YYYY-MM, such as 2026-11."


class CloudBillSerializer(serializers.ModelSerializer):
    imported_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    via = serializers.CharField(read_only=True, help_text="portal or api")
    file_format = serializers.CharField(read_only=True, help_text="csv, csv.gz or parquet")
    month = serializers.DateField(read_only=True)

    class Meta:
        model = CloudBill
        fields = [
            "id",
            "month",
            "file_name",
            "file_format",
            "currency",
            "imported_by",
            "imported_at",
            "via",
            "rows_read",
            "rows_kept",
            "rows_other",
            "rows_outside",
            "lines_matched",
        ]
        read_only_fields = fields


class ImportSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="A CUR 2.0 file: CSV, gzip'd CSV or Parquet.")
    month = MonthField()


class BookingSerializer(serializers.ModelSerializer):
    pool = serializers.CharField(source="cloud_pool.pool.name", read_only=True)
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True)
    via = serializers.CharField(read_only=True, help_text="portal or api")

    class Meta:
        model = CloudBillBooking
        fields = ["id", "pool", "month", "amount", "currency", "bill", "adjustment", "actor", "via", "at"]
        read_only_fields = fields


class BookSerializer(serializers.Serializer):
    month = MonthField()
    pool = serializers.CharField(max_length=80, help_text="The cloud pool's name.")


def _money() -> serializers.DecimalField:
    return serializers.DecimalField(max_digits=18, decimal_places=2)


class InstanceSerializer(serializers.Serializer):
    instance_id = serializers.CharField()
    node = serializers.CharField(help_text="The Klique node; empty for an instance Klique does not know.")
    cause = serializers.ChoiceField(choices=["matched", "unmatched", "missing"])
    klique_hours = serializers.CharField()
    bill_hours = serializers.CharField()
    klique_rate = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True)
    bill_rate = serializers.DecimalField(max_digits=18, decimal_places=2, allow_null=True)
    klique, bill, difference, price, hours = _money(), _money(), _money(), _money(), _money()


class PoolFiguresSerializer(serializers.Serializer):
    pool = serializers.CharField(help_text="Empty: instances on the bill that no pool claims.")
    klique, bill, difference = _money(), _money(), _money()
    unmatched, missing, price, hours = _money(), _money(), _money(), _money()
    unpriced_hours = serializers.DecimalField(max_digits=18, decimal_places=3)
    booking = BookingSerializer(allow_null=True)
    instances = InstanceSerializer(many=True)


class ReconciliationSerializer(serializers.Serializer):
    month = serializers.DateField()
    bill = CloudBillSerializer()
    currency = serializers.CharField()
    closed = serializers.BooleanField(help_text="The month is closed: its differences may be booked.")
    pools = PoolFiguresSerializer(many=True)


class CloudBillViewSet(viewsets.GenericViewSet):
    """Imported cloud bills, newest month first; the month's reconciliation; booking a difference."""

    queryset = CloudBill.objects.select_related("imported_by")
    serializer_class = CloudBillSerializer
    permission_classes = [permissions.IsAuthenticated, MayReconcile]
    parser_classes = [parsers.MultiPartParser, parsers.FormParser]  # the import: a file
    error_statuses = {"list": (403,), "create": (403,), "reconciliation": (403, 404), "bookings": (403,)}

    def list(self, request):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(CloudBillSerializer(page, many=True).data)

    @extend_schema(request={"multipart/form-data": ImportSerializer}, responses={201: CloudBillSerializer})
    def create(self, request):
        """Import a month's CUR 2.0 file; a file Klique cannot use is a 400 on ``file``."""
        incoming = ImportSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            bill = bills.import_bill(
                incoming.validated_data["file"],
                month_of(incoming.validated_data["month"]),
                actor=request.user,
                via=CloudBill.Via.API,
            )
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(CloudBillSerializer(bill).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[
            OpenApiParameter("month", str, required=True, pattern=MONTH.pattern, description=MONTH_HELP)
        ],
        responses={200: ReconciliationSerializer},
    )
    @action(detail=False, methods=["get"])
    def reconciliation(self, request):
        """Per pool: what Klique charged, what the bill says, the difference and its causes; 404
        when no bill of the month is imported."""
        text = request.query_params.get("month", "")
        if not MONTH.match(text):
            raise serializers.ValidationError({"month": ["Give the month as YYYY-MM, such as 2026-11."]})
        found = bill_reconcile.reconcile(month_of(text))
        if found is None:
            raise NotFound(f"No cloud bill of {month_of(text):%B %Y} is imported.")
        return Response(ReconciliationSerializer(found).data)

    @extend_schema(request=BookSerializer, responses={201: BookingSerializer})
    @action(detail=False, methods=["post"], parser_classes=[JSONParser])
    def bookings(self, request):
        """Book one pool's difference of a closed month as an adjustment (once per pool and month)."""
        incoming = BookSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        name = incoming.validated_data["pool"]
        cloud_pool = CloudPool.objects.filter(pool__name=name).first()
        if cloud_pool is None:
            raise serializers.ValidationError({"pool": [f"Unknown pool {name}."]})
        try:
            booking = bill_reconcile.book(
                cloud_pool,
                month_of(incoming.validated_data["month"]),
                actor=request.user,
                via=CloudBillBooking.Via.API,
            )
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(BookingSerializer(booking).data, status=status.HTTP_201_CREATED)
