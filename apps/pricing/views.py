"""The price list in the portal, GPU prices and cloud node prices: everyone signed in reads it;
IT and finance at the organisation's root add, change and delete prices (each change audited
through ``apps.pricing.services``) and read the audit trail with leadership at the root."""

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.forms import ModelForm
from django.shortcuts import get_object_or_404, redirect, render
from django_tables2 import RequestConfig

from apps.pricing import selectors, services
from apps.pricing.filters import NodePriceFilter, PriceFilter
from apps.pricing.forms import NodePriceForm, PriceForm
from apps.pricing.models import PriceChange
from apps.pricing.tables import NodePriceTable, PriceChangeTable, PriceTable

VIA = PriceChange.Via.PORTAL


def _editor_only(request) -> None:
    if not selectors.may_edit_prices(request.user):
        raise PermissionDenied("Only IT and finance of the whole organisation change prices.")


@login_required
def prices(request):
    editor = selectors.may_edit_prices(request.user)
    found = PriceFilter(request.GET, queryset=selectors.prices())
    found_nodes = NodePriceFilter(request.GET, queryset=selectors.node_prices(), prefix="n")
    table = PriceTable(found.qs, exclude=() if editor else ("actions",))
    nodes = NodePriceTable(found_nodes.qs, exclude=() if editor else ("actions",), prefix="nodes-")
    for shown in (table, nodes):
        RequestConfig(request, paginate={"per_page": 50}).configure(shown)
    context = {
        "filter": found,
        "table": table,
        "node_filter": found_nodes,
        "nodes": nodes,
        "editor": editor,
        "audit": selectors.may_see_price_changes(request.user),
    }
    valid = found.is_valid() and found_nodes.is_valid()
    return render(request, "pricing/prices.html", context, status=200 if valid else 400)


def _save(form, save) -> bool:
    """Run a service on a valid form; its refusals become form errors."""
    if not form.is_valid():
        return False
    try:
        save(form.cleaned_data)
    except ValidationError as error:
        form.add_error(None, error)
        return False
    return True


@dataclass(frozen=True)
class _Kind:
    """What the add, change and delete pages of GPU prices and of node prices differ by."""

    noun: str
    form: type[ModelForm]
    listed: Callable[[], QuerySet]
    create: Callable
    update: Callable
    delete: Callable
    confirm_delete: str


GPU_PRICES = _Kind(
    "price",
    PriceForm,
    selectors.prices,
    services.create_price,
    services.update_price,
    services.delete_price,
    "pricing/price_confirm_delete.html",
)
NODE_PRICES = _Kind(
    "node price",
    NodePriceForm,
    selectors.node_prices,
    services.create_node_price,
    services.update_node_price,
    services.delete_node_price,
    "pricing/node_price_confirm_delete.html",
)


def _create(request, kind: _Kind):
    _editor_only(request)
    form = kind.form(request.POST or None)
    if request.method == "POST" and _save(
        form, lambda data: kind.create(**data, actor=request.user, via=VIA)
    ):
        messages.success(request, f"{kind.noun.capitalize()} added.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    context = {"form": form, "title": f"Add a {kind.noun}"}
    return render(request, "pricing/price_form.html", context, status=status)


def _edit(request, pk: int, kind: _Kind):
    _editor_only(request)
    price = get_object_or_404(kind.listed(), pk=pk)
    title = f"Change {price}"
    form = kind.form(request.POST or None, instance=price)
    if request.method == "POST" and _save(
        form, lambda data: kind.update(price, **data, actor=request.user, via=VIA)
    ):
        messages.success(request, f"{kind.noun.capitalize()} changed: {price}.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    return render(request, "pricing/price_form.html", {"form": form, "title": title}, status=status)


def _delete(request, pk: int, kind: _Kind):
    _editor_only(request)
    price = get_object_or_404(kind.listed(), pk=pk)
    if request.method == "POST":
        kind.delete(price, actor=request.user, via=VIA)
        messages.success(request, f"{kind.noun.capitalize()} deleted: {price}.")
        return redirect("pricing:prices")
    return render(request, kind.confirm_delete, {"price": price})


@login_required
def price_create(request):
    return _create(request, GPU_PRICES)


@login_required
def price_edit(request, pk: int):
    return _edit(request, pk, GPU_PRICES)


@login_required
def price_delete(request, pk: int):
    return _delete(request, pk, GPU_PRICES)


@login_required
def node_price_create(request):
    return _create(request, NODE_PRICES)


@login_required
def node_price_edit(request, pk: int):
    return _edit(request, pk, NODE_PRICES)


@login_required
def node_price_delete(request, pk: int):
    return _delete(request, pk, NODE_PRICES)


@login_required
def price_changes(request):
    if not selectors.may_see_price_changes(request.user):
        raise PermissionDenied(
            "Only IT, and leadership and finance of the whole organisation, see the price audit trail."
        )
    table = PriceChangeTable(selectors.price_changes())
    RequestConfig(request, paginate={"per_page": 50}).configure(table)
    return render(request, "pricing/price_changes.html", {"table": table})
