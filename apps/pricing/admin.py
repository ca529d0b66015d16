from django.contrib import admin

from apps.pricing.models import Price


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    list_display = ["gpu_type", "per_gpu_hour", "currency", "effective_from"]
    list_filter = ["gpu_type", "currency"]
    search_fields = ["gpu_type__name"]
    date_hierarchy = "effective_from"
    list_select_related = ["gpu_type"]
