"""ASGI entry point of the bare baseline (``uvicorn bare.asgi:application``)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bare.settings")
application = get_asgi_application()
