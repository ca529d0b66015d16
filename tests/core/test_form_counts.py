"""Forms per request (docs/limits.md): every admin inline and formset is capped at what a person
needs, so that a POST claiming thousands of forms is refused before they are built."""

import pytest
from django.contrib import admin

from apps.core.formsets import CappedInline
from apps.whatif.forms import MAX_CHANGE_ROWS, ChangeFormSet

INLINES = sorted(
    {inline for model_admin in admin.site._registry.values() for inline in model_admin.inlines},
    key=lambda inline: inline.__name__,
)


@pytest.mark.parametrize("inline", INLINES, ids=[inline.__name__ for inline in INLINES])
def test_every_admin_inline_is_capped(inline):
    assert issubclass(inline, CappedInline)


def test_the_what_if_rows_are_capped_and_checked():
    assert ChangeFormSet.max_num == ChangeFormSet.absolute_max == MAX_CHANGE_ROWS
    assert ChangeFormSet.validate_max
