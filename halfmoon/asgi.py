"""ASGI entry point: HTTP through Django, websockets through Channels (served by uvicorn).

HTTP requests go through ``halfmoon.serving.PooledHTTP``: Django's WSGI handler on
``HALFMOON_WEB_THREADS`` threads, a long poll's wait in the event loop.

Refuses to start with the development ``SECRET_KEY`` unless ``DJANGO_DEBUG`` is on
(``halfmoon.security``). ``/static/`` (the admin's and the offline Swagger UI's assets) is
answered by servestatic from ``STATIC_ROOT`` before Django sees the request, so API requests
pass no static-file middleware.

Request bodies (``halfmoon.body_limit``): in front of both handlers, ``BodyLimitMiddleware``
refuses a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` with 413 as soon as the bytes received pass
it; ``PooledHTTP`` then states the length of a chunked body (Django and DRF read no body without
one). Websockets pass neither.
"""

import logging
import os
from pathlib import Path
from typing import Any

import django
from django.conf import settings
from servestatic import ServeStaticASGI

from halfmoon.security import serving_secret_key_require

logger = logging.getLogger("halfmoon.asgi")

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "halfmoon.settings")
django.setup(set_prefix=False)  # as django.core.asgi.get_asgi_application does

from halfmoon.body_limit import BodyLimitMiddleware  # noqa: E402 - after setup
from halfmoon.serving import PooledHTTP  # noqa: E402

serving_secret_key_require("web server")


def static_files_app(app: Any) -> ServeStaticASGI:
    """``app`` behind servestatic, serving ``STATIC_URL`` from ``STATIC_ROOT`` (filled by
    ``manage.py collectstatic``) with cache headers of 60 s; with ``DEBUG`` on, files are
    looked up on each request (collected again without a restart) and not cached.

    Without ``DEBUG``, a missing ``STATIC_ROOT`` serves no files (the admin's and /api/docs/
    pages lose their styles) and logs a warning saying to run collectstatic.
    """
    static = ServeStaticASGI(app, autorefresh=settings.DEBUG, max_age=0 if settings.DEBUG else 60)
    root = Path(settings.STATIC_ROOT)
    if settings.DEBUG or root.is_dir():
        static.add_files(root, prefix=settings.STATIC_URL)
    else:
        logger.warning("No static files at %s: run manage.py collectstatic --noinput", root)
    return static


from channels.auth import AuthMiddlewareStack  # noqa: E402 - after Django is set up
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from console.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": BodyLimitMiddleware(static_files_app(PooledHTTP())),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)
