from django.apps import AppConfig


class SessionsConfig(AppConfig):
    name = "apps.sessions"
    label = "klique_sessions"  # "sessions" is django.contrib.sessions' label
    verbose_name = "Sessions"
