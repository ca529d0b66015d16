"""Who decides how the estate is shared: leadership's split of the organisation's quota among
business units, and a tenant admin's page of their subtree."""

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.urls import reverse

from apps.policies.split import may_split_quota
from apps.portal import access, selectors
from apps.portal.it_tables import PolicyUseTable
from apps.portal.views.common import allow, group_or_404, policy_of, render_page
from apps.portal.views.department import split_page


@login_required
def leadership_split(request):
    """The organisation's reservation, limit and budget hours shared among business units, on the
    department heads' split page: the same rules, audit and version check."""
    organisation = access.organisation_to_split(request.user)
    if organisation is None:
        raise Http404("There is no organisation to split.")
    allow(
        may_split_quota(request.user, organisation),
        f"Only leadership and IT share out {organisation}'s quota.",
    )
    return split_page(request, organisation, back=reverse("portal:leadership"), unit="business unit")


@login_required
def tenant(request, slug: str):
    """A tenant admin's subtree: policies with their use, compute resources, available profiles."""
    group = group_or_404(slug)
    allow(access.may_see_tenant(request.user, group), f"Only IT and the tenant admins of {group} see it.")
    overview = selectors.tenant_overview(group)
    policies = PolicyUseTable(overview.policies, prefix="policies-")
    context = {
        "group": group,
        "policy": policy_of(group),
        "overview": overview,
        "policies": policies,
        "may_split": may_split_quota(request.user, group),
    }
    return render_page(request, "portal/tenant.html", context, [policies])
