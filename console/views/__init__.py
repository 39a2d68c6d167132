"""The console's pages, one module per area; each module lists its routes in ``urlpatterns``
(names in the ``console`` namespace), gathered by ``console.urls``. Views are thin: reads come
from selectors, writes from the broker's services."""
