"""Tenant admins in the Django admin. A model admin (or inline) with ``TenantScoped`` shows, offers
and changes only what lies inside the tenant admin's subtrees (``selectors.tenant_scope``); IT
admins and superusers are not limited. Lists, change forms, foreign key choices, autocomplete and
related-only filters all read the scoped queryset; an object outside the subtree is a 404."""

from django.http import Http404

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import TenantScope, tenant_scope

Role = Membership.Role
# Roles a tenant admin may give inside their subtree; estate roles (IT, leadership, finance) stay IT's.
TENANT_ROLES = (Role.TENANT_ADMIN, Role.DEPARTMENT_HEAD, Role.TEAM_LEAD, Role.MEMBER)


class TenantScoped:
    """``tenant_group``: the lookup from the model to the group it belongs to (``"pk"`` for groups).
    ``tenant_owns``: ``"below"`` when a tenant admin changes only rows of groups strictly below
    their root (the root's own row is IT's), ``"subtree"`` when the root's rows too."""

    tenant_group = "group"
    tenant_owns = "below"

    def scope(self, request) -> TenantScope | None:
        if not hasattr(request, "_tenant_scope"):
            request._tenant_scope = tenant_scope(request.user)
        return request._tenant_scope

    def owned(self, scope: TenantScope) -> frozenset[int]:
        return scope.below if self.tenant_owns == "below" else scope.groups

    def group_id_of(self, obj) -> int | None:
        *path, last = self.tenant_group.split("__")
        for name in path:
            obj = getattr(obj, name, None)
            if obj is None:
                return None
        return obj.pk if last == "pk" else getattr(obj, f"{last}_id", None)

    def tenant_may_change(self, obj) -> bool:
        """A further rule on rows inside the subtree; every row by default."""
        return True

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        scope = self.scope(request)
        if scope is None:
            return queryset
        return queryset.filter(**{f"{self.tenant_group}__in": scope.groups})

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None and self.scope(request) is not None:
            raise Http404("No such object in your subtree.")
        return obj

    def _inside(self, request, obj, *, change: bool) -> bool:
        scope = self.scope(request)
        if scope is None or obj is None or not isinstance(obj, self.model):
            return True
        groups = self.owned(scope) if change else scope.groups
        return self.group_id_of(obj) in groups and (not change or self.tenant_may_change(obj))

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._inside(request, obj, change=False)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._inside(request, obj, change=True)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._inside(request, obj, change=True)

    def get_autocomplete_fields(self, request):
        """Autocomplete only where the tenant admin may view the target (its admin scopes the
        search); other foreign keys become plain selects of the scoped choices."""
        fields = super().get_autocomplete_fields(request)
        if self.scope(request) is None:
            return fields
        registry = self.admin_site._registry
        kept = []
        for name in fields:
            target = registry.get(self.model._meta.get_field(name).remote_field.model)
            if target is not None and target.has_view_permission(request):
                kept.append(name)
        return kept

    def tenant_choices(self, request, db_field, scope: TenantScope):
        """The choices a tenant admin gets for a foreign key; ``None``: not limited here."""
        model = db_field.remote_field.model
        if model is Group:
            groups = scope.groups if db_field.name == "parent" else self.owned(scope)
            return Group.objects.filter(pk__in=groups)
        if model is User:
            return User.objects.filter(memberships__group__in=scope.groups).distinct()
        return None

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        scope = self.scope(request)
        choices = None if scope is None else self.tenant_choices(request, db_field, scope)
        if choices is not None:
            kwargs["queryset"] = choices
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if choices is not None and field is not None:
            field.required = True  # an empty value would place the row outside the subtree
        return field

    def formfield_for_choice_field(self, db_field, request, **kwargs):
        if db_field.name == "role" and self.model is Membership and self.scope(request) is not None:
            kwargs["choices"] = [(role.value, role.label) for role in TENANT_ROLES]
        return super().formfield_for_choice_field(db_field, request, **kwargs)
