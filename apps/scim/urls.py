"""/scim/v2/ (docs/governance.md, "SCIM provisioning")."""

from django.urls import path, re_path

from apps.scim import views

app_name = "scim"

urlpatterns = [
    path("ServiceProviderConfig", views.service_provider_config, name="config"),
    path("ResourceTypes", views.resource_types, name="resource-types"),
    path("ResourceTypes/<str:scim_id>", views.resource_types, name="resource-type"),
    path("Schemas", views.schemas, name="schemas"),
    path("Schemas/<str:scim_id>", views.schemas, name="schema"),
    path(".search", views.root_search, name="search"),
    path("Users", views.resource_list, {"kind": views.USERS}, name="users"),
    path("Users/.search", views.resource_search, {"kind": views.USERS}, name="user-search"),
    path("Users/<str:scim_id>", views.resource_detail, {"kind": views.USERS}, name="user"),
    path("Groups", views.resource_list, {"kind": views.GROUPS}, name="groups"),
    path("Groups/.search", views.resource_search, {"kind": views.GROUPS}, name="group-search"),
    path("Groups/<str:scim_id>", views.resource_detail, {"kind": views.GROUPS}, name="group"),
    re_path(r"^(?P<path>.*)$", views.unknown, name="unknown"),
]
