from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from broker.api import ops

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:overview"), name="root"),
    path("console/", include("console.urls")),
    path("healthz", ops.healthz, name="healthz"),
    path("metrics", ops.metrics, name="metrics"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include("broker.api.urls")),
    path("admin/", admin.site.urls),
]

handler400 = "broker.api.exceptions.bad_request_view"
handler403 = "broker.api.exceptions.permission_denied_view"
handler404 = "broker.api.exceptions.not_found_view"
handler500 = "broker.api.exceptions.server_error_view"
