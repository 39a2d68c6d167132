"""api-v1's views, one module per area (``broker/api/urls.py`` routes them): each validates its
input serializer, calls one service or selector and serializes the answer."""
