"""The one way services save a model: set fields, run every validation rule, save."""

from django.db import models


def validated_save(instance: models.Model, **fields) -> models.Model:
    for name, value in fields.items():
        setattr(instance, name, value)
    instance.full_clean()
    instance.save()
    return instance
