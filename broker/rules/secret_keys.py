"""The development ``SECRET_KEY``: what Django signs with when no key is set, refused in
production (``halfmoon.security``) and by the commands that encrypt SecretKeys
(``broker.services.access.secrets``)."""

DEVELOPMENT_SECRET_KEY = "halfmoon-insecure-development-key-change-me"
"""``SECRET_KEY`` when neither ``DJANGO_SECRET_KEY`` nor ``DJANGO_SECRET_KEY_FILE`` is set;
accepted only with ``DJANGO_DEBUG`` on."""
