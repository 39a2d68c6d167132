"""WSGI entry point (HTTP only; the console's websockets need ``halfmoon.asgi``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
application = get_wsgi_application()
