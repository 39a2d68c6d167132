"""WSGI entry point (HTTP only; the console's websockets need ``halfmoon.asgi``, which also
serves ``/static/``). Refuses to start with the development ``SECRET_KEY`` unless
``DJANGO_DEBUG`` is on (``halfmoon.security``)."""

import os

from django.core.wsgi import get_wsgi_application

from halfmoon.security import serving_secret_key_require

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
application = get_wsgi_application()
serving_secret_key_require("web server")
