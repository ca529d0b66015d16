"""``/api/v1/agents/``: an owner creates (the token is answered once), lists, changes and kills their
agents; a lead (team lead, department head, tenant admin of a group the owner belongs to) and IT
see them, set their lead caps (``lead_<cap>``: a ceiling the owner cannot raise) and kill them.
An agent's own token cannot manage agents."""

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied
from rest_framework.response import Response

from apps.accounts import agents
from apps.accounts.api.authentication import agent_of
from apps.accounts.models import Agent
from apps.core.errors import refusal
from apps.core.fields import PlainDecimalField, StrictCharField


class CapField(PlainDecimalField):
    """A cap: a number of at least 0, or null for no cap (never empty text)."""

    def validate_empty_values(self, data):
        if data == "":
            self.fail("invalid")
        return super().validate_empty_values(data)


CAP = {"allow_null": True, "required": False, "min_value": 0}
GPUS = {"max_digits": 9, "decimal_places": 3, **CAP}
HOURS = {"max_digits": 12, "decimal_places": 3, **CAP}
MONEY = {"max_digits": 14, "decimal_places": 2, **CAP}


class AgentSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    label = serializers.CharField(
        read_only=True, help_text='How reports name its work: "<owner> via agent <name>".'
    )
    stopped_by = serializers.CharField(
        source="stopped_by.username", read_only=True, default=None, allow_null=True
    )
    lead_caps = serializers.JSONField(read_only=True, help_text="Caps a lead set: a ceiling for the owner.")
    caps_in_force = serializers.SerializerMethodField(
        help_text="The lower of the owner's and the lead's cap."
    )
    usage = serializers.SerializerMethodField(help_text="GPU-hours and budget hours today, cost this month.")
    token = serializers.CharField(
        read_only=True, required=False, help_text="Only in the answer that creates it."
    )

    class Meta:
        model = Agent
        fields = [
            "id",
            "name",
            "owner",
            "label",
            "purpose",
            "created_at",
            "stopped_at",
            "stopped_by",
            *Agent.CAPS,
            "lead_caps",
            "caps_in_force",
            "usage",
            "token",
        ]
        read_only_fields = ["created_at", "stopped_at"]

    def get_caps_in_force(self, agent) -> dict:
        return {name: None if (cap := agent.cap(name)) is None else str(cap) for name in Agent.CAPS}

    def get_usage(self, agent) -> dict:
        figures = self.context.get("usage", {}).get(agent.pk, {})
        return {
            key: str(value) if value is not None and not isinstance(value, bool | str) else value
            for key, value in figures.items()
        }


class AgentChangeSerializer(serializers.Serializer):
    name = StrictCharField(max_length=100, required=False)
    purpose = StrictCharField(allow_blank=True, max_length=2000, required=False)
    max_gpus = CapField(**GPUS)
    max_gpu_hours_per_day = CapField(**HOURS)
    max_budget_hours_per_day = CapField(**HOURS)
    max_money_per_month = CapField(**MONEY)
    lead_max_gpus = CapField(**GPUS)
    lead_max_gpu_hours_per_day = CapField(**HOURS)
    lead_max_budget_hours_per_day = CapField(**HOURS)
    lead_max_money_per_month = CapField(**MONEY)


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Conflict."


class AgentCreateSerializer(AgentChangeSerializer):
    name = StrictCharField(max_length=100)


def _as_400(error: DjangoValidationError) -> APIException:
    """A refused input answers 400 naming the field; a name already taken 409."""
    if isinstance(error, agents.NameTaken):
        return Conflict(" ".join(error.messages))
    return refusal(error)


@extend_schema_view(
    list=extend_schema(summary="Your agents, and for leads their members' agents"),
    retrieve=extend_schema(summary="An agent with its caps and its spend"),
)
class AgentViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = AgentSerializer
    queryset = Agent.objects.none()
    pagination_class = None
    filter_backends = []
    error_statuses = {
        "list": (403,),
        "retrieve": (403,),
        "create": (403, 409),
        "partial_update": (403, 409),
        "kill": (403,),
        "token": (403,),
    }

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        if agent_of(request) is not None:
            raise PermissionDenied(
                "An agent's token cannot manage agents; use its owner's own token or the portal."
            )

    def get_queryset(self):
        return agents.agents_visible_to(self.request.user)

    def get_object(self):
        pk = str(self.kwargs["pk"])
        found = Agent.objects.select_related("owner", "stopped_by")
        agent = found.filter(pk=int(pk)).first() if pk.isdigit() and len(pk) < 19 else None
        if agent is None or not (
            agents.may_manage(self.request.user, agent) or agents.may_lead(self.request.user, agent)
        ):
            raise PermissionDenied(
                "Only the agent's owner, a lead of the owner's group and IT may see or change it."
            )
        return agent

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if self.action == "list":
            context["usage"] = agents.usage_of(list(self.get_queryset()))
        elif self.kwargs.get("pk"):
            context["usage"] = agents.usage_of([self.get_object()])
        return context

    @extend_schema(
        summary="Create an agent: its token is in this answer only",
        request=AgentCreateSerializer,
        responses={201: AgentSerializer},
    )
    def create(self, request):
        data = AgentCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = {k: v for k, v in data.validated_data.items() if not k.startswith("lead_")}
        try:
            agent, raw = agents.create_agent(owner=request.user, **fields)
        except DjangoValidationError as error:
            raise _as_400(error) from error
        answer = AgentSerializer(agent, context={"usage": agents.usage_of([agent])}).data
        answer["token"] = raw
        return Response(answer, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Change an agent's name, purpose, caps or lead caps", request=AgentChangeSerializer
    )
    def partial_update(self, request, pk=None):
        agent = self.get_object()
        data = AgentChangeSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        try:
            agent = agents.update_agent(agent, actor=request.user, **data.validated_data)
        except PermissionError as refused:
            raise PermissionDenied(str(refused)) from refused
        except DjangoValidationError as error:
            raise _as_400(error) from error
        return Response(AgentSerializer(agent, context=self.get_serializer_context()).data)

    @extend_schema(summary="Kill switch: stop the agent, revoke its tokens, stop its work", request=None)
    @action(detail=True, methods=["post"])
    def kill(self, request, pk=None):
        agent = agents.kill_agent(self.get_object(), actor=request.user)
        return Response(AgentSerializer(agent, context=self.get_serializer_context()).data)

    @extend_schema(summary="A new token for the agent (owner only), answered once", request=None)
    @action(detail=True, methods=["post"])
    def token(self, request, pk=None):
        agent = self.get_object()
        if not agents.may_manage(request.user, agent):
            raise PermissionDenied("Only the agent's owner creates its tokens.")
        try:
            raw = agents.issue_token(agent)
        except DjangoValidationError as error:
            raise _as_400(error) from error
        return Response({"token": raw}, status=status.HTTP_201_CREATED)
