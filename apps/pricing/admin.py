"""Prices in the admin. Saves and deletions go through ``apps.pricing.services`` so that each one
is audited; only finance and IT may change prices. The audit trail is read-only."""

from django.contrib import admin

from apps.core.audit_admin import AuditTrailAdmin
from apps.core.fields import PLAIN_NUMBERS
from apps.pricing import selectors, services
from apps.pricing.models import NodePrice, Price, PriceChange
from apps.pricing.tables import PRICE_CHANGE_COLUMNS
from klique import numbers

VIA = PriceChange.Via.ADMIN


@admin.display(description="price per GPU-hour", ordering="per_gpu_hour")
def gpu_hour_price(price: Price) -> str:
    return numbers.price(price.per_gpu_hour, price.currency)


@admin.display(description="price per node-hour", ordering="per_node_hour")
def node_hour_price(price: NodePrice) -> str:
    return numbers.price(price.per_node_hour, price.currency)


class _AuditedPriceAdmin(admin.ModelAdmin):
    """Only finance and IT add, change and delete; each write goes through the audited service."""

    audited: services.AuditedPrices

    def _may_edit(self, request) -> bool:
        return selectors.may_edit_prices(request.user)

    def has_add_permission(self, request):
        return self._may_edit(request) and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None):
        return self._may_edit(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._may_edit(request) and super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        self.audited.save(obj, actor=request.user, via=VIA)

    def delete_model(self, request, obj):
        self.audited.delete(obj, actor=request.user, via=VIA)

    def delete_queryset(self, request, queryset):
        if self.audited.related:
            queryset = queryset.select_related(*self.audited.related)
        for price in queryset:
            self.audited.delete(price, actor=request.user, via=VIA)


@admin.register(Price)
class PriceAdmin(_AuditedPriceAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["gpu_type", gpu_hour_price, "currency", "effective_from"]
    list_filter = ["gpu_type", "currency"]
    search_fields = ["gpu_type__name"]
    date_hierarchy = "effective_from"
    list_select_related = ["gpu_type"]
    audited = services.GPU_PRICES


@admin.register(NodePrice)
class NodePriceAdmin(_AuditedPriceAdmin):
    """Cloud node prices per node-hour, per instance type (the provider's name) and market."""

    formfield_overrides = PLAIN_NUMBERS
    list_display = ["instance_type", "market", node_hour_price, "currency", "effective_from"]
    list_filter = ["market", "currency"]
    search_fields = ["instance_type"]
    date_hierarchy = "effective_from"
    audited = services.NODE_PRICES


@admin.register(PriceChange)
class PriceChangeAdmin(AuditTrailAdmin):
    list_display = PRICE_CHANGE_COLUMNS
    list_filter = ["action", "via", "gpu_type", "market", "currency"]
    date_hierarchy = "at"
    list_select_related = ["gpu_type", "actor"]
    fields = [
        "price",
        "node_price",
        "gpu_type",
        "instance_type",
        "market",
        "currency",
        "action",
        "before",
        "after",
        "actor",
        "via",
        "at",
    ]
