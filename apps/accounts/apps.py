from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Groups and people"

    def ready(self) -> None:
        from allauth.account.signals import user_logged_in

        from apps.accounts.sso import on_user_logged_in

        user_logged_in.connect(on_user_logged_in, dispatch_uid="accounts.sso_roles")

        from django.db.models.signals import post_delete, post_save

        from apps.accounts.models import Group, Membership
        from apps.core import memo

        # A write in a request drops what the request remembered of it (apps.core.memo); bulk
        # writes and queryset updates send no signal, so those that read again after call forget.
        # A group's move changes whether a membership's group is a root, so it drops both.
        for model, kinds in ((Membership, ("memberships",)), (Group, ("groups", "memberships"))):
            for signal in (post_save, post_delete):
                signal.connect(
                    lambda sender, kinds=kinds, **kwargs: [memo.forget(kind) for kind in kinds],
                    sender=model,
                    weak=False,
                    dispatch_uid=f"accounts.memo.{model.__name__}.{signal is post_save}",
                )
