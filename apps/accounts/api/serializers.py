from rest_framework import serializers

from apps.accounts.models import Membership


class MembershipSerializer(serializers.ModelSerializer):
    group = serializers.CharField(source="group.name")
    group_slug = serializers.CharField(source="group.slug")

    class Meta:
        model = Membership
        fields = ["group", "group_slug", "role"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    roles = serializers.ListField(child=serializers.CharField())
    memberships = MembershipSerializer(many=True)
