"""IT's admin of agents: their caps (the owner's and a lead's), their tokens, and the kill switch as
an action. Agents are created by their owners (portal or API), where the token is shown once."""

from django.contrib import admin

from apps.accounts import agents
from apps.accounts.models import Agent
from apps.core.fields import PLAIN_NUMBERS


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "purpose", *Agent.CAPS, "lead_caps", "created_at", "stopped_at"]
    list_filter = [("stopped_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "owner__username", "purpose"]
    list_select_related = ["owner"]
    # Lead caps are set where their rules are checked: the agents page and the API (as IT).
    readonly_fields = ["owner", "lead_caps", "created_at", "stopped_at", "stopped_by"]
    actions = ["kill"]
    formfield_overrides = PLAIN_NUMBERS

    def has_add_permission(self, request):
        return False

    @admin.action(description="Kill switch: stop the agents, revoke their tokens, stop their work")
    def kill(self, request, queryset):
        for agent in queryset:
            agents.kill_agent(agent, actor=request.user)
        self.message_user(request, f"{queryset.count()} agents stopped.")
