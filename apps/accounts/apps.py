from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Groups and people"

    def ready(self) -> None:
        from allauth.account.signals import user_logged_in

        from apps.accounts.sso import on_user_logged_in

        user_logged_in.connect(on_user_logged_in, dispatch_uid="accounts.sso_roles")
