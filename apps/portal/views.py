"""Portal pages. Views stay thin: they ask selectors for what to show."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from apps.pools.selectors import estate_overview


@login_required
def home(request):
    return render(request, "portal/home.html", estate_overview())
