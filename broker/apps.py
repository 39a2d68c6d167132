from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Halfmoon broker"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from broker import lookups  # noqa: F401 - connects the cache invalidation signals
