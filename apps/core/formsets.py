"""How many forms one request may carry (docs/limits.md, "Forms per request"). Django builds every
form a POST claims up to a formset's ``absolute_max`` (2,000 by default) before it refuses any, so
each formset and admin inline here is capped at what a person needs."""

NEW_ROWS = 50


class CappedInline:
    """An admin inline that takes its object's existing rows plus at most ``new_rows`` new ones
    (none without the add permission). A POST claiming more forms is refused with the formset's
    "Please submit at most N forms." before the forms beyond the cap are built."""

    new_rows = NEW_ROWS

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        existing = 0
        if obj is not None and obj.pk is not None:
            existing = self.get_queryset(request).filter(**{formset.fk.name: obj}).count()
        new = self.new_rows if self.has_add_permission(request, obj) else 0
        formset.max_num = formset.absolute_max = existing + new
        return formset
