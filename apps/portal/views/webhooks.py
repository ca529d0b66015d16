"""A group's webhooks in the portal: its department head or team lead (and IT) add, test and
remove them and read their delivery log; IT also configures them in the admin."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.models import Group
from apps.portal.views.common import allow, group_or_404
from apps.webhooks import selectors, services
from apps.webhooks.forms import WebhookForm


def _configurable(request, slug: str) -> Group:
    group = group_or_404(slug)
    allow(
        selectors.may_configure(request.user, group),
        f"Only IT and the department head or team lead of {group} configure its webhooks.",
    )
    return group


def _page(request, group: Group, form: WebhookForm, status: int = 200):
    context = {
        "group": group,
        "form": form,
        "webhooks": selectors.webhooks_of(group),
        "deliveries": selectors.deliveries_of(group),
    }
    return render(request, "portal/webhooks.html", context, status=status)


@login_required
def webhooks(request, slug: str):
    group = _configurable(request, slug)
    if request.method != "POST":
        return _page(request, group, WebhookForm())
    form = WebhookForm(request.POST)
    if not form.is_valid():
        return _page(request, group, form, status=400)
    webhook = services.create_webhook(group=group, **form.cleaned_data)
    messages.success(request, f"Webhook {webhook} added; send it a test message to check it.")
    return redirect("portal:webhooks", slug=group.slug)


@login_required
@require_POST
def webhook_test(request, slug: str, pk: int):
    group = _configurable(request, slug)
    webhook = get_object_or_404(selectors.webhooks_of(group), pk=pk)
    services.send_test(webhook)
    messages.success(request, f"Test message to {webhook} sent; the delivery log shows how it went.")
    return redirect("portal:webhooks", slug=group.slug)


@login_required
@require_POST
def webhook_remove(request, slug: str, pk: int):
    group = _configurable(request, slug)
    webhook = get_object_or_404(selectors.webhooks_of(group), pk=pk)
    services.remove_webhook(webhook)
    messages.success(request, f"Webhook {webhook} removed.")
    return redirect("portal:webhooks", slug=group.slug)
