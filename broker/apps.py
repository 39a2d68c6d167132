from django.apps import AppConfig


class BrokerConfig(AppConfig):
    name = "broker"
    verbose_name = "Halfmoon broker"
    default_auto_field = "django.db.models.BigAutoField"
