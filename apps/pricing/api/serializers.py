from rest_framework import serializers

from apps.pricing.models import NodePrice, Price


class PriceSerializer(serializers.ModelSerializer):
    gpu_type = serializers.CharField(source="gpu_type.name")

    class Meta:
        model = Price
        fields = ["id", "gpu_type", "currency", "per_gpu_hour", "effective_from"]
        read_only_fields = fields


class NodePriceSerializer(serializers.ModelSerializer):
    class Meta:
        model = NodePrice
        fields = ["id", "instance_type", "market", "currency", "per_node_hour", "effective_from"]
        read_only_fields = fields
