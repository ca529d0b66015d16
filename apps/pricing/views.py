"""The price list in the portal, GPU prices and cloud node prices: everyone signed in reads it;
finance and IT add, change and delete prices (each change audited through
``apps.pricing.services``); the estate roles read the audit trail."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
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
        raise PermissionDenied("Only finance and IT change prices.")


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


@login_required
def price_create(request):
    _editor_only(request)
    form = PriceForm(request.POST or None)
    if request.method == "POST" and _save(
        form, lambda data: services.create_price(**data, actor=request.user, via=VIA)
    ):
        messages.success(request, "Price added.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    return render(request, "pricing/price_form.html", {"form": form, "title": "Add a price"}, status=status)


@login_required
def price_edit(request, pk: int):
    _editor_only(request)
    price = get_object_or_404(selectors.prices(), pk=pk)
    title = f"Change {price}"
    form = PriceForm(request.POST or None, instance=price)
    if request.method == "POST" and _save(
        form, lambda data: services.update_price(price, **data, actor=request.user, via=VIA)
    ):
        messages.success(request, f"Price changed: {price}.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    return render(request, "pricing/price_form.html", {"form": form, "title": title}, status=status)


@login_required
def price_delete(request, pk: int):
    _editor_only(request)
    price = get_object_or_404(selectors.prices(), pk=pk)
    if request.method == "POST":
        services.delete_price(price, actor=request.user, via=VIA)
        messages.success(request, f"Price deleted: {price}.")
        return redirect("pricing:prices")
    return render(request, "pricing/price_confirm_delete.html", {"price": price})


@login_required
def node_price_create(request):
    _editor_only(request)
    form = NodePriceForm(request.POST or None)
    if request.method == "POST" and _save(
        form, lambda data: services.create_node_price(**data, actor=request.user, via=VIA)
    ):
        messages.success(request, "Node price added.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    context = {"form": form, "title": "Add a node price"}
    return render(request, "pricing/price_form.html", context, status=status)


@login_required
def node_price_edit(request, pk: int):
    _editor_only(request)
    price = get_object_or_404(selectors.node_prices(), pk=pk)
    title = f"Change {price}"
    form = NodePriceForm(request.POST or None, instance=price)
    if request.method == "POST" and _save(
        form, lambda data: services.update_node_price(price, **data, actor=request.user, via=VIA)
    ):
        messages.success(request, f"Node price changed: {price}.")
        return redirect("pricing:prices")
    status = 400 if form.errors else 200
    return render(request, "pricing/price_form.html", {"form": form, "title": title}, status=status)


@login_required
def node_price_delete(request, pk: int):
    _editor_only(request)
    price = get_object_or_404(selectors.node_prices(), pk=pk)
    if request.method == "POST":
        services.delete_node_price(price, actor=request.user, via=VIA)
        messages.success(request, f"Node price deleted: {price}.")
        return redirect("pricing:prices")
    return render(request, "pricing/node_price_confirm_delete.html", {"price": price})


@login_required
def price_changes(request):
    if not selectors.may_see_price_changes(request.user):
        raise PermissionDenied("Only IT, leadership and finance see the price audit trail.")
    table = PriceChangeTable(selectors.price_changes())
    RequestConfig(request, paginate={"per_page": 50}).configure(table)
    return render(request, "pricing/price_changes.html", {"table": table})
