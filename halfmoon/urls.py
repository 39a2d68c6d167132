from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from broker.api.health import healthz, metrics

urlpatterns = [
    # api-v1 first: Django tries the routes in order, and every producer's request is one.
    path("api/v1/", include("broker.api.urls")),
    path("", RedirectView.as_view(pattern_name="console:overview"), name="root"),
    path("console/", include("console.urls")),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler400 = "halfmoon.errors.handler400"
handler403 = "halfmoon.errors.handler403"
handler404 = "halfmoon.errors.handler404"
handler500 = "halfmoon.errors.handler500"
