"""What every portal page shares: the role check (403 otherwise), tables with their
pagination and safe exports, and the page render; and the home page, which sends each user to theirs."""

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django_tables2 import RequestConfig
from django_tables2.export import TableExport
from tablib import Dataset

from apps.accounts.models import Group
from apps.core.exports import spreadsheet_safe
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import estate_overview
from apps.portal import access, my_work


def allow(allowed: bool, reason: str) -> None:
    if not allowed:
        raise PermissionDenied(reason)


class SafeExport(TableExport):
    """A table export whose cells cannot run as spreadsheet formulas."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        rows = [tuple(spreadsheet_safe(value) for value in row) for row in self.dataset]
        self.dataset = Dataset(*rows, headers=self.dataset.headers)


def paged_tables(request, *tables, per_page: int = 25):
    """Sort and paginate the page's tables. ``?export=csv&table=NAME`` answers with that table,
    all of its rows, as CSV; None when no export is asked for."""
    for table in tables:
        RequestConfig(request, paginate={"per_page": per_page}).configure(table)
    wanted = request.GET.get("export")
    if not wanted:
        return None
    names = {table.prefix.rstrip("-"): table for table in tables}
    name = request.GET.get("table", "")
    if wanted != "csv" or name not in names:
        return HttpResponseBadRequest(f"export: use export=csv&table= one of {', '.join(sorted(names))}.")
    return SafeExport("csv", names[name]).response(f"{name}.csv")


def render_page(request, template: str, context: dict, tables=(), filters=(), status: int = 200):
    """The page, or one of its tables as CSV. A filter that refuses its value (the reason is on
    its field) makes the page a 400, and refuses the export rather than export unfiltered rows."""
    if not all(found.is_valid() for found in filters):
        if request.GET.get("export"):
            return HttpResponseBadRequest("export: a filter refuses its value (the page names the field).")
        status = 400
    exported = paged_tables(request, *tables)
    if exported is not None:
        return exported
    return render(request, template, context, status=status)


def kept(rows: list, found, pk) -> list:
    """The rows of a table built from a list whose object (``pk(row)``) the filter keeps."""
    kept = set(found.qs.values_list("pk", flat=True))
    return [row for row in rows if pk(row) in kept]


def group_or_404(slug: str) -> Group:
    return get_object_or_404(Group, slug=slug)


def policy_of(group: Group) -> ResourcePolicy:
    policy = ResourcePolicy.objects.select_related("group").filter(group=group).first()
    if policy is None:
        raise Http404(f"{group} has no resource policy.")
    return policy


@login_required
def home(request):
    context = estate_overview() | {
        "views": access.navigation(request.user),
        "latest": my_work.notifications(request.user).filter(read_at__isnull=True)[:5],
    }
    return render(request, "portal/home.html", context)
