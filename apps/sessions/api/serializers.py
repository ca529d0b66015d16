from django.contrib.auth import get_user_model
from rest_framework import serializers

from apps.sessions.models import SessionKind


class SessionKindSerializer(serializers.ModelSerializer):
    class Meta:
        model = SessionKind
        fields = ["id", "name", "type", "description"]
        read_only_fields = fields


class SessionSerializer(serializers.Serializer):
    """A session as people see it; ``token`` and ``open_url`` only for its owner."""

    kind = serializers.CharField()
    type = serializers.CharField()
    ready = serializers.BooleanField()
    url = serializers.CharField(allow_null=True, help_text="Where the server answers, once ready.")
    token = serializers.CharField(allow_null=True, help_text="The session's secret (owner only).")
    open_url = serializers.CharField(allow_null=True, help_text="The URL with the token (owner only).")
    cpu_percent = serializers.FloatField(allow_null=True)
    gpu_util = serializers.FloatField(allow_null=True)
    net_bytes = serializers.IntegerField(allow_null=True)
    connections = serializers.IntegerField(allow_null=True)
    last_activity = serializers.DateTimeField(allow_null=True)
    sampled_at = serializers.DateTimeField(allow_null=True)
    stopped_by = serializers.CharField(
        allow_null=True, help_text="The idle limit that stopped it: lifetime, cpu, gpu, network, jupyter."
    )


class SharingSerializer(serializers.Serializer):
    """Who besides its owner may open a session through the session gateway, by username."""

    users = serializers.SlugRelatedField(
        slug_field="username", many=True, queryset=get_user_model().objects.filter(is_active=True)
    )

    @staticmethod
    def of(session) -> dict:
        return {"users": sorted(session.shared_with.values_list("username", flat=True))}
