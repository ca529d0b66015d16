from rest_framework import serializers

from apps.pricing.models import Price


class PriceSerializer(serializers.ModelSerializer):
    gpu_type = serializers.CharField(source="gpu_type.name")

    class Meta:
        model = Price
        fields = ["id", "gpu_type", "currency", "per_gpu_hour", "effective_from"]
        read_only_fields = fields
