"""Klique control plane: Django project package (settings, urls, Celery app)."""
