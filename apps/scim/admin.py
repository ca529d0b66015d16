"""IT's admin for SCIM: identity providers (a new one's token, or a rotated one, is shown once)
and, read-only, what each has provisioned."""

from django.contrib import admin, messages

from apps.scim import services
from apps.scim.models import IdentityProvider, ScimGroup, ScimUser


@admin.register(IdentityProvider)
class IdentityProviderAdmin(admin.ModelAdmin):
    list_display = ["name", "prefix", "active", "created_at", "last_used_at"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    fields = ["name", "active", "prefix", "created_at", "last_used_at"]
    actions = ["rotate_tokens"]

    def save_model(self, request, obj, form, change):
        if change:
            return super().save_model(request, obj, form, change)
        created, raw = services.create_provider(name=obj.name)
        obj.pk, obj.prefix, obj.token_hash = created.pk, created.prefix, created.token_hash
        obj.created_at = created.created_at
        if not obj.active:
            IdentityProvider.objects.filter(pk=obj.pk).update(active=False)
        self._show_token(request, obj, raw)

    @admin.action(description="Give the selected providers new SCIM tokens (shown once)")
    def rotate_tokens(self, request, queryset):
        for provider in queryset:
            self._show_token(request, provider, services.rotate_token(provider))

    def _show_token(self, request, provider, raw: str) -> None:
        messages.warning(
            request,
            f"SCIM token of {provider.name}: {raw} (copy it into the identity provider now; "
            "it is not shown again)",
        )


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ScimUser)
class ScimUserAdmin(ReadOnly):
    list_display = ["user", "provider", "external_id", "scim_id", "updated_at"]
    list_filter = ["provider"]
    search_fields = ["user__username", "external_id"]
    readonly_fields = ["provider", "user", "scim_id", "external_id", "document", "created_at", "updated_at"]


@admin.register(ScimGroup)
class ScimGroupAdmin(ReadOnly):
    list_display = ["display_name", "provider", "external_id", "scim_id", "updated_at"]
    list_filter = ["provider"]
    search_fields = ["display_name", "external_id"]
    readonly_fields = [
        "provider",
        "display_name",
        "scim_id",
        "external_id",
        "members",
        "document",
        "created_at",
        "updated_at",
    ]
