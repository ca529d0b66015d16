from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin

from apps.accounts import admin_agents, services  # noqa: F401  (admin_agents: the agents' admin)
from apps.accounts.admin_scope import TENANT_ROLES, TenantScoped
from apps.accounts.models import ApiToken, Group, Membership, Project, User
from apps.core.fields import PLAIN_NUMBERS
from apps.core.formsets import CappedInline


class MembershipInline(CappedInline, TenantScoped, admin.TabularInline):
    model = Membership
    tenant_owns = "subtree"
    extra = 0
    autocomplete_fields = ["user", "group"]
    readonly_fields = ["source"]

    def get_queryset(self, request):
        """A tenant admin's inline holds only the roles they may give; estate roles stay IT's."""
        queryset = super().get_queryset(request)
        return queryset if self.scope(request) is None else queryset.filter(role__in=TENANT_ROLES)


@admin.register(User)
class UserAdmin(DjangoUserAdmin):
    inlines = [MembershipInline]
    list_display = ["username", "email", "first_name", "last_name", "roles", "is_staff", "is_active"]

    @admin.display(description="roles")
    def roles(self, user: User) -> str:
        return ", ".join(sorted({m.get_role_display() for m in user.memberships.all()}))

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("memberships")

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        services.sync_staff(form.instance)


class ChildGroupInline(CappedInline, TenantScoped, admin.TabularInline):
    model = Group
    tenant_group = "pk"
    fk_name = "parent"
    fields = ["name", "slug", "kind"]
    extra = 0
    verbose_name = "child group"
    show_change_link = True


class GroupForm(forms.ModelForm):
    """Moving a group (and its subtree) is refused when it would break a policy's envelope: the
    reservations under the new parent's policy above its reservation, a limit above it, ..."""

    class Meta:
        model = Group
        fields = ["name", "slug", "kind", "parent", "cost_centre"]

    def clean(self):
        data = super().clean()
        if self.instance.pk is not None and "parent" in data and not self.errors:
            for check in Group.move_checks:
                for message in check(self.instance, data["parent"]):
                    self.add_error("parent", message)
        return data


@admin.register(Group)
class GroupAdmin(TenantScoped, admin.ModelAdmin):
    form = GroupForm
    tenant_group = "pk"
    list_display = ["name", "kind", "parent", "slug", "cost_centre"]
    list_filter = ["kind"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    autocomplete_fields = ["parent"]
    inlines = [ChildGroupInline, MembershipInline]
    list_select_related = ["parent"]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        for user in User.objects.filter(memberships__group=form.instance).distinct():
            services.sync_staff(user)


@admin.register(Membership)
class MembershipAdmin(TenantScoped, admin.ModelAdmin):
    tenant_owns = "subtree"
    list_display = ["user", "role", "group", "source", "created_at"]
    list_filter = ["role", "group__kind", "source"]
    search_fields = ["user__username", "user__email", "group__name"]
    autocomplete_fields = ["user", "group"]
    list_select_related = ["user", "group"]

    def tenant_may_change(self, membership: Membership) -> bool:
        return membership.role in TENANT_ROLES

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        services.sync_staff(obj.user)

    def delete_model(self, request, obj):
        services.remove_membership(obj)

    def delete_queryset(self, request, queryset):
        for membership in queryset:
            services.remove_membership(membership)


@admin.register(Project)
class ProjectAdmin(TenantScoped, admin.ModelAdmin):
    tenant_owns = "subtree"
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["name", "group"]
    search_fields = ["name", "group__name"]
    list_filter = [("group", admin.RelatedOnlyFieldListFilter)]
    autocomplete_fields = ["group"]
    list_select_related = ["group"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """IT sees personal tokens (never the tokens themselves) and can revoke them; only their user
    creates them, in the portal, where each is shown once."""

    list_display = [
        "name",
        "user",
        "agent",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    search_fields = ["name", "prefix", "user__username"]
    list_select_related = ["user", "agent"]
    readonly_fields = [
        "user",
        "agent",
        "name",
        "prefix",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    exclude = ["token_hash"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            services.revoke_api_token(token)
