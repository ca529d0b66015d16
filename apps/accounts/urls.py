from django.urls import path

from apps.accounts import views, views_agents

app_name = "accounts"

urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.revoke_token, name="revoke-token"),
    path("agents/", views_agents.agents_page, name="agents"),
    path("agents/<int:pk>/kill/", views_agents.kill_agent, name="kill-agent"),
    path("agents/<int:pk>/caps/", views_agents.set_caps, name="agent-caps"),
]
